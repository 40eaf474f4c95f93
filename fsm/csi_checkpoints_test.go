package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// checkpointSeries is a release of two claims, interleaved, with refused
// checkpoints among them: one for an allocation that holds no claim, one
// aimed at another node, one going back, one that is a new claim.
func checkpointSeries() []structs.CSIVolumeCheckpoint {
	cp := func(vol, alloc, node string, st structs.CSIVolumeClaimState) structs.CSIVolumeCheckpoint {
		return structs.CSIVolumeCheckpoint{VolumeID: vol, Claim: checkpointOf(claim(alloc, node, structs.CSIVolumeClaimWrite), st)}
	}
	return []structs.CSIVolumeCheckpoint{
		cp("vol", "a1", "n1", structs.CSIVolumeClaimStateUnpublishing),
		cp("vol2", "a2", "n2", structs.CSIVolumeClaimStateUnpublishing),
		cp("vol", "a3", "n1", structs.CSIVolumeClaimStateUnpublishing), // a3 holds no claim
		cp("vol", "a1", "n1", structs.CSIVolumeClaimStateNodeDetached),
		cp("vol2", "a2", "n1", structs.CSIVolumeClaimStateNodeDetached), // the claim is on n2
		cp("vol2", "a2", "n2", structs.CSIVolumeClaimStateNodeDetached),
		cp("vol", "a1", "n1", structs.CSIVolumeClaimStateReadyToFree),
		cp("vol2", "a2", "n2", structs.CSIVolumeClaimStateUnpublishing), // back
		cp("vol2", "a2", "n2", structs.CSIVolumeClaimStateTaken),        // a new claim
		{Namespace: ns, VolumeID: "", Claim: checkpointOf(claim("a2", "n2", structs.CSIVolumeClaimWrite), structs.CSIVolumeClaimStateReadyToFree)},
	}
}

// checkpointFSM is authorityFSM with a2 also holding a write claim, on
// vol2.
func checkpointFSM(t *testing.T) (*FSM, uint64) {
	t.Helper()
	f, next := authorityFSM(t)
	mustApply(t, f, next, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol2", Claim: claim("a2", "n2", structs.CSIVolumeClaimWrite), Timestamp: int64(next)})
	return f, next + 1
}

// claimsOf is what a release decides about a volume: its claims, live
// and past, and its current modes (indexes and times depend on how the
// entries were cut).
func claimsOf(t *testing.T, f *FSM, id string) [4]any {
	t.Helper()
	v, err := f.State().CSIVolumeByID(nil, ns, id)
	must.NoError(t, err)
	return [4]any{v.ReadClaims, v.WriteClaims, v.PastClaims, [2]any{v.AccessMode, v.AttachmentMode}}
}

// TestApplyCheckpointBatch_SameAsSingleCheckpoints: a batch of release
// checkpoints leaves the volumes as the same checkpoints written one entry
// each, and refuses the same ones with the same codes; a refused
// checkpoint does not refuse the others.
func TestApplyCheckpointBatch_SameAsSingleCheckpoints(t *testing.T) {
	series := checkpointSeries()

	one, next := checkpointFSM(t)
	var want []structs.ErrorCode
	for i, c := range series {
		resp := apply(t, one, next+uint64(i), structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
			VolumeID: c.VolumeID, Claim: c.Claim, Timestamp: 99, WriteRequest: structs.WriteRequest{Namespace: c.Namespace}})
		want = append(want, structs.CodeOf(asError(resp)))
	}
	// The single checkpoints' own refusals, as the table says.
	must.Eq(t, []structs.ErrorCode{"", "", structs.ErrCodeNotFound, "", structs.ErrCodeInvalid, "", "",
		structs.ErrCodeConflict, structs.ErrCodeInvalid, structs.ErrCodeNotFound}[:len(want)-2], want[:len(want)-2])

	batched, bnext := checkpointFSM(t)
	must.Eq(t, next, bnext)
	resp := apply(t, batched, bnext, structs.CSIVolumeCheckpointBatchRequestType,
		&structs.CSIVolumeCheckpointBatchRequest{Checkpoints: series, Timestamp: 99})
	refused, ok := resp.([]error)
	must.True(t, ok, must.Sprintf("response %#v is not one error per checkpoint", resp))
	must.Len(t, len(series), refused)
	var got []structs.ErrorCode
	for _, err := range refused {
		got = append(got, structs.CodeOf(err))
	}
	// A new claim and a checkpoint without a volume are refused as
	// invalid by the batch; one entry each, they fail their own ways.
	want[len(want)-2], want[len(want)-1] = structs.ErrCodeInvalid, structs.ErrCodeInvalid
	must.Eq(t, want, got)

	for _, id := range []string{"vol", "vol2"} {
		must.Eq(t, claimsOf(t, one, id), claimsOf(t, batched, id), must.Sprintf("volume %s", id))
	}
	v, err := batched.State().CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.False(t, v.InUse(), must.Sprint("a1's claim freed"))
	must.Eq(t, bnext, v.ModifyIndex)
	v2, err := batched.State().CSIVolumeByID(nil, ns, "vol2")
	must.NoError(t, err)
	must.Eq(t, structs.CSIVolumeClaimStateNodeDetached, v2.PastClaims["a2"].State)
}

func asError(resp any) error {
	if err, ok := resp.(error); ok {
		return err
	}
	return nil
}

// TestApplyCheckpointBatch_Refusals: a batch refused whole (empty, too
// large) changes nothing; one whose every checkpoint is refused changes
// nothing either.
func TestApplyCheckpointBatch_Refusals(t *testing.T) {
	f, next := checkpointFSM(t)
	before := dump(t, f.State())

	mustRespCode(t, apply(t, f, next, structs.CSIVolumeCheckpointBatchRequestType, &structs.CSIVolumeCheckpointBatchRequest{}),
		structs.ErrCodeInvalid)
	big := make([]structs.CSIVolumeCheckpoint, structs.MaxCheckpointBatch+1)
	for i := range big {
		big[i] = checkpointSeries()[0]
	}
	mustRespCode(t, apply(t, f, next+1, structs.CSIVolumeCheckpointBatchRequestType,
		&structs.CSIVolumeCheckpointBatchRequest{Checkpoints: big}), structs.ErrCodeInvalid)

	bad := []structs.CSIVolumeCheckpoint{checkpointSeries()[2], checkpointSeries()[4], {VolumeID: "vol"}, {VolumeID: "nope",
		Claim: checkpointOf(claim("a1", "n1", structs.CSIVolumeClaimWrite), structs.CSIVolumeClaimStateUnpublishing)}}
	resp := apply(t, f, next+2, structs.CSIVolumeCheckpointBatchRequestType, &structs.CSIVolumeCheckpointBatchRequest{Checkpoints: bad})
	refused, ok := resp.([]error)
	must.True(t, ok)
	var codes []structs.ErrorCode
	for _, err := range refused {
		_, typed := err.(*structs.Error)
		must.True(t, typed, must.Sprintf("%v is not a *structs.Error", err))
		codes = append(codes, structs.CodeOf(err))
	}
	must.Eq(t, []structs.ErrorCode{structs.ErrCodeNotFound, structs.ErrCodeInvalid, structs.ErrCodeInvalid, structs.ErrCodeNotFound}, codes)
	must.Eq(t, before, dump(t, f.State()))
}

// TestApplyCheckpointBatch_Snapshot: the state a batch leaves survives a
// snapshot and restore, and a batch applied after the restore sees it.
func TestApplyCheckpointBatch_Snapshot(t *testing.T) {
	f, next := checkpointFSM(t)
	series := checkpointSeries()
	resp := apply(t, f, next, structs.CSIVolumeCheckpointBatchRequestType,
		&structs.CSIVolumeCheckpointBatchRequest{Checkpoints: series[:6], Timestamp: 99})
	_, ok := resp.([]error)
	must.True(t, ok)

	dst := testFSM(t)
	must.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(persist(t, f)))))
	must.Eq(t, dump(t, f.State()), dump(t, dst.State()))

	// The rest of the release, on both.
	for _, g := range []*FSM{f, dst} {
		resp := apply(t, g, next+1, structs.CSIVolumeCheckpointBatchRequestType,
			&structs.CSIVolumeCheckpointBatchRequest{Checkpoints: series[6:8], Timestamp: 100})
		refused := resp.([]error)
		must.NoError(t, refused[0])
		must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(refused[1]))
	}
	must.Eq(t, dump(t, f.State()), dump(t, dst.State()))
}
