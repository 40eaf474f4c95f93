package api

import "github.com/volplane/volplane/structs"

// Nodes is the node endpoints.
type Nodes struct{ c *Client }

// Nodes returns the node endpoints.
func (c *Client) Nodes() *Nodes { return &Nodes{c: c} }

// List returns the node stubs.
func (n *Nodes) List(q *QueryOptions) ([]*structs.NodeListStub, *QueryMeta, error) {
	var out []*structs.NodeListStub
	qm, err := n.c.query("/v1/nodes", q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, qm, nil
}

// Info reads one node with its plugin fingerprints.
func (n *Nodes) Info(id string, q *QueryOptions) (*structs.Node, *QueryMeta, error) {
	var out structs.Node
	qm, err := n.c.query("/v1/node/"+escape(id), q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, qm, nil
}
