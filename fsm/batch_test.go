package fsm

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// TestApplyBatch_SameAsOneByOne applies one log through ApplyBatch, in
// batches of every size, and through Apply entry by entry, and finds the
// same responses, the same rows, the same table indexes and the same events
// (in order, by type and key) either way: batching is an optimisation of how
// the entries are applied, never of what they do.
func TestApplyBatch_SameAsOneByOne(t *testing.T) {
	entry := func(index uint64, mt structs.MessageType, req any) *raft.Log {
		buf, err := structs.Encode(mt, req)
		must.NoError(t, err)
		return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf}
	}
	register := func(index uint64, vols ...*structs.CSIVolume) *raft.Log {
		return entry(index, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
			Volumes: vols, Timestamp: int64(index) * 1000,
			WriteRequest: structs.WriteRequest{Namespace: "prod"},
		})
	}
	batch := func(index uint64, reqs ...any) *raft.Log {
		return entry(index, structs.CSIVolumeRegisterBatchRequestType, entryBatch(t, reqs...))
	}
	regReq := func(vols ...*structs.CSIVolume) *structs.CSIVolumeRegisterRequest {
		return &structs.CSIVolumeRegisterRequest{Volumes: vols, Timestamp: 37000,
			WriteRequest: structs.WriteRequest{Namespace: "prod"}}
	}
	claimOn := func(index uint64, volID string, c *structs.CSIVolumeClaim) *raft.Log {
		return entry(index, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
			VolumeID: volID, Claim: c, Timestamp: int64(index) * 1000,
			WriteRequest: structs.WriteRequest{Namespace: "prod"},
		})
	}
	// The allocations that claim below, placed before the log starts.
	jobs := map[string]*structs.Job{
		"a1": volumeJob("prod", "w1", "vol-a"),
		"a2": volumeJob("prod", "w2", "vol-h", "vol-a"),
		"a3": volumeJob("prod", "w3", "vol-i"),
	}
	setup := func(t *testing.T, f *FSM) {
		createNamespaces(t, f, 1, "prod")
		mustApply(t, f, 1, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})
		index := uint64(2)
		for _, id := range []string{"a1", "a2", "a3"} {
			index = place(t, f, index, jobs[id], id, "n1")
		}
	}
	checkpoint := func(c *structs.CSIVolumeClaim, st structs.CSIVolumeClaimState) *structs.CSIVolumeClaim {
		c.State = st
		return c
	}
	dropped := testVolume("", "vol-a", "p")
	dropped.Context = map[string]string{"generation": "2"}
	dropped.RequestedCapabilities = dropped.RequestedCapabilities[1:]
	updated := testVolume("", "vol-a", "p")
	updated.Context = map[string]string{"generation": "2"}
	logs := []*raft.Log{
		entry(10, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")}),
		register(11, testVolume("", "vol-a", "p")),
		register(12, testVolume(ns, "vol-b", "p"), testVolume("", "vol-c", "p")),
		register(13, updated), // vol-a again: a new run
		{Index: 14, Term: 1, Type: raft.LogConfiguration, Data: []byte{0xde, 0xad}},
		register(15, testVolume("", "vol-d", "missing")), // refused: the run falls back
		register(16, testVolume("", "vol-e", "p")),       // applied after the refusal
		register(17, testVolume("", "vol-e", "p")),       // unchanged: no new version
		entry(18, structs.CSIVolumeDeregisterRequestType, &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{"vol-b"}}),
		register(19, testVolume("", "vol-f", "p"), testVolume("", "vol-f", "p")), // twice in one entry
		register(20, nil), // refused before the store
		register(21, testVolume("", "vol-g", "missing")), // refused alone
		register(22, testVolume("", "vol-h", "p")),
		{Index: 23, Term: 1, Type: raft.LogBarrier},
		register(24, testVolume("", "vol-i", "p")),
		entry(25, structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{Timestamp: 25000, Allocs: []*structs.Allocation{
			running(jobs["a1"], "a1", "n1"), running(jobs["a2"], "a2", "n1"), running(jobs["a3"], "a3", "n1")}}),
		claimOn(26, "vol-a", claim("a1", "n1", structs.CSIVolumeClaimWrite)),
		register(27, testVolume("", "vol-j", "p")), // a register and claims share runs
		claimOn(28, "vol-h", claim("a2", "n1", structs.CSIVolumeClaimRead)),
		claimOn(29, "vol-a", claim("a2", "n1", structs.CSIVolumeClaimWrite)), // vol-a again, and refused: max claims
		claimOn(30, "vol-i", claim("a3", "n1", structs.CSIVolumeClaimWrite)),
		claimOn(31, "nope", claim("a3", "n1", structs.CSIVolumeClaimWrite)), // refused: no such volume
		register(32, dropped), // refused: a1 uses the capability
		claimOn(33, "vol-i", checkpoint(claim("a3", "n1", structs.CSIVolumeClaimWrite), structs.CSIVolumeClaimStateNodeDetached)), // refused: skips the node step
		claimOn(34, "vol-i", checkpoint(claim("a3", "n1", structs.CSIVolumeClaimWrite), structs.CSIVolumeClaimStateUnpublishing)),
		claimOn(35, "vol-h", checkpoint(claim("a1", "n1", structs.CSIVolumeClaimRead), structs.CSIVolumeClaimStateUnpublishing)), // refused: a1 holds no claim on vol-h
		register(36, testVolume("", "vol-k", "p")),
		batch(37, regReq(testVolume("", "vol-m", "p")), regReq(testVolume("", "vol-n", "p"), testVolume("", "vol-o", "p"))),
		batch(38, regReq(testVolume("", "vol-p", "p")), regReq(updated), regReq(testVolume("", "vol-q", "missing"))), // refused inside
		register(39, testVolume("", "vol-q", "p")),
		batch(40, regReq(testVolume("", "vol-r", "p")), regReq(testVolume("", "vol-r", "p"))), // the same volume twice
		batch(41, regReq(testVolume("", "vol-s", "p"))),
	}
	// The last event both sides publish, read up to in each.
	last := register(50, testVolume("", "vol-last", "p"))

	ref := testFSM(t)
	setup(t, ref)
	refSub, err := ref.State().Events().Subscribe(nil, 0)
	must.NoError(t, err)
	var want []any
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			want = append(want, ref.Apply(l))
		} else {
			want = append(want, nil)
		}
	}
	must.Nil(t, ref.Apply(last))
	wantEvents := eventsUpTo(t, refSub, "vol-last")
	must.NotNil(t, want[5], must.Sprint("the unknown plugin is refused"))
	must.NotNil(t, want[10], must.Sprint("the empty volume is refused"))
	for i := 15; i <= 18; i++ {
		must.Nil(t, want[i], must.Sprintf("entry %d is applied", logs[i].Index))
	}
	must.NotNil(t, want[19], must.Sprint("the second writer is refused"))
	must.Nil(t, want[20], must.Sprint("the claim after the refusal is applied"))
	must.NotNil(t, want[21], must.Sprint("the claim of a missing volume is refused"))
	for i, code := range map[int]structs.ErrorCode{22: structs.ErrCodeConflict, 23: structs.ErrCodeConflict, 25: structs.ErrCodeNotFound} {
		err, ok := want[i].(*structs.Error)
		must.True(t, ok, must.Sprintf("entry %d: a typed refusal, not %v", logs[i].Index, want[i]))
		must.Eq(t, code, err.Code, must.Sprintf("entry %d: %v", logs[i].Index, err))
	}
	must.Nil(t, want[24], must.Sprint("the release starts after the refused checkpoint"))
	must.Nil(t, want[26], must.Sprint("the register after the refusals is applied"))
	must.Nil(t, want[27], must.Sprint("a register batch applied whole answers nil"))
	must.StrContains(t, fmt.Sprint(want[28]), `[<nil> <nil> not-found: volume "vol-q": no CSI plugin named "missing"`)

	for _, size := range []int{1, 2, 3, 4, 5, 7, len(logs)} {
		t.Run(fmt.Sprintf("batches of %d", size), func(t *testing.T) {
			f := testFSM(t)
			setup(t, f)
			sub, err := f.State().Events().Subscribe(nil, 0)
			must.NoError(t, err)
			var got []any
			for i := 0; i < len(logs); i += size {
				resps := f.ApplyBatch(logs[i:min(i+size, len(logs))])
				must.Len(t, min(size, len(logs)-i), resps)
				got = append(got, resps...)
			}
			must.Nil(t, f.ApplyBatch([]*raft.Log{last})[0])

			for i := range want {
				must.Eq(t, fmt.Sprint(want[i]), fmt.Sprint(got[i]), must.Sprintf("response to entry %d", logs[i].Index))
			}
			must.Eq(t, volumes(t, ref.State()), volumes(t, f.State()))
			for _, table := range []string{state.TableCSIVolumes, state.TableNodes, state.TableCSIPlugins,
				state.TableAllocs, state.TableJobs} {
				refIndex, err := ref.State().Index(table)
				must.NoError(t, err)
				gotIndex, err := f.State().Index(table)
				must.NoError(t, err)
				must.Eq(t, refIndex, gotIndex, must.Sprintf("index of %s", table))
			}
			must.Eq(t, wantEvents, eventsUpTo(t, sub, "vol-last"))
		})
	}
}

func volumes(t *testing.T, st *state.StateStore) []*structs.CSIVolume {
	t.Helper()
	iter, err := st.CSIVolumesByNamespace(nil, state.AllNamespaces, "")
	must.NoError(t, err)
	var out []*structs.CSIVolume
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		out = append(out, raw.(*structs.CSIVolume))
	}
	return out
}

// eventsUpTo reads a subscription's events up to the one of volume key,
// as "type key" strings.
func eventsUpTo(t *testing.T, sub *state.Subscription, key string) []string {
	t.Helper()
	defer sub.Close()
	var out []string
	for {
		ev, err := sub.Next(context.Background())
		must.NoError(t, err)
		out = append(out, ev.Type+" "+ev.Namespace+"/"+ev.Key)
		if ev.Topic == state.TopicCSIVolume && ev.Key == key {
			return out
		}
	}
}

// TestApplyBatch_ConfigurationOnly: Raft hands a batching FSM its
// configuration entries too; they change nothing and answer nil.
func TestApplyBatch_ConfigurationOnly(t *testing.T) {
	f := testFSM(t)
	resps := f.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogConfiguration, Data: []byte{1, 2, 3}}})
	must.Eq(t, []any{nil}, resps)
	idx, err := f.State().LatestIndex()
	must.NoError(t, err)
	must.Zero(t, idx)
}

// TestApplyBatch_UndecodablePanics: an entry that does not decode stops
// the FSM inside a batch as it does alone, after the entries before it.
func TestApplyBatch_UndecodablePanics(t *testing.T) {
	f := testFSM(t)
	mustApply(t, f, 1, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})
	good, err := structs.Encode(structs.CSIVolumeRegisterRequestType,
		&structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{testVolume(ns, "vol", "p")}})
	must.NoError(t, err)
	must.Panic(t, func() {
		f.ApplyBatch([]*raft.Log{
			{Index: 2, Type: raft.LogCommand, Data: good},
			{Index: 3, Type: raft.LogCommand, Data: []byte{byte(structs.CSIVolumeRegisterRequestType), 0xc1}},
		})
	})
	v, err := f.State().CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.NotNil(t, v)
}
