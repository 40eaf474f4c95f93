package server

import (
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
