package api

import "github.com/volplane/volplane/structs"

// Allocations is the allocation endpoints.
type Allocations struct{ c *Client }

// Allocations returns the allocation endpoints.
func (c *Client) Allocations() *Allocations { return &Allocations{c: c} }

// Info reads one allocation.
func (a *Allocations) Info(id string, q *QueryOptions) (*structs.Allocation, *QueryMeta, error) {
	return get[structs.Allocation](a.c, "/v1/allocation/"+escape(id), q)
}

// List returns allocations; q.Prefix filters them by ID.
func (a *Allocations) List(q *QueryOptions) ([]*structs.Allocation, *QueryMeta, error) {
	return list[*structs.Allocation](a.c, "/v1/allocations", q)
}
