package state

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// storedVolume returns the row the store holds for the volume: the object
// itself, which readers share.
func storedVolume(t *testing.T, s *StateStore, id string) *structs.CSIVolume {
	t.Helper()
	raw, err := s.db.Txn(false).First(TableCSIVolumes, indexID, structs.DefaultNamespace, id)
	must.NoError(t, err)
	must.NotNil(t, raw)
	return raw.(*structs.CSIVolume)
}

// TestClaimWrites_NeverChangeStoredRows: the claim writes copy only the
// claims of a volume (CopyClaims) and share the rest with the stored row;
// every step of a claim's life leaves the rows it replaced exactly as they
// were, which every reader holding them relies on.
func TestClaimWrites_NeverChangeStoredRows(t *testing.T) {
	s, node, vol, alloc := claimSetup(t)
	step := func(name string, write func() error) {
		t.Helper()
		row := storedVolume(t, s, vol.ID)
		was := row.Copy()
		must.NoError(t, write(), must.Sprint(name))
		must.Eq(t, was, row, must.Sprintf("%s changed the row it replaced", name))
		must.NotEq(t, was.ModifyIndex, storedVolume(t, s, vol.ID).ModifyIndex, must.Sprintf("%s wrote the volume", name))
	}
	must.NotNil(t, storedVolume(t, s, vol.ID).MountOptions)

	// A claim repeated with what its release will need changes the live
	// claim: its publish context and the provider's node ID.
	step("a repeated claim", func() error {
		return s.CSIVolumeClaim(15, 250, "default", vol.ID, &structs.CSIVolumeClaim{
			AllocationID: alloc.ID, NodeID: node.ID, ExternalNodeID: "ext-2", Mode: structs.CSIVolumeClaimWrite,
			AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
			PublishContext: map[string]string{"device": "/dev/y"},
		})
	})
	must.Eq(t, "/dev/y", storedVolume(t, s, vol.ID).WriteClaims[alloc.ID].PublishContext["device"])

	step("the job's stop", func() error { return s.DeregisterJob(20, 400, "default", "web", false) })
	stopped := alloc.Copy()
	stopped.DesiredStatus = structs.AllocDesiredStatusStop
	stopped.ClientStatus = structs.AllocClientStatusComplete
	step("the client's report", func() error { return s.UpdateAllocsFromClient(21, []*structs.Allocation{stopped}) })
	past := storedVolume(t, s, vol.ID).PastClaims[alloc.ID].Copy()
	must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, past.State)

	past.State = structs.CSIVolumeClaimStateNodeDetached
	step("the node step", func() error { return s.CSIVolumeClaim(22, 500, "default", vol.ID, past) })
	past.State = structs.CSIVolumeClaimStateReadyToFree
	step("the free", func() error {
		refused, err := s.CSIVolumeCheckpoints(23, 600, "default", []structs.CSIVolumeCheckpoint{{VolumeID: vol.ID, Claim: past}})
		must.Eq(t, []error{nil}, refused)
		return err
	})
	must.False(t, storedVolume(t, s, vol.ID).InUse())
}
