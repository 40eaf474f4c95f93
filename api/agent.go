package api

import "github.com/volplane/volplane/structs"

// Agent is the agent endpoints.
type Agent struct{ c *Client }

// Agent returns the agent endpoints.
func (c *Client) Agent() *Agent { return &Agent{c: c} }

// Self returns what the answering agent says about itself: its
// configuration (what is not secret), its member entry and its stats, Raft's
// own among them.
func (a *Agent) Self(q *QueryOptions) (*structs.AgentSelf, error) {
	out, _, err := get[structs.AgentSelf](a.c, "/v1/agent/self", q)
	return out, err
}

// Members returns the servers of the Raft configuration as the answering
// agent sees them, as Nomad's server members.
func (a *Agent) Members(q *QueryOptions) (*structs.ServerMembers, error) {
	out, _, err := get[structs.ServerMembers](a.c, "/v1/agent/members", q)
	return out, err
}
