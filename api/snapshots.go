package api

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/volplane/volplane/structs"
)

// CreateSnapshot snapshots volumes through their plugins' controllers and
// returns the snapshots made. Each snapshot names its SourceVolumeID and,
// optionally, a Name, Secrets and Parameters for the plugin.
func (v *Volumes) CreateSnapshot(snaps []*structs.CSISnapshot, w *WriteOptions) ([]*structs.CSISnapshot, *WriteMeta, error) {
	if len(snaps) == 0 {
		return nil, nil, errors.New("no snapshot to create")
	}
	r := v.c.newWrite(http.MethodPut, "/v1/volumes/snapshot", w)
	r.body = &struct{ Snapshots []*structs.CSISnapshot }{Snapshots: snaps}
	var out struct{ Snapshots []*structs.CSISnapshot }
	wm, err := v.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return out.Snapshots, wm, nil
}

// ListSnapshots returns one page of a plugin's snapshots; q.PerPage and
// q.NextToken page through them, and QueryMeta.NextToken is the token of
// the next page ("" after the last). secrets, when given, go to the
// plugin's call.
func (v *Volumes) ListSnapshots(pluginID string, secrets map[string]string, q *QueryOptions) ([]*structs.CSISnapshot, *QueryMeta, error) {
	r := v.c.newQuery(http.MethodGet, "/v1/volumes/snapshot", q)
	r.params.Set("plugin_id", pluginID)
	r.header = secretsHeader(secrets)
	var out struct {
		Snapshots []*structs.CSISnapshot
		NextToken string
	}
	h, rtt, err := v.c.do(r, &out)
	if err != nil {
		return nil, nil, err
	}
	qm := parseQueryMeta(h, rtt)
	qm.NextToken = out.NextToken
	return out.Snapshots, qm, nil
}

// DeleteSnapshot deletes a snapshot of a plugin.
func (v *Volumes) DeleteSnapshot(pluginID, snapshotID string, secrets map[string]string, w *WriteOptions) (*WriteMeta, error) {
	r := v.c.newWrite(http.MethodDelete, "/v1/volumes/snapshot", w)
	r.params.Set("plugin_id", pluginID)
	r.params.Set("snapshot_id", snapshotID)
	r.header = secretsHeader(secrets)
	return v.c.write(r, nil)
}

// ListExternal returns one page of the volumes a plugin's storage provider
// holds, each with the volplane volume registered with its external ID;
// QueryMeta.NextToken is the token of the next page.
func (v *Volumes) ListExternal(pluginID string, q *QueryOptions) ([]*structs.CSIVolumeExternalStub, *QueryMeta, error) {
	r := v.c.newQuery(http.MethodGet, "/v1/volumes/external", q)
	r.params.Set("plugin_id", pluginID)
	var out struct {
		Volumes   []*structs.CSIVolumeExternalStub
		NextToken string
	}
	h, rtt, err := v.c.do(r, &out)
	if err != nil {
		return nil, nil, err
	}
	qm := parseQueryMeta(h, rtt)
	qm.NextToken = out.NextToken
	return out.Volumes, qm, nil
}

// secretsHeader carries a plugin call's secrets as Nomad's client does, in
// X-Nomad-CSI-Secrets; nil when there are none.
func secretsHeader(secrets map[string]string) http.Header {
	if len(secrets) == 0 {
		return nil
	}
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		pairs = append(pairs, k+"="+secrets[k])
	}
	return http.Header{"X-Nomad-Csi-Secrets": {strings.Join(pairs, ",")}}
}

// System is the cluster-wide maintenance endpoints.
type System struct{ c *Client }

// System returns the maintenance endpoints.
func (c *Client) System() *System { return &System{c: c} }

// GarbageCollect removes now every node that is down and has no claim
// left, and every plugin no node runs and no volume names.
func (s *System) GarbageCollect(w *WriteOptions) (*structs.GCResponse, error) {
	r := s.c.newWrite(http.MethodPut, "/v1/system/gc", w)
	var out structs.GCResponse
	wm, err := s.c.write(r, &out)
	if err != nil {
		return nil, err
	}
	out.Index = wm.LastIndex
	return &out, nil
}
