package api

import (
	"errors"
	"net/http"

	"github.com/volplane/volplane/structs"
)

// Namespaces is the namespace endpoints.
type Namespaces struct{ c *Client }

// Namespaces returns the namespace endpoints.
func (c *Client) Namespaces() *Namespaces { return &Namespaces{c: c} }

// List returns the namespaces the token may see.
func (n *Namespaces) List(q *QueryOptions) ([]*structs.Namespace, *QueryMeta, error) {
	return list[*structs.Namespace](n.c, "/v1/namespaces", q)
}

// Info reads one namespace.
func (n *Namespaces) Info(name string, q *QueryOptions) (*structs.Namespace, *QueryMeta, error) {
	if name == "" {
		return nil, nil, errors.New("missing namespace name")
	}
	return get[structs.Namespace](n.c, "/v1/namespace/"+escape(name), q)
}

// Register creates or updates a namespace.
func (n *Namespaces) Register(ns *structs.Namespace, w *WriteOptions) (*WriteMeta, error) {
	if ns == nil || ns.Name == "" {
		return nil, errors.New("missing namespace name")
	}
	r := n.c.newWrite(http.MethodPut, "/v1/namespace/"+escape(ns.Name), w)
	r.body = map[string]any{"Name": ns.Name, "Description": ns.Description, "Meta": ns.Meta}
	return n.c.write(r, nil)
}

// Delete deletes a namespace that holds no volumes and no jobs.
func (n *Namespaces) Delete(name string, w *WriteOptions) (*WriteMeta, error) {
	if name == "" {
		return nil, errors.New("missing namespace name")
	}
	return n.c.write(n.c.newWrite(http.MethodDelete, "/v1/namespace/"+escape(name), w), nil)
}
