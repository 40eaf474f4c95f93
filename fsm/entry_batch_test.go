package fsm

import (
	"fmt"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// entryBatch encodes requests as a batch entry's body, each as its own
// entry's body.
func entryBatch(t testing.TB, reqs ...any) *structs.EntryBatchRequest {
	t.Helper()
	b := &structs.EntryBatchRequest{}
	for _, r := range reqs {
		// The type byte is dropped: any type encodes the body the same.
		buf, err := structs.Encode(structs.CSIVolumeRegisterRequestType, r)
		must.NoError(t, err)
		b.Requests = append(b.Requests, buf[1:])
	}
	return b
}

// TestApplyEntryBatch_SameAsSingleEntries: the requests of a batch entry
// leave the volumes, the answers and the events that the same requests
// leave written one entry each, whether they share a transaction or not: a
// refused request, one partly refused by the store, and two requests for
// one volume change nothing of the others.
func TestApplyEntryBatch_SameAsSingleEntries(t *testing.T) {
	reg := func(vols ...*structs.CSIVolume) any {
		return &structs.CSIVolumeRegisterRequest{Volumes: vols, Timestamp: 99}
	}
	claimOf := func(volID, alloc, node string, mode structs.CSIVolumeClaimMode) any {
		return &structs.CSIVolumeClaimRequest{VolumeID: volID, Claim: claim(alloc, node, mode), Timestamp: 99}
	}
	updated := testVolume(ns, "vol-1", "p")
	updated.Context = map[string]string{"generation": "2"}
	cases := []struct {
		name string
		mt   structs.MessageType
		reqs []any
	}{
		{"registers shared", structs.CSIVolumeRegisterBatchRequestType,
			[]any{reg(testVolume(ns, "vol-1", "p")), reg(testVolume(ns, "vol-2", "p"), testVolume(ns, "vol-3", "p"))}},
		{"registers refused by the store", structs.CSIVolumeRegisterBatchRequestType, []any{reg(testVolume(ns, "vol-1", "p")),
			reg(testVolume(ns, "vol-2", "p"), testVolume(ns, "vol-3", "missing")), // all or nothing
			reg(testVolume(ns, "vol-4", "p"))}},
		{"registers refused before the store", structs.CSIVolumeRegisterBatchRequestType,
			[]any{reg(nil), reg(testVolume(ns, "vol-1", "p"))}},
		{"registers of one volume twice", structs.CSIVolumeRegisterBatchRequestType,
			[]any{reg(testVolume(ns, "vol-1", "p")), reg(updated), reg(testVolume(ns, "vol-2", "p"))}},
		{"claims shared", structs.CSIVolumeClaimBatchRequestType,
			[]any{claimOf("vol", "a2", "n2", structs.CSIVolumeClaimRead), claimOf("vol2", "a3", "n1", structs.CSIVolumeClaimWrite)}},
		{"claims refused", structs.CSIVolumeClaimBatchRequestType, []any{
			claimOf("vol", "a2", "n2", structs.CSIVolumeClaimWrite), // max claims: a1 writes
			claimOf("vol2", "a3", "n1", structs.CSIVolumeClaimRead)}},
		{"claims of one volume twice", structs.CSIVolumeClaimBatchRequestType, []any{
			claimOf("vol2", "a2", "n2", structs.CSIVolumeClaimWrite),
			claimOf("vol2", "a3", "n1", structs.CSIVolumeClaimWrite), // max claims: a2 writes now
			claimOf("vol", "a3", "n1", structs.CSIVolumeClaimRead)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inner, ok := structs.BatchedType(tc.mt)
			must.True(t, ok)
			last := reg(testVolume(ns, "vol-last", "p"))

			ref, next := authorityFSM(t)
			refSub, err := ref.State().Events().Subscribe(nil, 0)
			must.NoError(t, err)
			var want []string
			for i, r := range tc.reqs {
				want = append(want, fmt.Sprint(apply(t, ref, next+uint64(i), inner, r)))
			}
			mustApply(t, ref, next+10, structs.CSIVolumeRegisterRequestType, last)

			f, next := authorityFSM(t)
			sub, err := f.State().Events().Subscribe(nil, 0)
			must.NoError(t, err)
			resp := apply(t, f, next, tc.mt, entryBatch(t, tc.reqs...))
			got, ok := resp.([]error)
			if resp == nil {
				got, ok = make([]error, len(tc.reqs)), true // every request applied
			}
			must.True(t, ok, must.Sprintf("response %#v", resp))
			must.Len(t, len(tc.reqs), got)
			for i := range got {
				must.Eq(t, want[i], fmt.Sprint(got[i]), must.Sprintf("request %d", i))
			}
			mustApply(t, f, next+10, structs.CSIVolumeRegisterRequestType, last)

			must.Eq(t, withoutIndexes(volumes(t, ref.State())), withoutIndexes(volumes(t, f.State())))
			must.Eq(t, eventsUpTo(t, refSub, "vol-last"), eventsUpTo(t, sub, "vol-last"))
		})
	}
}

// withoutIndexes copies volumes with their Raft indexes cleared: the
// single entries and the batch are written at different indexes.
func withoutIndexes(vols []*structs.CSIVolume) []*structs.CSIVolume {
	out := make([]*structs.CSIVolume, len(vols))
	for i, v := range vols {
		c := v.Copy()
		c.CreateIndex, c.ModifyIndex = 0, 0
		out[i] = c
	}
	return out
}

// TestApplyEntryBatch_Refusals: a batch of the wrong shape is refused
// whole and changes nothing; a request in it that does not decode stops
// the FSM, as an entry that does not decode does.
func TestApplyEntryBatch_Refusals(t *testing.T) {
	f, next := authorityFSM(t)
	mustRespCode(t, apply(t, f, next, structs.CSIVolumeRegisterBatchRequestType, &structs.EntryBatchRequest{}),
		structs.ErrCodeInvalid)
	big := make([]any, structs.MaxEntryBatch+1)
	for i := range big {
		big[i] = &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{testVolume(ns, fmt.Sprintf("big-%d", i), "p")}}
	}
	mustRespCode(t, apply(t, f, next+1, structs.CSIVolumeRegisterBatchRequestType, entryBatch(t, big...)),
		structs.ErrCodeInvalid)
	v, err := f.State().CSIVolumeByID(nil, ns, "big-0")
	must.NoError(t, err)
	must.Nil(t, v)

	for _, mt := range []structs.MessageType{structs.CSIVolumeRegisterBatchRequestType, structs.CSIVolumeClaimBatchRequestType} {
		must.Panic(t, func() {
			apply(t, f, next+2, mt, &structs.EntryBatchRequest{Requests: [][]byte{{0xc1}}})
		}, must.Sprint(mt))
	}
}
