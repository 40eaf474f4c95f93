package api

// Status is the cluster status endpoints.
type Status struct{ c *Client }

// Status returns the status endpoints.
func (c *Client) Status() *Status { return &Status{c: c} }

// Leader returns the RPC address of the Raft leader, "" when there is none.
func (s *Status) Leader() (string, error) {
	var out string
	_, err := s.c.query("/v1/status/leader", nil, &out)
	return out, err
}

// Peers returns the RPC addresses of the Raft peers.
func (s *Status) Peers() ([]string, error) {
	var out []string
	_, err := s.c.query("/v1/status/peers", nil, &out)
	return out, err
}
