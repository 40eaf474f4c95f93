package server

import (
	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/structs"
)

// defaultDatacenter is the datacenter a server reports: servers have none
// of their own in volplane, and "dc1" is Nomad's default.
const defaultDatacenter = "dc1"

// agentInfo is what this server says about itself and the servers of its
// Raft configuration, for the HTTP API's agent routes.
func (s *Server) agentInfo() httpapi.AgentInfo {
	info := httpapi.AgentInfo{
		Name: s.config.NodeName, Region: s.config.Region, Datacenter: defaultDatacenter,
		NodeID: s.nodeID, RPCAddr: s.rpcAddr, HTTPAddr: s.HTTPAddr(),
	}
	if servers, _, err := s.raftServers(); err == nil {
		info.Servers = servers
	}
	leader, _ := s.raft.LeaderWithID()
	info.KnownLeader = leader != ""
	info.RaftStats = s.raft.Stats()
	return info
}

// authorizeRoute checks a token against the ACL row of an HTTP route that
// makes no RPC call (the routes' names in aclRules), on this server.
func (s *Server) authorizeRoute(endpoint, token, namespace string) error {
	args := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AuthToken: token, Namespace: namespace, AllowStale: true}}
	return s.authorize(endpoint, args, args)
}
