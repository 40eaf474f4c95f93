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

func TestNode_GetClientAllocsAndUpdateAlloc(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	node := mock.NodeWithController("dev")
	connectAgent(t, s, node, &agentEndpoint{})

	var empty structs.NodeClientAllocsResponse
	must.NoError(t, s.RPC("Node.GetClientAllocs", &structs.NodeClientAllocsRequest{NodeID: node.ID, SecretID: node.SecretID}, &empty))
	must.Len(t, 0, empty.Allocs)

	// A blocking query wakes when an allocation is placed on the node.
	got := make(chan *structs.NodeClientAllocsResponse, 1)
	go func() {
		var resp structs.NodeClientAllocsResponse
		req := &structs.NodeClientAllocsRequest{NodeID: node.ID, SecretID: node.SecretID}
		req.MinQueryIndex, req.MaxQueryTime = empty.Index, 20*time.Second
		if err := s.RPC("Node.GetClientAllocs", req, &resp); err == nil {
			got <- &resp
		}
		close(got)
	}()
	registerVolume(t, s, namedVolume("data"))
	req := &structs.VolumeRequest{Source: "data", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}
	must.NoError(t, registerJob(t, s, volumeJob("app", 1, req)))
	var resp *structs.NodeClientAllocsResponse
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		select {
		case r := <-got:
			if r != nil && len(r.Allocs) == 1 {
				resp = r
				return true, nil
			}
			// Woken by the job write before the placement: ask again.
			var again structs.NodeClientAllocsResponse
			err := s.RPC("Node.GetClientAllocs", &structs.NodeClientAllocsRequest{NodeID: node.ID, SecretID: node.SecretID}, &again)
			if err == nil && len(again.Allocs) == 1 {
				resp = &again
				return true, nil
			}
			return false, err
		default:
			return false, nil
		}
	})
	a := resp.Allocs[0]
	must.NotNil(t, resp.Jobs[structs.JobKey(a.Namespace, a.JobID)], must.Sprint("the job comes with the allocation"))

	// The client reports progress and status.
	update := &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID, Allocs: []*structs.AllocClientUpdate{{
		ID: a.ID, ClientStatus: structs.AllocClientStatusRunning,
		VolumeStates: map[string]*structs.AllocVolumeState{"data": {VolumeID: "data", Step: structs.AllocVolumeStepPublished}},
	}}}
	must.NoError(t, s.RPC("Node.UpdateAlloc", update, &structs.GenericResponse{}))
	stored, err := s.State().AllocByID(nil, a.ID)
	must.NoError(t, err)
	must.Eq(t, structs.AllocClientStatusRunning, stored.ClientStatus)
	must.Eq(t, structs.AllocVolumeStepPublished, stored.VolumeStates["data"].Step)
	job, _ := s.State().JobByID(nil, a.Namespace, a.JobID)
	must.Eq(t, structs.JobStatusRunning, job.Status)

	// The same report again writes nothing.
	before, _ := s.State().LatestIndex()
	must.NoError(t, s.RPC("Node.UpdateAlloc", update, &structs.GenericResponse{}))
	after, _ := s.State().LatestIndex()
	must.Eq(t, before, after)

	// Another node's secret, or an unknown status, is refused.
	bad := *update
	bad.SecretID = "wrong"
	err = s.RPC("Node.UpdateAlloc", &bad, &structs.GenericResponse{})
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err))
	err = s.RPC("Node.GetClientAllocs", &structs.NodeClientAllocsRequest{NodeID: node.ID, SecretID: "wrong"}, &empty)
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err))
	weird := &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID,
		Allocs: []*structs.AllocClientUpdate{{ID: a.ID, ClientStatus: "exploded"}}}
	err = s.RPC("Node.UpdateAlloc", weird, &structs.GenericResponse{})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
}

// TestNode_GetClientAllocsAnswersOnlyItsOwnChanges: a node's long poll
// answers when its own allocations change, not on every allocation write
// in the cluster (which answered every node, each with all its
// allocations, for each write), whether it has allocations or none yet.
func TestNode_GetClientAllocsAnswersOnlyItsOwnChanges(t *testing.T) {
	t.Parallel()
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	// IDs that share no first character: the allocations' node index then
	// has no branch on the empty node's way, whose watch is its root,
	// which every allocation write wakes.
	withID := func(id string) *structs.Node {
		node := mock.Node("dev")
		node.ID = id
		must.NoError(t, s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: node}, &structs.NodeUpdateResponse{}))
		return node
	}
	busy := withID("b0000000-0000-4000-8000-000000000001")
	quiet := withID("c0000000-0000-4000-8000-000000000002")
	empty := withID("e0000000-0000-4000-8000-000000000003")
	allocOn := func(node *structs.Node, i int) *structs.Allocation {
		return &structs.Allocation{ID: mock.UniqueID("alloc"), Namespace: "default", Name: fmt.Sprintf("j.g[%d]", i),
			JobID: "j", TaskGroup: "g", NodeID: node.ID,
			DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning}
	}
	write := func(a *structs.Allocation) uint64 {
		idx, _ := s.State().LatestIndex()
		must.NoError(t, s.State().UpsertAllocs(idx+1, []*structs.Allocation{a}))
		return idx + 1
	}
	busyAlloc, quietAlloc := allocOn(busy, 0), allocOn(quiet, 1)
	write(busyAlloc)
	write(quietAlloc)

	// The quiet and the empty node poll as a client agent does, each
	// until it sees what the test writes for it last, counting answers.
	poll := func(node *structs.Node, last func(*structs.NodeClientAllocsResponse) bool) <-chan []uint64 {
		var first structs.NodeClientAllocsResponse
		must.NoError(t, s.RPC("Node.GetClientAllocs", &structs.NodeClientAllocsRequest{NodeID: node.ID, SecretID: node.SecretID}, &first))
		out := make(chan []uint64, 1)
		go func() {
			var answers []uint64
			defer func() { out <- answers }()
			index := first.Index
			for {
				req := &structs.NodeClientAllocsRequest{NodeID: node.ID, SecretID: node.SecretID}
				req.MinQueryIndex, req.MaxQueryTime = index, 30*time.Second
				var resp structs.NodeClientAllocsResponse
				if err := s.RPC("Node.GetClientAllocs", req, &resp); err != nil || resp.Index == index {
					return // failed, or timed out
				}
				answers = append(answers, resp.Index)
				if index = resp.Index; last(&resp) {
					return
				}
			}
		}()
		return out
	}
	quietDone := poll(quiet, func(r *structs.NodeClientAllocsResponse) bool {
		return len(r.Allocs) == 1 && r.Allocs[0].ClientDescription == "changed"
	})
	emptyDone := poll(empty, func(r *structs.NodeClientAllocsResponse) bool { return len(r.Allocs) == 1 })

	// The busy node's allocation changes many times.
	const busyWrites = 20
	for i := range busyWrites {
		a := busyAlloc.Copy()
		a.ClientDescription = fmt.Sprintf("report %d", i)
		write(a)
	}
	// Then the quiet node's own allocation, and the empty node's first.
	changed := quietAlloc.Copy()
	changed.ClientDescription = "changed"
	own := write(changed)
	first := write(allocOn(empty, 2))

	got := <-quietDone
	must.Eq(t, []uint64{own}, got, must.Sprintf("the quiet node's poll answered at %v for %d writes to another node and one to its own", got, busyWrites))
	got = <-emptyDone
	must.Eq(t, []uint64{first}, got, must.Sprintf("the empty node's poll answered at %v for %d writes to another node and its first allocation", got, busyWrites))
}
