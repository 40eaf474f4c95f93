package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

func gcTimings(threshold time.Duration) func(int, *Config) {
	return func(i int, c *Config) {
		fastRelease(i, c)
		c.HeartbeatTTL, c.NodeGracePeriod = 200*time.Millisecond, 200*time.Millisecond
		c.NodeGCThreshold = threshold
	}
}

func getNode(t *testing.T, s *Server, id string) *structs.Node {
	t.Helper()
	var resp structs.SingleNodeResponse
	must.NoError(t, s.RPC("Node.GetNode", &structs.NodeSpecificRequest{NodeID: id}, &resp))
	return resp.Node
}

func registerThisNode(t *testing.T, s *Server, n *structs.Node) {
	t.Helper()
	must.NoError(t, s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: n}, &structs.NodeUpdateResponse{}))
}

func waitNodeGone(t *testing.T, s *Server, id string) {
	t.Helper()
	testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
		n, err := s.State().NodeByID(nil, id)
		return n == nil, fmt.Errorf("node %s is still there: %+v, %v", id, n, err)
	})
}

// TestGC_DownNodeCollectedAfterThreshold: a node that stops heartbeating
// is marked down, says when it will be collected, and is removed once the
// threshold has passed, with its plugin instances: the plugin's counts are
// back to the live node.
func TestGC_DownNodeCollectedAfterThreshold(t *testing.T) {
	const threshold = 1500 * time.Millisecond
	servers := TestCluster(t, 3, gcTimings(threshold))
	leader := WaitForLeader(t, servers...)
	stay, gone := mock.NodeWithController("dev"), mock.NodeWithController("dev")
	registerThisNode(t, leader, stay)
	keepAlive(t, leader, stay)
	registerThisNode(t, leader, gone)
	kill := keepAlive(t, leader, gone)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		p, err := leader.State().CSIPluginByID(nil, "dev")
		return err == nil && p != nil && p.NodesHealthy == 2, fmt.Errorf("plugin %+v, %v", p, err)
	})
	must.True(t, getNode(t, leader, gone.ID).GCAfter.IsZero(), must.Sprint("a ready node is not due for collection"))

	kill()
	var down *structs.Node
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		down = getNode(t, leader, gone.ID)
		return down == nil || down.Status == structs.NodeStatusDown, fmt.Errorf("node is %+v", down)
	})
	if down != nil {
		// Seen down before it was collected: it says when it will be.
		must.Eq(t, time.Unix(0, down.StatusUpdatedAt).Add(threshold), down.GCAfter)
		var list structs.NodeListResponse
		must.NoError(t, leader.RPC("Node.List", &structs.NodeListRequest{}, &list))
		for _, stub := range list.Nodes {
			must.Eq(t, stub.ID == gone.ID, !stub.GCAfter.IsZero(), must.Sprint(stub.ID))
		}
	}
	waitNodeGone(t, leader, gone.ID)
	for _, s := range servers {
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			p, err := s.State().CSIPluginByID(nil, "dev")
			ok := err == nil && p != nil && p.NodesExpected == 1 && p.NodesHealthy == 1 &&
				p.ControllersExpected == 1 && p.ControllersHealthy == 1
			return ok, fmt.Errorf("plugin %+v, %v", p, err)
		})
	}
}

// TestGC_WaitsForClaims: a down node with a claim whose release cannot
// finish is kept, and a forced collection says why; once the release is
// done the node goes. With no volume left of a plugin it alone ran, the
// plugin goes with it.
func TestGC_WaitsForClaims(t *testing.T) {
	servers := TestCluster(t, 1, gcTimings(200*time.Millisecond))
	leader := WaitForLeader(t, servers...)
	// The controller runs on a node that stays; the claim is on a node
	// that dies, which runs only the plugin's node service.
	ctrl := mock.NodeWithController("dev")
	delete(ctrl.CSINodePlugins, "dev")
	ep := &agentEndpoint{}
	connectAgent(t, leader, ctrl, ep)
	keepAlive(t, leader, ctrl)
	silent := mock.Node("dev")
	silent.CSINodePlugins["dev"].RequiresControllerPlugin = true
	registerThisNode(t, leader, silent)
	kill := keepAlive(t, leader, silent)
	registerVolume(t, leader, namedVolume("held"))
	req := &structs.VolumeRequest{Source: "held", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, leader, volumeJob("lost", 1, &structs.VolumeRequest{Source: "held",
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	var alloc *structs.Allocation
	for _, a := range waitPlaced(t, leader, "lost", 1) {
		alloc = a
	}
	_, err := claimFor(t, leader, silent, alloc, "held", req)
	must.NoError(t, err)

	// The controller cannot detach: the claim stays, and so does the node.
	ep.setFail(structs.ErrCodeInternal, "controller-detach")
	kill()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return len(ep.callsWith("controller-detach")) > 0, fmt.Errorf("no controller detach yet")
	})
	var gc structs.GCResponse
	must.NoError(t, leader.RPC("System.GarbageCollect", &structs.GCRequest{}, &gc))
	must.SliceEmpty(t, gc.Nodes)
	must.Len(t, 1, gc.Waiting)
	must.StrContains(t, gc.Waiting[0], silent.ID)
	must.StrContains(t, gc.Waiting[0], "held (allocation "+alloc.ID+")")
	n, err := leader.State().NodeByID(nil, silent.ID)
	must.NoError(t, err)
	must.NotNil(t, n)

	ep.setFail("", "")
	waitFreed(t, leader, "held")
	waitNodeGone(t, leader, silent.ID)

	// Only the controller's node runs the plugin now; without volumes
	// the plugin goes with that node too.
	must.NoError(t, leader.RPC("CSIVolume.Deregister", &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{"held"}},
		&structs.CSIVolumeDeregisterResponse{}))
	p, err := leader.State().CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.NotNil(t, p)
	must.Eq(t, []int{1, 1, 0, 0}, []int{p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected})
}

// TestGC_SystemForcesCollection: with the default threshold of a day, a
// node just marked down stays until `system gc`, which collects it at
// once; a plugin named by a volume stays with 0/0 instances and its
// volume says why it is unschedulable.
func TestGC_SystemForcesCollection(t *testing.T) {
	servers := TestCluster(t, 1, gcTimings(0))
	leader := WaitForLeader(t, servers...)
	must.Eq(t, structs.DefaultNodeGCThreshold, leader.config.NodeGCThreshold)
	node := mock.NodeWithController("dev")
	ep := &agentEndpoint{}
	connectAgent(t, leader, node, ep)
	kill := keepAlive(t, leader, node)
	registerVolume(t, leader, namedVolume("kept"))
	kill()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		n := getNode(t, leader, node.ID)
		return n.Status == structs.NodeStatusDown, fmt.Errorf("node is %s", n.Status)
	})
	n := getNode(t, leader, node.ID)
	must.Eq(t, time.Unix(0, n.StatusUpdatedAt).Add(24*time.Hour), n.GCAfter)

	// Two runs at once: both succeed, and the node is removed once.
	var gcs [2]structs.GCResponse
	errs := make(chan error, 2)
	for i := range gcs {
		go func() { errs <- leader.RPC("System.GarbageCollect", &structs.GCRequest{}, &gcs[i]) }()
	}
	must.NoError(t, <-errs)
	must.NoError(t, <-errs)
	must.Eq(t, []string{node.ID}, append(gcs[0].Nodes, gcs[1].Nodes...))
	must.Positive(t, max(gcs[0].Index, gcs[1].Index))
	n, err := leader.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.Nil(t, n)
	p, err := leader.State().CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.NotNil(t, p)
	must.Eq(t, []int{0, 0, 0, 0}, []int{p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected})
	vol := getVolume(t, leader, "kept", false)
	must.False(t, vol.Schedulable)
	must.Eq(t, `plugin "dev" has no healthy node plugins (0/0): no node runs it`, vol.UnschedulableReason)

	// Nothing left to collect: a second run removes nothing.
	var again structs.GCResponse
	must.NoError(t, leader.RPC("System.GarbageCollect", &structs.GCRequest{}, &again))
	must.SliceEmpty(t, again.Nodes)
}
