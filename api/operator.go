package api

import (
	"errors"
	"net/http"

	"github.com/volplane/volplane/structs"
)

// Operator is the operator endpoints.
type Operator struct{ c *Client }

// Operator returns the operator endpoints.
func (c *Client) Operator() *Operator { return &Operator{c: c} }

// RaftGetConfiguration returns the Raft configuration as the leader sees it
// (any server's own view with q.AllowStale).
func (o *Operator) RaftGetConfiguration(q *QueryOptions) (*structs.RaftConfigurationResponse, error) {
	var out structs.RaftConfigurationResponse
	if _, err := o.c.query("/v1/operator/raft/configuration", q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RaftRemovePeerByID removes the server with the given Raft ID.
func (o *Operator) RaftRemovePeerByID(id string, w *WriteOptions) error {
	if id == "" {
		return errors.New("missing peer id")
	}
	return o.removePeer("id", id, w)
}

// RaftRemovePeerByAddress removes the server with the given Raft address.
func (o *Operator) RaftRemovePeerByAddress(addr string, w *WriteOptions) error {
	if addr == "" {
		return errors.New("missing peer address")
	}
	return o.removePeer("address", addr, w)
}

func (o *Operator) removePeer(key, value string, w *WriteOptions) error {
	r := o.c.newWrite(http.MethodDelete, "/v1/operator/raft/peer", w)
	r.params.Set(key, value)
	_, err := o.c.write(r, nil)
	return err
}
