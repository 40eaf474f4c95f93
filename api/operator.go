package api

import (
	"errors"
	"net/http"
	"time"

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

// MetricsFormatPrometheus is the format of Metrics that asks for the
// Prometheus text format rather than JSON.
const MetricsFormatPrometheus = "prometheus"

// Metrics returns the answering agent's metrics as it sends them: the JSON
// of structs.MetricsSummary, or with format MetricsFormatPrometheus the
// Prometheus text format.
func (o *Operator) Metrics(format string, q *QueryOptions) ([]byte, error) {
	r := o.c.newQuery(http.MethodGet, "/v1/metrics", q)
	if format != "" {
		r.params.Set("format", format)
	}
	var raw []byte
	if _, _, err := o.c.do(r, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// MetricsSummary returns the answering agent's metrics, decoded.
func (o *Operator) MetricsSummary(q *QueryOptions) (*structs.MetricsSummary, error) {
	out, _, err := get[structs.MetricsSummary](o.c, "/v1/metrics", q)
	return out, err
}

// Security reports how the answering server is protected.
func (o *Operator) Security(q *QueryOptions) (*structs.SecurityStatus, error) {
	out, _, err := get[structs.SecurityStatus](o.c, "/v1/operator/security", q)
	return out, err
}

// NodeIntroCreateOptions describe a new node introduction token.
type NodeIntroCreateOptions struct {
	Name      string
	TTL       time.Duration // 0: no expiry
	SingleUse bool
}

// NodeIntroCreate creates a node introduction token; the answer carries its
// SecretID, which is never shown again.
func (o *Operator) NodeIntroCreate(opts NodeIntroCreateOptions, w *WriteOptions) (*structs.NodeIntroCreateResponse, error) {
	r := o.c.newWrite(http.MethodPut, "/v1/operator/node-intro", w)
	body := map[string]any{"Name": opts.Name, "SingleUse": opts.SingleUse}
	if opts.TTL > 0 {
		body["TTL"] = opts.TTL.String()
	}
	r.body = body
	var out structs.NodeIntroCreateResponse
	if _, err := o.c.write(r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NodeIntroList lists the node introduction tokens.
func (o *Operator) NodeIntroList(q *QueryOptions) ([]*structs.NodeIntroToken, *QueryMeta, error) {
	return list[*structs.NodeIntroToken](o.c, "/v1/operator/node-intro", q)
}

// NodeIntroDelete revokes a node introduction token.
func (o *Operator) NodeIntroDelete(accessorID string, w *WriteOptions) error {
	if accessorID == "" {
		return errors.New("missing accessor id")
	}
	_, err := o.c.write(o.c.newWrite(http.MethodDelete, "/v1/operator/node-intro/"+escape(accessorID), w), nil)
	return err
}

// KeyringRotate makes a new active root key; with full, every volume's
// secrets and mount flags are sealed again with it.
func (o *Operator) KeyringRotate(full bool, w *WriteOptions) (*structs.KeyringRotateResponse, error) {
	r := o.c.newWrite(http.MethodPut, "/v1/operator/keyring/rotate", w)
	if full {
		r.params.Set("full", "true")
	}
	var out structs.KeyringRotateResponse
	if _, err := o.c.write(r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// KeyringList lists the root keys.
func (o *Operator) KeyringList(q *QueryOptions) ([]*structs.RootKey, *QueryMeta, error) {
	return list[*structs.RootKey](o.c, "/v1/operator/keyring/keys", q)
}
