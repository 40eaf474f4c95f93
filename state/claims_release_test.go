package state

import (
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

// claimSetup registers a node, a volume and a job whose allocation holds a
// write claim on it.
func claimSetup(t *testing.T) (*StateStore, *structs.Node, *structs.CSIVolume, *structs.Allocation) {
	t.Helper()
	s := TestStateStore(t)
	node := mock.NodeWithController("dev")
	must.NoError(t, s.UpsertNode(10, node))
	vol := mock.CSIVolume("dev")
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{vol}))
	job := testJob("web")
	job.TaskGroups[0].Count = 1
	job.TaskGroups[0].Volumes = map[string]*structs.VolumeRequest{"data": {Name: "data", Type: "csi", Source: vol.ID,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}}
	must.NoError(t, s.UpsertJob(12, 100, job))
	alloc := &structs.Allocation{ID: "a1", Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g",
		NodeID: node.ID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning}
	must.NoError(t, s.UpsertAllocs(13, []*structs.Allocation{alloc}))
	must.NoError(t, s.CSIVolumeClaim(14, 200, "default", vol.ID, &structs.CSIVolumeClaim{
		AllocationID: "a1", NodeID: node.ID, ExternalNodeID: "ext-" + node.ID, Mode: structs.CSIVolumeClaimWrite,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		PublishContext: map[string]string{"device": "/dev/x"},
	}))
	return s, node, vol, alloc
}

func pastClaim(t *testing.T, s *StateStore, vol *structs.CSIVolume) *structs.CSIVolumeClaim {
	t.Helper()
	v, err := s.CSIVolumeByID(nil, "default", vol.ID)
	must.NoError(t, err)
	return v.PastClaims["a1"]
}

func TestRelease_TerminalAllocReleasesItsClaims(t *testing.T) {
	s, node, vol, alloc := claimSetup(t)

	ws := memdb.NewWatchSet()
	iter, err := s.CSIVolumesWithPastClaims(ws)
	must.NoError(t, err)
	must.Nil(t, iter.Next())
	// Volumes without past claims are not in the index at all: writing one
	// does not wake a watcher, even while no volume has past claims.
	must.NoError(t, s.UpsertCSIVolume(15, []*structs.CSIVolume{mock.CSIVolume("dev")}))
	must.True(t, ws.Watch(time.After(50*time.Millisecond)), must.Sprint("an unrelated volume woke the watcher"))

	done := alloc.Copy()
	done.ClientStatus = structs.AllocClientStatusComplete
	must.NoError(t, s.UpsertAllocs(16, []*structs.Allocation{done}))
	must.False(t, ws.Watch(time.After(5*time.Second)), must.Sprint("a release wakes the watcher"))

	// Nor once there is work.
	ws = memdb.NewWatchSet()
	_, err = s.CSIVolumesWithPastClaims(ws)
	must.NoError(t, err)
	must.NoError(t, s.UpsertCSIVolume(17, []*structs.CSIVolume{mock.CSIVolume("dev")}))
	must.True(t, ws.Watch(time.After(50*time.Millisecond)), must.Sprint("an unrelated volume woke the watcher"))

	past := pastClaim(t, s, vol)
	must.NotNil(t, past)
	must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, past.State)
	must.Eq(t, "ext-"+node.ID, past.ExternalNodeID, must.Sprint("the release keeps what it needs"))
	must.Eq(t, "/dev/x", past.PublishContext["device"])
	v, _ := s.CSIVolumeByID(nil, "default", vol.ID)
	must.NotNil(t, v.WriteClaims["a1"], must.Sprint("the volume stays in use until the claim is freed"))

	iter, err = s.CSIVolumesWithPastClaims(nil)
	must.NoError(t, err)
	must.Eq(t, vol.ID, iter.Next().(*structs.CSIVolume).ID)
	must.Nil(t, iter.Next())

	// The release's last step frees it; the modes reset.
	free := past.Copy()
	free.State = structs.CSIVolumeClaimStateReadyToFree
	must.NoError(t, s.CSIVolumeClaim(18, 300, "default", vol.ID, free))
	v, _ = s.CSIVolumeByID(nil, "default", vol.ID)
	must.False(t, v.InUse())
	must.Eq(t, structs.CSIVolumeAccessModeUnknown, v.AccessMode)
}

func TestRelease_JobStopAndNodeDown(t *testing.T) {
	t.Run("job stop: the claim waits for the client, then is released when it reports the tasks stopped", func(t *testing.T) {
		s, _, vol, alloc := claimSetup(t)
		ws := memdb.NewWatchSet()
		_, err := s.CSIVolumesWithPastClaims(ws)
		must.NoError(t, err)
		must.NoError(t, s.DeregisterJob(20, 400, "default", "web", false))
		past := pastClaim(t, s, vol)
		must.NotNil(t, past)
		must.Eq(t, structs.CSIVolumeClaimStateWaitingForClient, past.State, must.Sprint("the client still runs the tasks"))
		must.Eq(t, structs.WaitingForClientNote, past.Note)
		must.Zero(t, past.Attempts)
		must.Zero(t, past.NextAttempt)
		must.False(t, ws.Watch(time.After(5*time.Second)), must.Sprint("the watcher sees the claim waiting"))

		// A report that changes nothing of the allocation's end leaves it.
		running := alloc.Copy()
		running.DesiredStatus = structs.AllocDesiredStatusStop
		running.ClientDescription = "stopping tasks"
		must.NoError(t, s.UpsertAllocs(21, []*structs.Allocation{running}))
		must.Eq(t, structs.CSIVolumeClaimStateWaitingForClient, pastClaim(t, s, vol).State)

		ws = memdb.NewWatchSet()
		_, err = s.CSIVolumesWithPastClaims(ws)
		must.NoError(t, err)
		done := running.Copy()
		done.ClientStatus = structs.AllocClientStatusComplete
		done.ModifyTime = 600
		must.NoError(t, s.UpsertAllocs(22, []*structs.Allocation{done}))
		past = pastClaim(t, s, vol)
		must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, past.State, must.Sprint("the client reported the tasks stopped"))
		must.Eq(t, "", past.Note)
		must.Eq(t, "/dev/x", past.PublishContext["device"], must.Sprint("the release keeps what it needs"))
		v, _ := s.CSIVolumeByID(nil, "default", vol.ID)
		must.Eq(t, uint64(22), v.ModifyIndex)
		must.False(t, ws.Watch(time.After(5*time.Second)), must.Sprint("the move wakes the watcher"))

		counts, err := s.CSIPastClaimsByState()
		must.NoError(t, err)
		must.Eq(t, 1, counts["unpublishing"])
		must.Eq(t, 0, counts["waiting-for-client"])
	})
	t.Run("a waiting claim is released when its node goes down", func(t *testing.T) {
		s, node, vol, _ := claimSetup(t)
		must.NoError(t, s.DeregisterJob(20, 400, "default", "web", false))
		must.Eq(t, structs.CSIVolumeClaimStateWaitingForClient, pastClaim(t, s, vol).State)
		must.NoError(t, s.UpdateNodeStatus(21, &structs.NodeUpdateStatusRequest{NodeID: node.ID, Status: structs.NodeStatusDown, UpdatedAt: 500}))
		must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, pastClaim(t, s, vol).State, must.Sprint("the allocation was lost"))
	})
	t.Run("a checkpoint cannot put a claim in the waiting state", func(t *testing.T) {
		s, node, vol, _ := claimSetup(t)
		err := s.CSIVolumeClaim(20, 400, "default", vol.ID, &structs.CSIVolumeClaim{
			AllocationID: "a1", NodeID: node.ID, Mode: structs.CSIVolumeClaimWrite,
			AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
			State: structs.CSIVolumeClaimStateWaitingForClient,
		})
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
		must.Nil(t, pastClaim(t, s, vol))
	})
	t.Run("job purge", func(t *testing.T) {
		s, _, vol, _ := claimSetup(t)
		must.NoError(t, s.DeregisterJob(20, 400, "default", "web", true))
		must.Eq(t, structs.CSIVolumeClaimStateWaitingForClient, pastClaim(t, s, vol).State)
	})
	// A new version of the job that no longer asks for the volume replaces
	// the allocation: the claim it still holds is released all the same.
	t.Run("replaced by a version without the volume", func(t *testing.T) {
		s, _, vol, alloc := claimSetup(t)
		v2 := testJob("web")
		v2.TaskGroups[0].Count = 1
		must.NoError(t, s.UpsertJob(20, 400, v2))
		stop := alloc.Copy()
		stop.DesiredStatus, stop.DesiredDescription = structs.AllocDesiredStatusStop, "replaced by job version 1"
		j, err := s.JobByID(nil, "default", "web")
		must.NoError(t, err)
		must.NoError(t, s.ApplyPlan(21, &structs.PlanApplyRequest{Namespace: "default", JobID: "web",
			JobModifyIndex: j.JobModifyIndex, Allocs: []*structs.Allocation{stop}}))
		must.NotNil(t, pastClaim(t, s, vol))
	})
	t.Run("node down", func(t *testing.T) {
		s, node, vol, _ := claimSetup(t)
		must.NoError(t, s.UpdateNodeStatus(20, &structs.NodeUpdateStatusRequest{NodeID: node.ID, Status: structs.NodeStatusDown, UpdatedAt: 500}))
		a, _ := s.AllocByID(nil, "a1")
		must.Eq(t, structs.AllocClientStatusLost, a.ClientStatus)
		must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, pastClaim(t, s, vol).State)
		j, err := s.JobByID(nil, "default", "web")
		must.NoError(t, err)
		must.Eq(t, structs.JobStatusPending, j.Status, must.Sprint("nothing of the job runs any more"))
	})
}

func TestCSIPastClaimsByState(t *testing.T) {
	s := setupVolume(t)
	must.NoError(t, s.UpsertAllocs(20, []*structs.Allocation{testAlloc("a1", "n1")}))
	c := writeClaim("a1", "n1")
	must.NoError(t, s.CSIVolumeClaim(21, 21000, ns, "vol", c))

	got, err := s.CSIPastClaimsByState()
	must.NoError(t, err)
	must.Eq(t, map[string]int{"waiting-for-client": 0, "unpublishing": 0, "node-detached": 0, "controller-detached": 0, "ready-to-free": 0}, got)

	releaseStep(t, s, 22, c, structs.CSIVolumeClaimStateUnpublishing)
	releaseStep(t, s, 23, c, structs.CSIVolumeClaimStateNodeDetached)
	got, err = s.CSIPastClaimsByState()
	must.NoError(t, err)
	must.Eq(t, 1, got["node-detached"])
	must.Eq(t, 0, got["unpublishing"])
}
