package api

import "github.com/volplane/volplane/structs"

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
