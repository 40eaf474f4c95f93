package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/volplane/volplane/structs"
)

// Volumes is the CSI volume endpoints.
type Volumes struct{ c *Client }

// Volumes returns the volume endpoints.
func (c *Client) Volumes() *Volumes { return &Volumes{c: c} }

// List returns one page of volume stubs. q.Prefix, q.PluginID, q.NodeID and
// the paging fields filter it; QueryMeta.NextToken names the next page.
func (v *Volumes) List(q *QueryOptions) ([]*structs.CSIVolListStub, *QueryMeta, error) {
	var out []*structs.CSIVolListStub
	r := v.c.newQuery(http.MethodGet, "/v1/volumes", q)
	r.params.Set("type", structs.VolumeTypeCSI)
	h, rtt, err := v.c.do(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, parseQueryMeta(h, rtt), nil
}

// Info reads one volume. The server returns it sanitized: no secrets, mount
// flags redacted, no publish contexts.
func (v *Volumes) Info(id string, q *QueryOptions) (*structs.CSIVolume, *QueryMeta, error) {
	return get[structs.CSIVolume](v.c, "/v1/volume/csi/"+escape(id), q)
}

// Register creates or updates volumes, all or nothing. The request goes to
// the path of the first volume, as Nomad's API does. It returns the
// server's warnings.
func (v *Volumes) Register(vols []*structs.CSIVolume, w *WriteOptions) ([]string, *WriteMeta, error) {
	if len(vols) == 0 || vols[0] == nil {
		return nil, nil, errors.New("no volume to register")
	}
	r := v.c.newWrite(http.MethodPut, "/v1/volume/csi/"+escape(vols[0].ID), w)
	// Only Volumes: the server refuses unknown fields, and the RPC request's
	// other fields (timestamp, forwarding mark) are the servers' own.
	r.body = &struct{ Volumes []*structs.CSIVolume }{Volumes: vols}
	var out writeResponse
	wm, err := v.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return out.Warnings, wm, nil
}

// Deregister removes a volume. With force, a volume still claimed by
// allocations that are all terminal or gone is removed from state too (the
// plugin is not called). It returns the server's warnings.
func (v *Volumes) Deregister(id string, force bool, w *WriteOptions) ([]string, *WriteMeta, error) {
	r := v.c.newWrite(http.MethodDelete, "/v1/volume/csi/"+escape(id), w)
	if force {
		r.params.Set("force", "true")
	}
	var out writeResponse
	wm, err := v.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return out.Warnings, wm, nil
}

// writeResponse is the body of a volume register or deregister answer.
type writeResponse struct {
	Warnings warningList
}

// warningList decodes Warnings either as a list of strings or as one string
// with a warning per line, which is how Nomad's API (and so volplane's)
// sends them.
type warningList []string

func (w *warningList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*w = nil
		for _, line := range strings.Split(one, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				*w = append(*w, line)
			}
		}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("Warnings is neither a string nor a list of strings")
	}
	*w = list
	return nil
}

// Create creates volumes in their plugin through a controller, then
// registers them; it returns the created volumes (without secrets).
func (v *Volumes) Create(vols []*structs.CSIVolume, w *WriteOptions) ([]*structs.CSIVolume, []string, *WriteMeta, error) {
	if len(vols) == 0 || vols[0] == nil {
		return nil, nil, nil, errors.New("no volume to create")
	}
	r := v.c.newWrite(http.MethodPut, "/v1/volume/csi/"+escape(vols[0].ID)+"/create", w)
	r.body = &struct{ Volumes []*structs.CSIVolume }{Volumes: vols}
	var out struct {
		Volumes  []*structs.CSIVolume
		Warnings warningList
	}
	wm, err := v.c.write(r, &out)
	if err != nil {
		return nil, nil, nil, err
	}
	return out.Volumes, out.Warnings, wm, nil
}

// Delete deletes a volume in its plugin, then deregisters it. secrets, when
// given, are merged over the volume's own for the plugin call.
func (v *Volumes) Delete(id string, secrets map[string]string, w *WriteOptions) (*WriteMeta, error) {
	r := v.c.newWrite(http.MethodDelete, "/v1/volume/csi/"+escape(id)+"/delete", w)
	r.header = secretsHeader(secrets)
	return v.c.write(r, nil)
}

// Detach releases now the volume's claims on a node and returns the steps
// the release took.
func (v *Volumes) Detach(id, nodeID string, w *WriteOptions) ([]string, error) {
	r := v.c.newWrite(http.MethodDelete, "/v1/volume/csi/"+escape(id)+"/detach", w)
	r.params.Set("node", nodeID)
	var out struct{ Steps []string }
	if _, err := v.c.write(r, &out); err != nil {
		return nil, err
	}
	return out.Steps, nil
}
