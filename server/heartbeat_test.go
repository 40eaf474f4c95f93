package server

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

func TestHeartbeat_SilentNodeMarkedDownThenBack(t *testing.T) {
	s := TestServer(t, func(c *Config) {
		c.HeartbeatTTL = 300 * time.Millisecond
		c.NodeGracePeriod = 300 * time.Millisecond
	})
	WaitForLeader(t, s)
	node := registerNode(t, s, "dev")

	nodeStatus := func() string {
		n, err := s.State().NodeByID(nil, node.ID)
		must.NoError(t, err)
		return n.Status
	}
	// Heartbeats keep it ready past several deadlines.
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		var resp structs.NodeUpdateResponse
		must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{
			NodeID: node.ID, SecretID: node.SecretID, Status: structs.NodeStatusReady,
		}, &resp))
		must.Eq(t, structs.NodeStatusReady, nodeStatus())
		time.Sleep(50 * time.Millisecond) // the heartbeat interval itself
	}

	// Silence: down after TTL plus grace.
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return nodeStatus() == structs.NodeStatusDown, nil
	})

	// Back: a heartbeat makes it ready again.
	var resp structs.NodeUpdateResponse
	must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{
		NodeID: node.ID, SecretID: node.SecretID, Status: structs.NodeStatusReady,
	}, &resp))
	must.Eq(t, structs.NodeStatusReady, nodeStatus())

	// The leader answers with when it last heard from the node.
	var got structs.SingleNodeResponse
	must.NoError(t, s.RPC("Node.GetNode", &structs.NodeSpecificRequest{NodeID: node.ID}, &got))
	must.True(t, time.Since(got.Node.LastHeartbeat) < time.Minute)
	var list structs.NodeListResponse
	must.NoError(t, s.RPC("Node.List", &structs.NodeListRequest{}, &list))
	must.Eq(t, got.Node.LastHeartbeat, list.Nodes[0].LastHeartbeat)
	stored, err := s.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.True(t, stored.LastHeartbeat.IsZero(), must.Sprint("it is not written to state"))
}

func TestHeartbeat_NewLeaderRestartsClocks(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		c.HeartbeatTTL = 200 * time.Millisecond
		c.NodeGracePeriod = 200 * time.Millisecond
	})
	leader := WaitForLeader(t, servers...)
	node := registerNode(t, leader, "dev")
	must.NoError(t, leader.Shutdown())
	newLeader := WaitForLeaderOf(t, followers(servers, leader))
	// The new leader knows nothing of the node's last heartbeat, yet it
	// marks the silent node down after its own deadline.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		n, err := newLeader.State().NodeByID(nil, node.ID)
		return err == nil && n.Status == structs.NodeStatusDown, err
	})
}

// A server that becomes leader for the first time serves writes, heartbeats
// among them, as soon as raft elects it, before start runs after the
// barrier. Such a heartbeat must not arm a timer that start leaves behind
// and that later marks the live node down.
func TestHeartbeat_ServedBeforeLeadershipEstablished(t *testing.T) {
	s := TestServer(t, func(c *Config) {
		c.HeartbeatTTL = 300 * time.Millisecond
		c.NodeGracePeriod = 300 * time.Millisecond
	})
	WaitForLeader(t, s)
	node := registerNode(t, s, "dev")

	h := newHeartbeats(s) // as on a server that was never leader
	h.reset(node.ID)      // served between the election and the barrier
	h.start()
	defer h.stop()
	start := time.Now()
	for time.Since(start) < 4*h.deadline() {
		// Steady heartbeats, seen by both trackers.
		h.reset(node.ID)
		s.heartbeats.reset(node.ID)
		n, err := s.State().NodeByID(nil, node.ID)
		must.NoError(t, err)
		must.Eq(t, structs.NodeStatusReady, n.Status, must.Sprintf("a heartbeating node was marked down %s after the leader started", time.Since(start)))
		time.Sleep(50 * time.Millisecond) // the heartbeat interval itself
	}
}
