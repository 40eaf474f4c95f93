package server

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// releaseSetup runs a job of one allocation holding a single-node-writer
// claim on volume "rel" on a connected agent, and returns the agent and the
// allocation.
func releaseSetup(t *testing.T, servers []*Server) (*agentEndpoint, *structs.Node, *structs.Allocation) {
	t.Helper()
	ep, node, alloc, _ := releaseSetupConn(t, servers)
	return ep, node, alloc
}

// releaseSetupConn is releaseSetup that also returns the agent's
// connection, to close it.
func releaseSetupConn(t *testing.T, servers []*Server) (*agentEndpoint, *structs.Node, *structs.Allocation, *rpc.ConnPool) {
	t.Helper()
	leader := WaitForLeader(t, servers...)
	node := mock.NodeWithController("dev")
	ep := &agentEndpoint{}
	pool := connectAgent(t, followers(servers, leader)[0], node, ep)
	registerVolume(t, leader, namedVolume("rel"))
	req := &structs.VolumeRequest{Source: "rel", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, leader, volumeJob("holder", 1, &structs.VolumeRequest{Source: "rel",
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	var alloc *structs.Allocation
	for _, a := range waitPlaced(t, leader, "holder", 1) {
		alloc = a
	}
	_, err := claimFor(t, leader, node, alloc, "rel", req)
	must.NoError(t, err)
	return ep, node, alloc, pool
}

// stopJob stops a job, as an operator does, and then reports its
// allocations' tasks stopped, as their client does once it stopped them.
func stopJob(t *testing.T, s *Server, node *structs.Node, jobID string) {
	t.Helper()
	must.NoError(t, s.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: jobID}, &structs.JobDeregisterResponse{}))
	reportStopped(t, s, node, jobID)
}

// reportStopped reports every allocation of the job complete, from node.
func reportStopped(t *testing.T, s *Server, node *structs.Node, jobID string) {
	t.Helper()
	allocs, err := s.State().AllocsByJob(nil, structs.DefaultNamespace, jobID)
	must.NoError(t, err)
	update := &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID}
	for _, a := range allocs {
		update.Allocs = append(update.Allocs, &structs.AllocClientUpdate{ID: a.ID, ClientStatus: structs.AllocClientStatusComplete,
			ClientDescription: "tasks stopped"})
	}
	must.NoError(t, s.RPC("Node.UpdateAlloc", update, &structs.GenericResponse{}))
}

func fastRelease(i int, c *Config) {
	c.ReleaseBaseDelay, c.ReleaseMaxDelay = 50*time.Millisecond, 200*time.Millisecond
}

func waitFreed(t *testing.T, s *Server, volID string) *structs.CSIVolume {
	t.Helper()
	var vol *structs.CSIVolume
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		v, err := s.State().CSIVolumeByID(nil, structs.DefaultNamespace, volID)
		if err != nil {
			return false, err
		}
		vol = v
		return !v.InUse(), fmt.Errorf("volume still has claims: read %d write %d past %+v", len(v.ReadClaims), len(v.WriteClaims), v.PastClaims)
	})
	return vol
}

func TestRelease_JobStopDetachesNodeThenControllerAndFrees(t *testing.T) {
	servers := TestCluster(t, 3, fastRelease)
	ep, node, _ := releaseSetup(t, servers)
	leader := WaitForLeader(t, servers...)

	stopJob(t, leader, node, "holder")
	vol := waitFreed(t, leader, "rel")
	must.Eq(t, structs.CSIVolumeAccessModeUnknown, vol.AccessMode, must.Sprint("the modes reset once free"))

	// Node detach on the allocation's node, then controller detach, in
	// that order, once each.
	must.Eq(t, []string{"node-detach:rel"}, ep.callsWith("node-detach"))
	must.Eq(t, []string{"controller-detach:ext-rel:ext-" + node.ID}, ep.callsWith("controller-detach"))
	var order []string
	for _, c := range ep.callsWith("") {
		if c == "node-detach:rel" || c == "controller-detach:ext-rel:ext-"+node.ID {
			order = append(order, c)
		}
	}
	must.Eq(t, []string{"node-detach:rel", "controller-detach:ext-rel:ext-" + node.ID}, order)

	// The volume is claimable again by a new job.
	req := &structs.VolumeRequest{Source: "rel", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, leader, volumeJob("next", 1, &structs.VolumeRequest{Source: "rel",
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	for _, a := range waitPlaced(t, leader, "next", 1) {
		_, err := claimFor(t, leader, node, a, "rel", req)
		must.NoError(t, err)
	}
}

func TestRelease_NodePluginDownThenBack(t *testing.T) {
	servers := TestCluster(t, 3, fastRelease)
	ep, node, alloc := releaseSetup(t, servers)
	leader := WaitForLeader(t, servers...)
	ep.setFail(structs.ErrCodeRetryable, "node-detach")

	stopJob(t, leader, node, "holder")
	// Attempts and the last error are visible while the node plugin fails.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		v := getVolume(t, leader, "rel", false)
		c := v.PastClaims[alloc.ID]
		if c == nil {
			return false, fmt.Errorf("no past claim yet")
		}
		return c.Attempts >= 3 && c.LastError != "" && c.NextAttempt > 0 &&
			c.State == structs.CSIVolumeClaimStateUnpublishing, fmt.Errorf("past claim %+v", *c)
	})
	v := getVolume(t, leader, "rel", false)
	must.StrContains(t, v.PastClaims[alloc.ID].LastError, "told to fail")
	must.SliceEmpty(t, ep.callsWith("controller-detach"), must.Sprint("no controller step before the node step"))

	ep.setFail("", "")
	waitFreed(t, leader, "rel")
	must.Len(t, 1, ep.callsWith("controller-detach"))
}

// The leader dies after the node step was checkpointed and before the
// controller step succeeded: the new leader resumes at the controller step
// and the node plugin sees no second unpublish.
func TestRelease_ResumesAtControllerStepAfterFailover(t *testing.T) {
	servers := TestCluster(t, 3, fastRelease)
	ep, node, alloc := releaseSetup(t, servers)
	leader := WaitForLeader(t, servers...)
	ep.setFail(structs.ErrCodeRetryable, "controller-detach")

	stopJob(t, leader, node, "holder")
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		c := getVolume(t, leader, "rel", false).PastClaims[alloc.ID]
		return c != nil && c.State == structs.CSIVolumeClaimStateNodeDetached && c.Attempts > 0, fmt.Errorf("past claim %+v", c)
	})
	must.Len(t, 1, ep.callsWith("node-detach"))

	// The agent stays connected to a follower that survives. Leadership
	// may have moved to the agent's server since the setup (an election at
	// start): then it is handed to another server first.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		leader = WaitForLeader(t, servers...)
		if _, ok := leader.nodeConns.get(node.ID); !ok {
			return true, nil
		}
		return false, fmt.Errorf("leader %s holds the agent's session; transferring leadership: %v",
			leader.config.NodeName, leader.raft.LeadershipTransfer().Error())
	})
	var survivors []*Server
	for _, s := range servers {
		if s != leader {
			survivors = append(survivors, s)
		}
	}
	must.NoError(t, leader.Shutdown())
	newLeader := WaitForLeaderOf(t, survivors)
	ep.setFail("", "")
	waitFreed(t, newLeader, "rel")
	must.Len(t, 1, ep.callsWith("node-detach"), must.Sprint("the node plugin saw one unpublish"))
	must.SliceNotEmpty(t, ep.callsWith("controller-detach"))
}

// A client killed while its allocation holds a volume: once its node is
// down, the claim is released through the controller only.
func TestRelease_NodeDownSkipsNodeStep(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		fastRelease(i, c)
		c.HeartbeatTTL, c.NodeGracePeriod = 200*time.Millisecond, 200*time.Millisecond
	})
	leader := WaitForLeader(t, servers...)
	// The agent answers controller calls on a node that runs only the
	// plugin's controller, so the job can be placed only on the claim's
	// node, whose agent answers nothing and which heartbeats until it is
	// killed.
	ctrl := mock.NodeWithController("dev")
	delete(ctrl.CSINodePlugins, "dev")
	ep := &agentEndpoint{}
	connectAgent(t, leader, ctrl, ep)
	keepAlive(t, leader, ctrl)

	silent := mock.Node("dev")
	silent.CSINodePlugins["dev"].RequiresControllerPlugin = true
	var resp structs.NodeUpdateResponse
	must.NoError(t, leader.RPC("Node.Register", &structs.NodeRegisterRequest{Node: silent}, &resp))
	kill := keepAlive(t, leader, silent)
	registerVolume(t, leader, namedVolume("rel"))
	req := &structs.VolumeRequest{Source: "rel", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, leader, volumeJob("lost", 1, &structs.VolumeRequest{Source: "rel",
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	var alloc *structs.Allocation
	for _, a := range waitPlaced(t, leader, "lost", 1) {
		alloc = a
	}
	must.Eq(t, silent.ID, alloc.NodeID)
	_, err := claimFor(t, leader, silent, alloc, "rel", req)
	must.NoError(t, err)

	// The client dies: its node misses its heartbeats and is marked down,
	// which loses the allocation and releases its claim.
	kill()
	waitFreed(t, leader, "rel")
	must.SliceEmpty(t, ep.callsWith("node-detach"))
	must.Eq(t, []string{"controller-detach:ext-rel:ext-" + silent.ID}, ep.callsWith("controller-detach"))
}

// keepAlive heartbeats a node until the returned func is called or the
// test ends.
func keepAlive(t *testing.T, s *Server, n *structs.Node) func() {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: n.ID, SecretID: n.SecretID,
				Status: structs.NodeStatusReady}, &structs.NodeUpdateResponse{}); err != nil {
				t.Logf("heartbeat of node %s: %v", n.ID, err)
			}
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// An operator's detach refuses a claim of a running allocation, and runs a
// backed-off release now, reporting each step, over the HTTP API.
func TestRelease_OperatorDetach(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		// Long backoff: only the operator's detach can release it soon.
		c.ReleaseBaseDelay, c.ReleaseMaxDelay = time.Hour, time.Hour
	})
	ep, node, alloc := releaseSetup(t, servers)
	leader := WaitForLeader(t, servers...)
	client, err := api.NewClient(api.Config{Address: "http://" + followers(servers, leader)[1].HTTPAddr()})
	must.NoError(t, err)

	_, err = client.Volumes().Detach("rel", node.ID, nil)
	must.ErrorContains(t, err, "still runs on node")

	// Stopped, and not reported stopped by its client yet: the detach
	// says it waits for the client (a conflict, not a failure).
	must.NoError(t, leader.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "holder"}, &structs.JobDeregisterResponse{}))
	_, err = client.Volumes().Detach("rel", node.ID, nil)
	must.ErrorContains(t, err, structs.WaitingForClientNote)
	var apiErr *api.StatusError
	must.True(t, errors.As(err, &apiErr))
	must.Eq(t, http.StatusConflict, apiErr.Code)
	must.SliceEmpty(t, ep.callsWith("node-detach"), must.Sprint("nothing is unpublished under the tasks"))

	ep.setFail(structs.ErrCodeRetryable, "node-detach")
	reportStopped(t, leader, node, "holder")
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		c := getVolume(t, leader, "rel", false).PastClaims[alloc.ID]
		return c != nil && c.Attempts == 1, fmt.Errorf("past claim %+v", c)
	})
	ep.setFail("", "")
	steps, err := client.Volumes().Detach("rel", node.ID, nil)
	must.NoError(t, err)
	must.Eq(t, []string{
		fmt.Sprintf("node detach of allocation %q on node %q done", alloc.ID, node.ID),
		fmt.Sprintf("controller detach of allocation %q from node %q done", alloc.ID, node.ID),
		fmt.Sprintf("claim of allocation %q freed", alloc.ID),
	}, steps)
	must.False(t, getVolume(t, leader, "rel", false).InUse())

	// Detaching again succeeds with nothing to do, as Nomad's does.
	steps, err = client.Volumes().Detach("rel", node.ID, nil)
	must.NoError(t, err)
	must.Eq(t, []string{fmt.Sprintf("volume %q has no claim on node %q: nothing to detach", "rel", node.ID)}, steps)
}
