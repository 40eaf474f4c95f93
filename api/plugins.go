package api

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// Plugins is the CSI plugin endpoints.
type Plugins struct{ c *Client }

// Plugins returns the plugin endpoints.
func (c *Client) Plugins() *Plugins { return &Plugins{c: c} }

// List returns the plugin stubs.
func (p *Plugins) List(q *QueryOptions) ([]*structs.CSIPluginListStub, *QueryMeta, error) {
	var out []*structs.CSIPluginListStub
	r := p.c.newQuery(http.MethodGet, "/v1/plugins", q)
	r.params.Set("type", structs.VolumeTypeCSI)
	h, rtt, err := p.c.do(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, parseQueryMeta(h, rtt), nil
}

// Info reads one plugin with its controller and node instances.
func (p *Plugins) Info(id string, q *QueryOptions) (*structs.CSIPlugin, *QueryMeta, error) {
	return get[structs.CSIPlugin](p.c, "/v1/plugin/csi/"+escape(id), q)
}
