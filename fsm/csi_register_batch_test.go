package fsm

import (
	"fmt"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// registerBatch encodes requests as a register batch, each as its own
// entry's body.
func registerBatch(t testing.TB, reqs ...*structs.CSIVolumeRegisterRequest) *structs.CSIVolumeRegisterBatchRequest {
	t.Helper()
	b := &structs.CSIVolumeRegisterBatchRequest{}
	for _, r := range reqs {
		buf, err := structs.Encode(structs.CSIVolumeRegisterRequestType, r)
		must.NoError(t, err)
		b.Requests = append(b.Requests, buf[1:])
	}
	return b
}

// TestApplyRegisterBatch_SameAsSingleRegisters: the requests of a register
// batch leave the volumes, the answers and the events that the same
// requests leave written one entry each, whether they share a transaction
// or not: a refused request, one partly refused by the store, and two
// requests for one volume change nothing of the others.
func TestApplyRegisterBatch_SameAsSingleRegisters(t *testing.T) {
	req := func(vols ...*structs.CSIVolume) *structs.CSIVolumeRegisterRequest {
		return &structs.CSIVolumeRegisterRequest{Volumes: vols, Timestamp: 99}
	}
	updated := testVolume(ns, "vol-1", "p")
	updated.Context = map[string]string{"generation": "2"}
	cases := map[string][]*structs.CSIVolumeRegisterRequest{
		"shared": {req(testVolume(ns, "vol-1", "p")), req(testVolume(ns, "vol-2", "p"), testVolume(ns, "vol-3", "p"))},
		"refused by the store": {req(testVolume(ns, "vol-1", "p")),
			req(testVolume(ns, "vol-2", "p"), testVolume(ns, "vol-3", "missing")), // all or nothing
			req(testVolume(ns, "vol-4", "p"))},
		"refused before the store": {req(nil), req(testVolume(ns, "vol-1", "p"))},
		"one volume twice":         {req(testVolume(ns, "vol-1", "p")), req(updated), req(testVolume(ns, "vol-2", "p"))},
	}
	for name, reqs := range cases {
		t.Run(name, func(t *testing.T) {
			ref, next := authorityFSM(t)
			refSub, err := ref.State().Events().Subscribe(nil, 0)
			must.NoError(t, err)
			var want []string
			for i, r := range reqs {
				want = append(want, fmt.Sprint(apply(t, ref, next+uint64(i), structs.CSIVolumeRegisterRequestType, r)))
			}
			mustApply(t, ref, next+10, structs.CSIVolumeRegisterRequestType, req(testVolume(ns, "vol-last", "p")))

			f, next := authorityFSM(t)
			sub, err := f.State().Events().Subscribe(nil, 0)
			must.NoError(t, err)
			resp := apply(t, f, next, structs.CSIVolumeRegisterBatchRequestType, registerBatch(t, reqs...))
			got, ok := resp.([]error)
			if resp == nil {
				got, ok = make([]error, len(reqs)), true // every request applied
			}
			must.True(t, ok, must.Sprintf("response %#v", resp))
			must.Len(t, len(reqs), got)
			for i := range got {
				must.Eq(t, want[i], fmt.Sprint(got[i]), must.Sprintf("request %d", i))
			}
			mustApply(t, f, next+10, structs.CSIVolumeRegisterRequestType, req(testVolume(ns, "vol-last", "p")))

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

// TestApplyRegisterBatch_Refusals: a batch of the wrong shape is refused
// whole and changes nothing; a request in it that does not decode stops
// the FSM, as an entry that does not decode does.
func TestApplyRegisterBatch_Refusals(t *testing.T) {
	f, next := authorityFSM(t)
	mustRespCode(t, apply(t, f, next, structs.CSIVolumeRegisterBatchRequestType, &structs.CSIVolumeRegisterBatchRequest{}),
		structs.ErrCodeInvalid)
	big := make([]*structs.CSIVolumeRegisterRequest, structs.MaxRegisterBatch+1)
	for i := range big {
		big[i] = &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{testVolume(ns, fmt.Sprintf("big-%d", i), "p")}}
	}
	mustRespCode(t, apply(t, f, next+1, structs.CSIVolumeRegisterBatchRequestType, registerBatch(t, big...)),
		structs.ErrCodeInvalid)
	v, err := f.State().CSIVolumeByID(nil, ns, "big-0")
	must.NoError(t, err)
	must.Nil(t, v)

	must.Panic(t, func() {
		apply(t, f, next+2, structs.CSIVolumeRegisterBatchRequestType,
			&structs.CSIVolumeRegisterBatchRequest{Requests: [][]byte{{0xc1}}})
	})
}
