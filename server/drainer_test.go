package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// drainTestCluster is 3 servers whose nodes never miss a heartbeat for
// the length of a test: the nodes here are registered by the test, which
// sends none.
func drainTestCluster(t *testing.T) []*Server {
	return TestCluster(t, 3, func(_ int, c *Config) {
		c.HeartbeatTTL = time.Hour
		c.NodeGracePeriod = time.Hour
	})
}

func standInJob(id, typ string) *structs.Job {
	return &structs.Job{ID: id, Namespace: structs.DefaultNamespace, Type: typ,
		TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"}}}}}}
}

// reportAlloc is the node's client reporting an allocation's status.
func reportAlloc(t *testing.T, s *Server, node *structs.Node, allocID, status string) {
	t.Helper()
	testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
		err := s.RPC("Node.UpdateAlloc", &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID,
			Allocs: []*structs.AllocClientUpdate{{ID: allocID, ClientStatus: status}}}, &structs.GenericResponse{})
		return err == nil, err
	})
}

func waitAllocState(t *testing.T, s *Server, allocID string, check func(*structs.Allocation) error) *structs.Allocation {
	t.Helper()
	var out *structs.Allocation
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		a, err := s.State().AllocByID(nil, allocID)
		if err != nil || a == nil {
			return false, fmt.Errorf("allocation %s: %v", allocID, err)
		}
		out = a
		return check(a) == nil, check(a)
	})
	return out
}

func desired(status string) func(*structs.Allocation) error {
	return func(a *structs.Allocation) error {
		if a.DesiredStatus != status {
			return fmt.Errorf("desired status %q (%s), want %q", a.DesiredStatus, a.DesiredDescription, status)
		}
		return nil
	}
}

// TestDrainer_ResumesOnNewLeader: a drain whose non-system allocation was
// stopped, and whose client has not reported it stopped yet, goes on under
// a new leader: the system allocation is stopped only once the other one
// ended, then the drain completes, the node ineligible.
func TestDrainer_ResumesOnNewLeader(t *testing.T) {
	servers := drainTestCluster(t)
	leader := WaitForLeader(t, servers...)
	node := registerNode(t, leader)
	must.NoError(t, registerJob(t, leader, standInJob("plugin", structs.JobTypeSystem)))
	must.NoError(t, registerJob(t, leader, standInJob("web", structs.JobTypeService)))
	sys := waitPlaced(t, leader, "plugin", 1)["plugin.g[0]"]
	web := waitPlaced(t, leader, "web", 1)["web.g[0]"]
	reportAlloc(t, leader, node, sys.ID, structs.AllocClientStatusRunning)
	reportAlloc(t, leader, node, web.ID, structs.AllocClientStatusRunning)

	must.NoError(t, leader.RPC("Node.UpdateDrain", &structs.NodeUpdateDrainRequest{NodeID: node.ID,
		DrainStrategy: &structs.DrainStrategy{}}, &structs.NodeDrainUpdateResponse{}))
	waitAllocState(t, leader, web.ID, desired(structs.AllocDesiredStatusStop))
	// The placer cannot place the replacement: the only node drains.
	must.NoError(t, leader.Shutdown())
	rest := followers(servers, leader)
	newLeader := WaitForLeaderOf(t, rest)

	// Not stopped while the web allocation still runs on the node.
	a, err := newLeader.State().AllocByID(nil, sys.ID)
	must.NoError(t, err)
	must.Eq(t, structs.AllocDesiredStatusRun, a.DesiredStatus)

	reportAlloc(t, rest[0], node, web.ID, structs.AllocClientStatusComplete)
	stopped := waitAllocState(t, newLeader, sys.ID, desired(structs.AllocDesiredStatusStop))
	must.Eq(t, structs.AllocDrainDescription, stopped.DesiredDescription)
	reportAlloc(t, rest[0], node, sys.ID, structs.AllocClientStatusComplete)

	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n, err := newLeader.State().NodeByID(nil, node.ID)
		if err != nil || n.DrainStrategy != nil || n.LastDrain == nil || n.LastDrain.Status != structs.DrainStatusComplete {
			return false, fmt.Errorf("node %+v: %v", n, err)
		}
		if n.SchedulingEligibility != structs.NodeSchedulingIneligible {
			return false, fmt.Errorf("node is %s", n.SchedulingEligibility)
		}
		return true, nil
	})
}

// TestNodeEndpoint_DrainAndEligibility: the endpoints' refusals and what
// they stamp, through a follower.
func TestNodeEndpoint_DrainAndEligibility(t *testing.T) {
	servers := drainTestCluster(t)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	node := registerNode(t, leader)
	must.NoError(t, registerJob(t, leader, standInJob("web", structs.JobTypeService)))
	web := waitPlaced(t, leader, "web", 1)["web.g[0]"]
	reportAlloc(t, leader, node, web.ID, structs.AllocClientStatusRunning)

	err := f.RPC("Node.UpdateDrain", &structs.NodeUpdateDrainRequest{}, &structs.NodeDrainUpdateResponse{})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
	err = f.RPC("Node.UpdateDrain", &structs.NodeUpdateDrainRequest{NodeID: "nope"}, &structs.NodeDrainUpdateResponse{})
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err), must.Sprint(err))
	err = f.RPC("Node.UpdateEligibility", &structs.NodeUpdateEligibilityRequest{NodeID: node.ID, Eligibility: "maybe"}, &structs.NodeEligibilityUpdateResponse{})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))

	before := time.Now()
	var resp structs.NodeDrainUpdateResponse
	must.NoError(t, f.RPC("Node.UpdateDrain", &structs.NodeUpdateDrainRequest{NodeID: node.ID,
		DrainStrategy: &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: time.Hour}},
		Meta:          map[string]string{"message": "rack move"}}, &resp))
	must.Positive(t, resp.NodeModifyIndex)
	must.Eq(t, resp.NodeModifyIndex, resp.Index)
	n, err := leader.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.NotNil(t, n.DrainStrategy)
	must.False(t, n.DrainStrategy.StartedAt.Before(before.Truncate(time.Second)))
	must.Eq(t, n.DrainStrategy.StartedAt.Add(time.Hour), n.DrainStrategy.ForceDeadline)
	must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)

	err = f.RPC("Node.UpdateEligibility", &structs.NodeUpdateEligibilityRequest{NodeID: node.ID,
		Eligibility: structs.NodeSchedulingEligible}, &structs.NodeEligibilityUpdateResponse{})
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err), must.Sprint(err))

	// The drain waits for the client to stop the web allocation; an
	// update keeps the start.
	waitAllocState(t, leader, web.ID, desired(structs.AllocDesiredStatusStop))
	must.NoError(t, f.RPC("Node.UpdateDrain", &structs.NodeUpdateDrainRequest{NodeID: node.ID,
		DrainStrategy: &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: 2 * time.Hour}}}, &resp))
	n2, err := leader.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.True(t, n2.DrainStrategy.StartedAt.Equal(n.DrainStrategy.StartedAt))
	must.Eq(t, map[string]string{"message": "rack move"}, n2.LastDrain.Meta)

	// Re-registering (an agent restart) keeps the drain.
	var reg structs.NodeUpdateResponse
	must.NoError(t, f.RPC("Node.Register", &structs.NodeRegisterRequest{Node: node}, &reg))
	n3, err := leader.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.NotNil(t, n3.DrainStrategy)
	must.Eq(t, structs.NodeSchedulingIneligible, n3.SchedulingEligibility)

	// Cancelled with MarkEligible: eligible, last drain canceled.
	must.NoError(t, f.RPC("Node.UpdateDrain", &structs.NodeUpdateDrainRequest{NodeID: node.ID, MarkEligible: true}, &resp))
	n4, err := leader.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.Nil(t, n4.DrainStrategy)
	must.Eq(t, structs.NodeSchedulingEligible, n4.SchedulingEligibility)
	must.Eq(t, structs.DrainStatusCanceled, n4.LastDrain.Status)
}

// TestNodeEndpoint_DrainACL: node write drains and records the token's
// accessor in the last drain; node read is refused and changes nothing.
func TestNodeEndpoint_DrainACL(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	node := registerNode(t, s)
	reader := tokenWith(t, s, mgmt, `node { policy = "read" }`)
	writer := tokenWith(t, s, mgmt, `node { policy = "write" }`)

	req := &structs.NodeUpdateDrainRequest{NodeID: node.ID, DrainStrategy: &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: time.Hour}}}
	req.AuthToken = reader.SecretID
	err := s.RPC("Node.UpdateDrain", req, &structs.NodeDrainUpdateResponse{})
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
	elig := &structs.NodeUpdateEligibilityRequest{NodeID: node.ID, Eligibility: structs.NodeSchedulingIneligible}
	elig.AuthToken = reader.SecretID
	err = s.RPC("Node.UpdateEligibility", elig, &structs.NodeEligibilityUpdateResponse{})
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
	n, err := s.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.Nil(t, n.DrainStrategy)
	must.Eq(t, structs.NodeSchedulingEligible, n.SchedulingEligibility)

	req.AuthToken = writer.SecretID
	must.NoError(t, s.RPC("Node.UpdateDrain", req, &structs.NodeDrainUpdateResponse{}))
	n, err = s.State().NodeByID(nil, node.ID)
	must.NoError(t, err)
	must.NotNil(t, n.LastDrain)
	must.Eq(t, writer.AccessorID, n.LastDrain.AccessorID)
}
