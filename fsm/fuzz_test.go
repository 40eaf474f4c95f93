package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// decodable reports whether the FSM would get past decoding entry: a known
// type (or one with the ignore flag) whose body decodes.
func decodable(entry []byte) bool {
	if len(entry) == 0 {
		return false
	}
	mt := structs.MessageType(entry[0])
	// newRequest (authority_test.go) knows what every type decodes into.
	req := newRequest(mt &^ structs.IgnoreUnknownTypeFlag)
	if req == nil {
		return mt&structs.IgnoreUnknownTypeFlag != 0
	}
	if structs.Decode(entry[1:], req) != nil {
		return false
	}
	// A batch's requests are decoded one by one, each as its own entry's
	// body.
	if inner, ok := structs.BatchedType(mt); ok {
		for _, raw := range req.(*structs.EntryBatchRequest).Requests {
			if structs.Decode(raw, newRequest(inner)) != nil {
				return false
			}
		}
	}
	return true
}

// fuzzSeedState is what every FuzzApply input is applied on: a node running
// a controller and node instance of plugin p, two volumes, a job whose
// allocation holds a write claim on one of them.
func fuzzSeedState(t testing.TB) []*raft.Log {
	node := testNode("n1", "p")
	node.CSIControllerPlugins = map[string]*structs.CSIInfo{"p": {
		PluginID: "p", Healthy: true, Provider: "example.com/p",
		ControllerInfo: &structs.CSIControllerInfo{SupportsAttachDetach: true},
	}}
	job := &structs.Job{ID: "web", Namespace: ns, Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{
		Name: "app", Count: 1,
		Volumes: map[string]*structs.VolumeRequest{"data": {
			Name: "data", Type: structs.VolumeTypeCSI, Source: "vol-a",
			AccessMode:     structs.CSIVolumeAccessModeMultiNodeSingleWriter,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		}},
		Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"}}},
	}}}
	alloc := testAlloc(ns, "a1", "n1")
	var logs []*raft.Log
	add := func(mt structs.MessageType, req any) {
		buf, err := structs.Encode(mt, req)
		must.NoError(t, err)
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: buf})
	}
	add(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: node})
	add(structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
		Volumes: []*structs.CSIVolume{testVolume(ns, "vol-a", "p"), testVolume(ns, "vol-b", "p")}, Timestamp: 1,
	})
	add(structs.JobRegisterRequestType, &structs.JobRegisterRequest{Job: job, Timestamp: 2})
	// New allocations come only from a plan; the client then reports it.
	placed := alloc.Copy()
	placed.ClientStatus = structs.AllocClientStatusPending
	add(structs.PlanApplyRequestType, &structs.PlanApplyRequest{Namespace: ns, JobID: job.ID, JobModifyIndex: 3,
		Allocs: []*structs.Allocation{placed}, Timestamp: 3})
	add(structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{Allocs: []*structs.Allocation{alloc}, Timestamp: 3})
	add(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol-a", Claim: claim("a1", "n1", structs.CSIVolumeClaimWrite), Timestamp: 4,
	})
	return logs
}

// fuzzEntrySeeds are entries of every type, as the leader writes them, and
// a few it never would.
func fuzzEntrySeeds(t testing.TB) [][]byte {
	enc := func(mt structs.MessageType, req any) []byte {
		buf, err := structs.Encode(mt, req)
		must.NoError(t, err)
		return buf
	}
	release := claim("a1", "n1", structs.CSIVolumeClaimWrite)
	release.State = structs.CSIVolumeClaimStateUnpublishing
	free := claim("a1", "n1", structs.CSIVolumeClaimWrite)
	free.State = structs.CSIVolumeClaimStateReadyToFree
	stopped := testAlloc(ns, "a1", "n1")
	stopped.ClientStatus = structs.AllocClientStatusComplete
	narrowed := testVolume(ns, "vol-a", "p")
	narrowed.RequestedCapabilities = narrowed.RequestedCapabilities[1:]
	register := func(vols ...*structs.CSIVolume) *structs.CSIVolumeRegisterRequest {
		return &structs.CSIVolumeRegisterRequest{Volumes: vols, Timestamp: 9}
	}
	return [][]byte{
		enc(structs.CSIVolumeRegisterBatchRequestType, entryBatch(t, register(testVolume(ns, "vol-c", "p")),
			register(narrowed), register(testVolume(ns, "vol-b", "p"), testVolume(ns, "vol-d", "missing")))),
		enc(structs.CSIVolumeRegisterBatchRequestType, entryBatch(t, register(testVolume(ns, "vol-c", "p")),
			register(testVolume(ns, "vol-e", "p")))),
		enc(structs.CSIVolumeClaimBatchRequestType, entryBatch(t,
			&structs.CSIVolumeClaimRequest{VolumeID: "vol-b", Claim: claim("a1", "n1", structs.CSIVolumeClaimRead), Timestamp: 9},
			&structs.CSIVolumeClaimRequest{VolumeID: "vol-a", Claim: claim("a2", "n1", structs.CSIVolumeClaimWrite), Timestamp: 9})),
		enc(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{VolumeID: "vol-a", Claim: claim("a2", "n1", structs.CSIVolumeClaimWrite), Timestamp: 9}),
		enc(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{VolumeID: "vol-b", Claim: claim("a1", "n1", structs.CSIVolumeClaimRead), Timestamp: 9}),
		enc(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{VolumeID: "vol-a", Claim: release, Timestamp: 9}),
		enc(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{VolumeID: "vol-a", Claim: free, Timestamp: 9}),
		enc(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{VolumeID: "vol-a", Timestamp: 9}),
		enc(structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{narrowed}, Timestamp: 9}),
		enc(structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{nil}, Timestamp: 9}),
		enc(structs.CSIVolumeDeregisterRequestType, &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{"vol-a", "vol-b"}, Force: true}),
		enc(structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{Allocs: []*structs.Allocation{stopped}, Timestamp: 9}),
		enc(structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{Allocs: []*structs.Allocation{nil}, Timestamp: 9}),
		enc(structs.JobDeregisterRequestType, &structs.JobDeregisterRequest{JobID: "web", Timestamp: 9}),
		enc(structs.JobRegisterRequestType, &structs.JobRegisterRequest{Job: &structs.Job{ID: "web"}, Timestamp: 9}),
		enc(structs.PlanApplyRequestType, &structs.PlanApplyRequest{Namespace: ns, JobID: "web", Allocs: []*structs.Allocation{testAlloc(ns, "a3", "n1")}, Timestamp: 9}),
		enc(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown, UpdatedAt: 9}),
		enc(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}}),
		enc(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: &structs.Node{ID: "n2"}}),
		{byte(structs.IgnoreUnknownTypeFlag | 99), 0x80},
	}
}

// FuzzApply applies two decodable entries to the same state, one at a time
// and as one ApplyBatch: neither may panic (the FSM panics only on entries
// it cannot decode, and every replica would), and both ways must give the
// same responses and the same state, since replicas batch differently.
func FuzzApply(f *testing.F) {
	seeds := fuzzEntrySeeds(f)
	for i, a := range seeds {
		f.Add(a, seeds[(i+1)%len(seeds)])
		f.Add(a, a)
	}
	base := fuzzSeedState(f)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if !decodable(a) || !decodable(b) {
			return
		}
		next := uint64(len(base) + 1)
		logs := []*raft.Log{
			{Index: next, Term: 1, Type: raft.LogCommand, Data: a},
			{Index: next + 1, Term: 1, Type: raft.LogCommand, Data: b},
		}
		one := seededFSM(t, base)
		var want []any
		for _, l := range logs {
			want = append(want, one.Apply(l))
		}
		batched := seededFSM(t, base)
		got := batched.ApplyBatch(logs)
		must.Eq(t, fmt.Sprint(want), fmt.Sprint(got), must.Sprint("responses one at a time and batched"))
		must.Eq(t, dumpState(t, one.State()), dumpState(t, batched.State()))
	})
}

func seededFSM(t *testing.T, logs []*raft.Log) *FSM {
	t.Helper()
	f := testFSM(t)
	for _, l := range logs {
		must.Nil(t, f.Apply(l), must.Sprintf("seed entry %d", l.Index))
	}
	return f
}

// stateDump is every row and table index of a store.
type stateDump struct {
	Rows    map[string][]any
	Indexes map[string]uint64
}

func dumpState(t *testing.T, st *state.StateStore) stateDump {
	t.Helper()
	d := stateDump{Rows: map[string][]any{}, Indexes: map[string]uint64{}}
	for table, list := range map[string]func() (interface{ Next() interface{} }, error){
		state.TableNodes:      func() (interface{ Next() interface{} }, error) { return st.Nodes(nil) },
		state.TableCSIPlugins: func() (interface{ Next() interface{} }, error) { return st.CSIPlugins(nil) },
		state.TableJobs:       func() (interface{ Next() interface{} }, error) { return st.Jobs(nil) },
		state.TableAllocs:     func() (interface{ Next() interface{} }, error) { return st.Allocs(nil) },
		state.TableCSIVolumes: func() (interface{ Next() interface{} }, error) {
			return st.CSIVolumesByNamespace(nil, state.AllNamespaces, "")
		},
	} {
		iter, err := list()
		must.NoError(t, err)
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			d.Rows[table] = append(d.Rows[table], raw)
		}
		index, err := st.Index(table)
		must.NoError(t, err)
		d.Indexes[table] = index
	}
	return d
}

// A run whose last entry changes nothing (here a client repeating its
// claim) must leave each table's index where the entry that changed it
// put it, as applying them one at a time does: servers batch differently,
// and their indexes must not differ. Found by FuzzApply.
func TestApplyBatch_NoOpEntryKeepsTableIndex(t *testing.T) {
	base := fuzzSeedState(t)
	next := uint64(len(base) + 1)
	entry := func(index uint64, volID string, c *structs.CSIVolumeClaim) *raft.Log {
		buf, err := structs.Encode(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{VolumeID: volID, Claim: c, Timestamp: int64(index)})
		must.NoError(t, err)
		return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf}
	}
	logs := []*raft.Log{
		entry(next, "vol-b", claim("a1", "n1", structs.CSIVolumeClaimRead)),    // a new claim
		entry(next+1, "vol-a", claim("a1", "n1", structs.CSIVolumeClaimWrite)), // a repeat: no change
	}
	one := seededFSM(t, base)
	for _, l := range logs {
		must.Nil(t, one.Apply(l))
	}
	batched := seededFSM(t, base)
	must.Eq(t, []any{nil, nil}, batched.ApplyBatch(logs))
	for _, st := range []*state.StateStore{one.State(), batched.State()} {
		index, err := st.Index(state.TableCSIVolumes)
		must.NoError(t, err)
		must.Eq(t, next, index)
	}
	must.Eq(t, dumpState(t, one.State()), dumpState(t, batched.State()))
}

// testAlloc is slot 0 of job "web", group "app", running on nodeID.
func testAlloc(namespace, id, nodeID string) *structs.Allocation {
	return &structs.Allocation{
		ID: id, Namespace: namespace, Name: "web.app[0]", JobID: "web", TaskGroup: "app", NodeID: nodeID,
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning,
	}
}
