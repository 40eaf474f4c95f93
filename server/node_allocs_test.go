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
// allocations, for each write).
func TestNode_GetClientAllocsAnswersOnlyItsOwnChanges(t *testing.T) {
	t.Parallel()
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	busy, quiet := registerNode(t, s, "dev"), registerNode(t, s, "dev")
	allocOn := func(node *structs.Node) *structs.Allocation {
		return &structs.Allocation{ID: mock.UniqueID("alloc"), Namespace: "default", Name: "j.g[0]", JobID: "j",
			NodeID: node.ID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning}
	}
	busyAlloc, quietAlloc := allocOn(busy), allocOn(quiet)
	write := func(a *structs.Allocation) uint64 {
		idx, _ := s.State().LatestIndex()
		must.NoError(t, s.State().UpsertAllocs(idx+1, []*structs.Allocation{a}))
		return idx + 1
	}
	write(busyAlloc)
	write(quietAlloc)

	// The quiet node polls as a client agent does, counting its answers.
	type answer struct {
		index  uint64
		allocs []*structs.Allocation
	}
	answers := make(chan answer, 64)
	var first structs.NodeClientAllocsResponse
	must.NoError(t, s.RPC("Node.GetClientAllocs", &structs.NodeClientAllocsRequest{NodeID: quiet.ID, SecretID: quiet.SecretID}, &first))
	must.Len(t, 1, first.Allocs)
	go func() {
		defer close(answers)
		index := first.Index
		for {
			req := &structs.NodeClientAllocsRequest{NodeID: quiet.ID, SecretID: quiet.SecretID}
			req.MinQueryIndex, req.MaxQueryTime = index, 30*time.Second
			var resp structs.NodeClientAllocsResponse
			if err := s.RPC("Node.GetClientAllocs", req, &resp); err != nil {
				return
			}
			answers <- answer{resp.Index, resp.Allocs}
			if resp.Index == index {
				return // timed out: the test is over
			}
			index = resp.Index
			if len(resp.Allocs) == 1 && resp.Allocs[0].ClientDescription == "changed" {
				return
			}
		}
	}()

	// The other node's allocation changes many times.
	const busyWrites = 20
	for i := range busyWrites {
		a := busyAlloc.Copy()
		a.ClientDescription = fmt.Sprintf("report %d", i)
		write(a)
	}
	// Then the quiet node's own.
	changed := quietAlloc.Copy()
	changed.ClientDescription = "changed"
	own := write(changed)

	var got []answer
	for a := range answers {
		got = append(got, a)
	}
	must.Len(t, 1, got, must.Sprintf("the quiet node's poll answered %d times for %d writes to another node and one to its own", len(got), busyWrites))
	must.Eq(t, own, got[0].index)
	must.Eq(t, "changed", got[0].allocs[0].ClientDescription)

	// A node without allocations is answered with the table's index.
	empty := registerNode(t, s, "dev")
	var none structs.NodeClientAllocsResponse
	must.NoError(t, s.RPC("Node.GetClientAllocs", &structs.NodeClientAllocsRequest{NodeID: empty.ID, SecretID: empty.SecretID}, &none))
	must.Len(t, 0, none.Allocs)
	must.GreaterEq(t, own, none.Index)
}
