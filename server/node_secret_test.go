package server

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestNodeSecret_NeverInTheLog: a node registered (through a follower) and
// heartbeating with status changes leaves its secret in no Raft entry and
// no server's state, and its calls still authenticate on every server.
func TestNodeSecret_NeverInTheLog(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		top := leader.clusterMaxMessageType()
		return top == structs.MaxMessageType(), fmt.Errorf("the servers announce entry types up to %d", top)
	})
	before := settled(t, leader)
	node := registerNodeSecret(t, leader, servers, before)

	types := entryTypesSince(t, leader, before, "")
	must.Eq(t, 1, types[structs.NodeRegisterHashedRequestType])
	must.Zero(t, types[structs.NodeRegisterRequestType])
	must.Eq(t, 2, types[structs.NodeUpdateStatusRequestType])
	must.MapEmpty(t, entryTypesSince(t, leader, before, node.SecretID), must.Sprint("entries hold the node's secret"))
}

// TestNodeSecret_InTheLogOnlyForOlderServers: while a server announces a
// build that needs the secret itself, the leader writes registrations in
// the older entry type, secret included; every server still stores only
// its hash, and heartbeats never carry it.
func TestNodeSecret_InTheLogOnlyForOlderServers(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			c.maxMessageType = structs.CSIVolumeClaimBatchRequestType
		}
	})
	leader := WaitForLeader(t, servers...)
	// Server 2 is heard from, as a build that stops short of type 30.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		top := leader.clusterMaxMessageType()
		return top == structs.CSIVolumeClaimBatchRequestType, fmt.Errorf("the servers announce entry types up to %d", top)
	})
	before := settled(t, leader)
	node := registerNodeSecret(t, leader, servers, before)

	types := entryTypesSince(t, leader, before, "")
	must.Eq(t, 1, types[structs.NodeRegisterRequestType])
	must.Zero(t, types[structs.NodeRegisterHashedRequestType])
	holding := entryTypesSince(t, leader, before, node.SecretID)
	must.Eq(t, 1, holding[structs.NodeRegisterRequestType])
	must.Zero(t, holding[structs.NodeUpdateStatusRequestType])
}

// registerNodeSecret registers a node through a follower, has it go down
// and up again, and checks that every server authenticates it by its
// secret while storing only the secret's hash.
func registerNodeSecret(t *testing.T, leader *Server, servers []*Server, before uint64) *structs.Node {
	t.Helper()
	follower := servers[0]
	if follower == leader {
		follower = servers[1]
	}
	node := mock.NodeWithController("dev")
	var resp structs.NodeUpdateResponse
	must.NoError(t, follower.RPC("Node.Register", &structs.NodeRegisterRequest{Node: node}, &resp))
	for _, status := range []string{structs.NodeStatusDown, structs.NodeStatusReady} {
		must.NoError(t, leader.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{
			NodeID: node.ID, SecretID: node.SecretID, Status: status}, &resp))
	}
	last := settled(t, leader)
	must.Greater(t, before, last)
	for _, s := range servers {
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			return s.raft.AppliedIndex() >= last, fmt.Errorf("server applied %d of %d", s.raft.AppliedIndex(), last)
		})
		stored, err := s.State().NodeByID(nil, node.ID)
		must.NoError(t, err)
		must.Eq(t, "", stored.SecretID)
		must.Eq(t, structs.HashACLSecret(node.SecretID), stored.SecretHash)
		// Every server would take the node's calls, and refuse another
		// secret.
		must.True(t, stored.SecretMatches(node.SecretID))
		must.False(t, stored.SecretMatches("another"))
	}
	err := leader.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: node.ID, SecretID: "another"}, &resp)
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err))
	// Readers of the node get neither the secret nor its hash.
	var got structs.SingleNodeResponse
	must.NoError(t, follower.RPC("Node.GetNode", &structs.NodeSpecificRequest{NodeID: node.ID}, &got))
	must.Eq(t, node.Name, got.Node.Name)
	must.Eq(t, "", got.Node.SecretID)
	must.Nil(t, got.Node.SecretHash)
	return node
}

// entryTypesSince counts the leader's log entries after index before by
// type, only those that hold secret when it is not empty.
func entryTypesSince(t *testing.T, s *Server, before uint64, secret string) map[structs.MessageType]int {
	t.Helper()
	out := map[structs.MessageType]int{}
	for idx := before + 1; idx <= s.raft.LastIndex(); idx++ {
		var l raft.Log
		must.NoError(t, s.raftStore.logs.GetLog(idx, &l))
		if l.Type != raft.LogCommand || (secret != "" && !bytes.Contains(l.Data, []byte(secret))) {
			continue
		}
		out[structs.MessageType(l.Data[0])]++
	}
	return out
}
