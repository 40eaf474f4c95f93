package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestRelease_AgentGoneClaimsWaitForTheNode: the claims of a node whose
// agent no server holds a connection with are kept (the node is not down)
// and say why they wait, without a call or a Raft write per claim each
// backoff period; once the agent connects again they are released, with
// the node step run on the node.
func TestRelease_AgentGoneClaimsWaitForTheNode(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		fastRelease(i, c)
		// The node must stay up (not past its grace) for the whole test.
		c.HeartbeatTTL, c.NodeGracePeriod = time.Minute, time.Minute
	})
	leader := WaitForLeader(t, servers...)
	ep, node, alloc, pool := releaseSetupConn(t, servers)

	// The agent goes away; its allocation was reported stopped.
	must.NoError(t, pool.Close())
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		err := leader.clientRPC.NodeReachable(t.Context(), node.ID)
		return err != nil, fmt.Errorf("the node is still reachable")
	})
	stopJob(t, leader, node, "holder")

	var claim *structs.CSIVolumeClaim
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		v := getVolume(t, leader, "rel", false)
		claim = v.PastClaims[alloc.ID]
		if claim == nil {
			return false, fmt.Errorf("no past claim yet")
		}
		return claim.Note != "", fmt.Errorf("past claim %+v", *claim)
	})
	must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, claim.State, must.Sprint("the node step has not run: the claim stays"))
	must.StrContains(t, claim.Note, node.ID)
	must.StrContains(t, claim.Note, "not connected to any server")
	must.StrContains(t, claim.LastError, "no server holds a connection with its agent")
	must.Eq(t, 0, claim.NextAttempt)

	// Two more checks of the node's gate, each after its backoff (50-200
	// ms here), and no write to the claim: the node alone is checked.
	index := getVolume(t, leader, "rel", false).ModifyIndex
	checks := leader.volumeWatcher.NodeChecks(node.ID)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n := leader.volumeWatcher.NodeChecks(node.ID)
		return n >= checks+2, fmt.Errorf("%d checks of the node's gate, want %d", n, checks+2)
	})
	v := getVolume(t, leader, "rel", false)
	must.Eq(t, index, v.ModifyIndex, must.Sprint("a parked claim is not written again while its node stays unreachable"))
	must.NotNil(t, v.PastClaims[alloc.ID])
	must.SliceEmpty(t, ep.callsWith("node-detach"))

	// The agent connects again: the claim is released through the node.
	connectAgent(t, followers(servers, leader)[0], node, ep)
	waitFreed(t, leader, "rel")
	must.Eq(t, []string{"node-detach:rel"}, ep.callsWith("node-detach"))
	must.Len(t, 1, ep.callsWith("controller-detach"))
}
