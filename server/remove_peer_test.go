package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// A live server removed with remove-peer (an operator's mistake, or a
// server retired while still running) keeps its Raft running, as Nomad's
// servers do: its join loop asks again, the leader adds it back, and it
// applies the cluster's writes from then on. That holds for the leader
// too, which commits its own removal and steps down: with Raft's
// ShutdownOnRemove it stopped its Raft instead, and came back into the
// configuration as a voter that never answers.
func TestRaftRemovePeer_LiveServerRejoinsAndFollows(t *testing.T) {
	for _, which := range []string{"follower", "leader"} {
		t.Run(which, func(t *testing.T) { testRemoveLivePeer(t, which) })
	}
}

func testRemoveLivePeer(t *testing.T, which string) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	removed := followers(servers, leader)[0]
	if which == "leader" {
		removed = leader
	}

	var resp structs.GenericResponse
	must.NoError(t, leader.RPC("Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: removed.NodeID()}, &resp))
	var rest []*Server
	for _, s := range servers {
		if s != removed {
			rest = append(rest, s)
		}
	}
	leader = WaitForLeader(t, rest...)

	// Its join loop brings it back into the configuration.
	waitFor(t, 30*time.Second, func() (bool, error) {
		var cfg structs.RaftConfigurationResponse
		if err := leader.RPC("Operator.RaftListPeers", &structs.GenericRequest{}, &cfg); err != nil {
			return false, err
		}
		for _, srv := range cfg.Servers {
			if srv.ID == removed.NodeID() {
				return true, nil
			}
		}
		return false, fmt.Errorf("%s not in the configuration: %+v", removed.NodeID(), cfg.Servers)
	})

	// And it follows: it knows the leader, and a write through the leader
	// reaches its state.
	WaitForLeader(t, servers...)
	req := &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{{Name: "after-rejoin"}}}
	must.NoError(t, leader.RPC("Namespace.UpsertNamespaces", req, &structs.GenericResponse{}))
	waitFor(t, 10*time.Second, func() (bool, error) {
		ns, err := removed.State().NamespaceByName(nil, "after-rejoin")
		return ns != nil, err
	})
}

// A dead server removed with remove-peer stays removed when the leader
// changes soon after: the new leader still remembers the dead server's
// join calls from before (every server hears them), but adds only servers
// that asked it since its leadership began, and a dead one never asks.
func TestRaftRemovePeer_DeadServerStaysRemovedAcrossLeaderChange(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)
	dead, next := f[0], f[1]
	// Every server has heard the dead one's join calls lately.
	must.SliceNotEmpty(t, next.members.recent(joinMemberTTL, time.Time{}))
	must.NoError(t, dead.Shutdown())

	var resp structs.GenericResponse
	must.NoError(t, leader.RPC("Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: dead.NodeID()}, &resp))
	must.NoError(t, leader.waitFuture(leader.raft.LeadershipTransferToServer(raft.ServerID(next.NodeID()), raft.ServerAddress(next.RPCAddr()))))
	must.Eq(t, next, WaitForLeader(t, leader, next))

	// Two of the new leader's passes over its members, then the
	// configuration still lacks the dead server.
	base := next.reconciles.Load()
	waitFor(t, 10*time.Second, func() (bool, error) {
		return next.reconciles.Load() >= base+2, fmt.Errorf("%d passes", next.reconciles.Load()-base)
	})
	var cfg structs.RaftConfigurationResponse
	must.NoError(t, next.RPC("Operator.RaftListPeers", &structs.GenericRequest{}, &cfg))
	must.Len(t, 2, cfg.Servers, must.Sprintf("%+v", cfg.Servers))
	for _, srv := range cfg.Servers {
		must.NotEq(t, dead.NodeID(), srv.ID)
	}
}
