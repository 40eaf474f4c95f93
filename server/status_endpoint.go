package server

import (
	"sort"

	"github.com/volplane/volplane/structs"
)

// Status answers questions about the cluster itself.
type Status struct {
	srv *Server
}

// Ping is a no-op used to check that a server answers.
func (e *Status) Ping(args *structs.GenericRequest, reply *struct{}) error {
	return nil
}

// Leader returns the leader's RPC address, or "" when there is none.
func (e *Status) Leader(args *structs.GenericRequest, reply *string) error {
	if done, err := e.srv.forward("Status.Leader", args, args, reply); done {
		return err
	}
	addr, _ := e.srv.raft.LeaderWithID()
	*reply = string(addr)
	return nil
}

// Peers returns the RPC addresses of the servers in the Raft configuration.
func (e *Status) Peers(args *structs.GenericRequest, reply *[]string) error {
	if done, err := e.srv.forward("Status.Peers", args, args, reply); done {
		return err
	}
	f := e.srv.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	out := []string{}
	for _, srv := range f.Configuration().Servers {
		out = append(out, string(srv.Address))
	}
	sort.Strings(out)
	*reply = out
	return nil
}

// Join is the cluster-formation handshake: a server introduces itself and
// learns who this server is, whether it has a configuration, and whom it
// knows. It is always answered locally.
func (e *Status) Join(args *structs.StatusJoinRequest, reply *structs.StatusJoinResponse) error {
	if err := structs.ValidateID("server id", args.Member.ID); err != nil {
		return structs.ErrInvalid("join: %v", err)
	}
	if args.Member.RPCAddr == "" {
		return structs.ErrInvalid("join: server %q sent no RPC address", args.Member.ID)
	}
	e.srv.members.observe(args.Member, true)
	all := e.srv.members.all()
	for _, m := range all {
		if m.ID == e.srv.nodeID {
			reply.Member = m
		}
	}
	reply.Known = all
	if f := e.srv.raft.GetConfiguration(); f.Error() != nil {
		e.srv.logger.Warn("reading the raft configuration for a join reply; it lists no peers", "error", f.Error())
	} else {
		for _, srv := range f.Configuration().Servers {
			reply.Peers = append(reply.Peers, string(srv.Address))
		}
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// HasNodeConn tells another server whether this one holds a session with a
// node, so a call for the node can be forwarded here. Always answered
// locally.
func (e *Status) HasNodeConn(args *structs.NodeSpecificRequest, reply *structs.NodeConnQueryResponse) error {
	if args.NodeID == "" {
		return structs.ErrInvalid("missing node id")
	}
	if c, ok := e.srv.nodeConns.get(args.NodeID); ok {
		reply.Connected = true
		reply.Established = c.established
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}
