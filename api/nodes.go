package api

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// Nodes is the node endpoints.
type Nodes struct{ c *Client }

// Nodes returns the node endpoints.
func (c *Client) Nodes() *Nodes { return &Nodes{c: c} }

// List returns the node stubs.
func (n *Nodes) List(q *QueryOptions) ([]*structs.NodeListStub, *QueryMeta, error) {
	return list[*structs.NodeListStub](n.c, "/v1/nodes", q)
}

// Info reads one node with its plugin fingerprints.
func (n *Nodes) Info(id string, q *QueryOptions) (*structs.Node, *QueryMeta, error) {
	return get[structs.Node](n.c, "/v1/node/"+escape(id), q)
}

// DrainOptions is what a drain update sends, as Nomad's: a DrainSpec
// starts or updates a drain, none ends it; MarkEligible makes the node
// eligible when the drain ends; Meta is kept in the node's LastDrain.
type DrainOptions struct {
	DrainSpec    *structs.DrainSpec
	MarkEligible bool
	Meta         map[string]string
}

// UpdateDrainOpts starts, updates or ends the drain of a node (by full
// ID), as Nomad's client.
func (n *Nodes) UpdateDrainOpts(nodeID string, opts *DrainOptions, w *WriteOptions) (*structs.NodeDrainUpdateResponse, error) {
	if opts == nil {
		opts = &DrainOptions{}
	}
	r := n.c.newWrite(http.MethodPut, "/v1/node/"+escape(nodeID)+"/drain", w)
	r.body = map[string]any{"NodeID": nodeID, "DrainSpec": opts.DrainSpec, "MarkEligible": opts.MarkEligible, "Meta": opts.Meta}
	var out structs.NodeDrainUpdateResponse
	wm, err := n.c.write(r, &out)
	if err != nil {
		return nil, err
	}
	out.Index = wm.LastIndex
	return &out, nil
}

// ToggleEligibility sets the scheduling eligibility of a node (by full
// ID), as Nomad's client.
func (n *Nodes) ToggleEligibility(nodeID string, eligible bool, w *WriteOptions) (*structs.NodeEligibilityUpdateResponse, error) {
	e := structs.NodeSchedulingEligible
	if !eligible {
		e = structs.NodeSchedulingIneligible
	}
	r := n.c.newWrite(http.MethodPut, "/v1/node/"+escape(nodeID)+"/eligibility", w)
	r.body = map[string]any{"NodeID": nodeID, "Eligibility": e}
	var out structs.NodeEligibilityUpdateResponse
	wm, err := n.c.write(r, &out)
	if err != nil {
		return nil, err
	}
	out.Index = wm.LastIndex
	return &out, nil
}
