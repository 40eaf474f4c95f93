package server

import (
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// Operator holds the operator's cluster maintenance calls.
type Operator struct {
	srv *Server
}

// RaftListPeers returns the Raft configuration as the leader sees it.
func (e *Operator) RaftListPeers(args *structs.GenericRequest, reply *structs.RaftConfigurationResponse) error {
	if done, err := e.srv.forward("Operator.RaftListPeers", args, args, reply); done {
		return err
	}
	servers, index, err := e.srv.raftServers()
	if err != nil {
		return err
	}
	reply.Servers, reply.Index = servers, index
	return nil
}

// raftServers is the Raft configuration as this server sees it, with the
// servers' names and which one leads, and the configuration's index.
func (s *Server) raftServers() ([]*structs.RaftServer, uint64, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, raftError(err)
	}
	names := map[string]string{}
	for _, m := range s.members.all() {
		names[m.ID] = m.Name
	}
	leaderAddr, _ := s.raft.LeaderWithID()
	var out []*structs.RaftServer
	for _, srv := range f.Configuration().Servers {
		out = append(out, &structs.RaftServer{
			ID:           string(srv.ID),
			Node:         names[string(srv.ID)],
			Address:      string(srv.Address),
			Leader:       srv.Address == leaderAddr,
			Voter:        srv.Suffrage == raft.Voter,
			RaftProtocol: "3",
		})
	}
	return out, f.Index(), nil
}

// RaftRemovePeer removes a server from the Raft configuration, by ID or by
// address. It is how an operator retires a dead server for good.
func (e *Operator) RaftRemovePeer(args *structs.RaftPeerRequest, reply *structs.GenericResponse) error {
	if done, err := e.srv.forward("Operator.RaftRemovePeer", args, args, reply); done {
		return err
	}
	if (args.ID == "") == (args.Address == "") {
		return structs.ErrInvalid("remove peer: give exactly one of a peer ID or a peer address")
	}
	f := e.srv.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raftError(err)
	}
	var target *raft.Server
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == args.ID || (args.Address != "" && string(srv.Address) == args.Address) {
			target = &srv
			break
		}
	}
	if target == nil {
		if args.ID != "" {
			return structs.ErrNotFound("no raft peer with ID %q", args.ID)
		}
		return structs.ErrNotFound("no raft peer with address %q", args.Address)
	}
	e.srv.members.forget(string(target.ID))
	rf := e.srv.raft.RemoveServer(target.ID, 0, 0)
	if err := e.srv.waitIndexed(rf); err != nil {
		return err
	}
	e.srv.logger.Info("removed raft peer", "id", target.ID, "address", target.Address)
	reply.Index = rf.Index()
	return nil
}
