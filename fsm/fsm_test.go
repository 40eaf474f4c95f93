package fsm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const ns = structs.DefaultNamespace

func testFSM(t *testing.T) *FSM {
	t.Helper()
	f, err := New(hclog.NewNullLogger())
	must.NoError(t, err)
	return f
}

// apply encodes req as a log entry of type mt and applies it at index.
func apply(t *testing.T, f *FSM, index uint64, mt structs.MessageType, req any) any {
	t.Helper()
	buf, err := structs.Encode(mt, req)
	must.NoError(t, err)
	return f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf})
}

// mustApply applies and fails the test on any response but nil.
func mustApply(t *testing.T, f *FSM, index uint64, mt structs.MessageType, req any) {
	t.Helper()
	resp := apply(t, f, index, mt, req)
	must.Nil(t, resp, must.Sprintf("apply %s: %v", mt, resp))
}

// createNamespaces applies the creation of namespaces at index.
func createNamespaces(t *testing.T, f *FSM, index uint64, names ...string) {
	t.Helper()
	req := &structs.NamespaceUpsertRequest{}
	for _, n := range names {
		req.Namespaces = append(req.Namespaces, &structs.Namespace{Name: n})
	}
	mustApply(t, f, index, structs.NamespaceUpsertRequestType, req)
}

func mustRespCode(t *testing.T, resp any, code structs.ErrorCode) {
	t.Helper()
	err, ok := resp.(error)
	must.True(t, ok, must.Sprintf("response %v is not an error", resp))
	must.Eq(t, code, structs.CodeOf(err), must.Sprint(err))
}

func testNode(id string, plugins ...string) *structs.Node {
	n := &structs.Node{
		ID: id, Name: id, SecretID: "s-" + id, Datacenter: "dc1",
		Status:         structs.NodeStatusReady,
		CSINodePlugins: map[string]*structs.CSIInfo{},
	}
	for _, p := range plugins {
		n.CSINodePlugins[p] = &structs.CSIInfo{
			PluginID: p, Healthy: true, Provider: "example.com/" + p,
			UpdateTime: time.Unix(1700000000, 0).UTC(),
			NodeInfo:   &structs.CSINodeInfo{ID: "ext-" + id, MaxVolumes: 8},
		}
	}
	return n
}

func testVolume(namespace, id, pluginID string) *structs.CSIVolume {
	return &structs.CSIVolume{
		ID: id, Namespace: namespace, Name: id, ExternalID: "ext-" + id, PluginID: pluginID,
		RequestedCapabilities: []*structs.CSIVolumeCapability{
			{AccessMode: structs.CSIVolumeAccessModeMultiNodeSingleWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
			{AccessMode: structs.CSIVolumeAccessModeMultiNodeReader, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
		},
		MountOptions: &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Secrets:      structs.CSISecrets{"token": "s3cret"},
		Parameters:   map[string]string{"type": "ssd"},
	}
}

// volumeJob is a service job of one group "app" of count 1 that asks for
// each source volume in the mode claim uses (multi-node-single-writer), to
// write (alias "w-<source>") and to read ("r-<source>").
func volumeJob(namespace, id string, sources ...string) *structs.Job {
	tg := &structs.TaskGroup{Name: "app", Count: 1, Volumes: map[string]*structs.VolumeRequest{},
		Tasks: []*structs.Task{{Name: "t", Driver: structs.TaskDriverExec, Config: structs.TaskConfig{Command: "/bin/true"}}}}
	for _, src := range sources {
		for _, ro := range []bool{false, true} {
			alias := "w-" + src
			if ro {
				alias = "r-" + src
			}
			tg.Volumes[alias] = &structs.VolumeRequest{Name: alias, Type: structs.VolumeTypeCSI, Source: src, ReadOnly: ro,
				AccessMode:     structs.CSIVolumeAccessModeMultiNodeSingleWriter,
				AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
		}
	}
	return &structs.Job{ID: id, Namespace: namespace, Name: id, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{tg}}
}

// newAlloc is the allocation a plan places for slot 0 of job's group "app".
func newAlloc(job *structs.Job, id, nodeID string) *structs.Allocation {
	return &structs.Allocation{
		ID: id, Namespace: job.Namespace, Name: structs.AllocName(job.ID, "app", 0), JobID: job.ID, TaskGroup: "app",
		NodeID: nodeID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending,
	}
}

// place registers job at index and places its allocation allocID on a
// node at index+1, through the FSM as the leader would write them; it
// returns the next free index.
func place(t *testing.T, f *FSM, index uint64, job *structs.Job, allocID, nodeID string) uint64 {
	t.Helper()
	mustApply(t, f, index, structs.JobRegisterRequestType, &structs.JobRegisterRequest{Job: job, Timestamp: int64(index)})
	mustApply(t, f, index+1, structs.PlanApplyRequestType, &structs.PlanApplyRequest{Namespace: job.Namespace, JobID: job.ID,
		JobModifyIndex: index, Allocs: []*structs.Allocation{newAlloc(job, allocID, nodeID)}, Timestamp: int64(index + 1)})
	return index + 2
}

// running is the client's report that job's allocation allocID runs.
func running(job *structs.Job, allocID, nodeID string) *structs.Allocation {
	a := newAlloc(job, allocID, nodeID)
	a.ClientStatus = structs.AllocClientStatusRunning
	return a
}

// placeRunning places job's allocation (see place) and has the client
// report it running at the index after; it returns the next free index.
func placeRunning(t *testing.T, f *FSM, index uint64, job *structs.Job, allocID, nodeID string) uint64 {
	t.Helper()
	index = place(t, f, index, job, allocID, nodeID)
	mustApply(t, f, index, structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{
		Allocs: []*structs.Allocation{running(job, allocID, nodeID)}, Timestamp: int64(index)})
	return index + 1
}

func claim(allocID, nodeID string, mode structs.CSIVolumeClaimMode) *structs.CSIVolumeClaim {
	c := &structs.CSIVolumeClaim{
		AllocationID: allocID, NodeID: nodeID, ExternalNodeID: "ext-" + nodeID, Mode: mode,
		AccessMode:     structs.CSIVolumeAccessModeMultiNodeSingleWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		PublishContext: map[string]string{"device": "/dev/xvdb"},
	}
	if mode == structs.CSIVolumeClaimRead {
		c.ReadOnly = true
	}
	return c
}

func TestRegistry(t *testing.T) {
	for _, mt := range structs.MessageTypes() {
		must.False(t, strings.HasPrefix(mt.String(), "MessageType("), must.Sprintf("message type %d has no name", mt))
		must.MapContainsKey(t, appliers, mt, must.Sprintf("no applier for %s", mt))
		must.Zero(t, mt&structs.IgnoreUnknownTypeFlag, must.Sprintf("%s uses the ignore flag bit", mt))
	}
	must.MapLen(t, len(structs.MessageTypes()), appliers)
	for mt := range batchers {
		must.MapContainsKey(t, appliers, mt, must.Sprintf("batcher for %s, which has no applier to fall back on", mt))
	}
	// A batch type's requests share a transaction through their own
	// type's batcher; without one each would take a transaction.
	for _, mt := range structs.MessageTypes() {
		if inner, ok := structs.BatchedType(mt); ok {
			must.MapContainsKey(t, batchers, inner, must.Sprintf("%s carries %s, which has no batcher", mt, inner))
			_, nested := structs.BatchedType(inner)
			must.False(t, nested, must.Sprintf("%s carries batches", mt))
		}
	}

	restoreOnly := structs.RestoreOnlySnapshotTypes()
	for _, st := range structs.SnapshotTypes() {
		must.False(t, strings.HasPrefix(st.String(), "SnapshotType("), must.Sprintf("snapshot type %d has no name", st))
		must.MapContainsKey(t, restorers, st, must.Sprintf("no restorer for %s", st))
		if slices.Contains(restoreOnly, st) {
			must.MapNotContainsKey(t, persisters, st, must.Sprintf("%s is restored only, yet written", st))
		} else {
			must.MapContainsKey(t, persisters, st, must.Sprintf("no persister for %s", st))
		}
	}
	must.MapLen(t, len(structs.SnapshotTypes()), restorers)
	must.MapLen(t, len(structs.SnapshotTypes())-len(restoreOnly), persisters)
}

func TestApply_UnknownTypePanics(t *testing.T) {
	f := testFSM(t)
	must.Panic(t, func() { f.Apply(&raft.Log{Index: 1, Data: []byte{99}}) })
	must.Panic(t, func() { f.Apply(&raft.Log{Index: 1, Data: nil}) })
}

func TestApply_IgnorableUnknownType(t *testing.T) {
	f := testFSM(t)
	must.Nil(t, f.Apply(&raft.Log{Index: 1, Data: []byte{99 | byte(structs.IgnoreUnknownTypeFlag), 0x80}}))

	// The flag on a type this server knows does not stop it being applied.
	resp := apply(t, f, 2, structs.NodeRegisterRequestType|structs.IgnoreUnknownTypeFlag,
		&structs.NodeRegisterRequest{Node: testNode("n1")})
	must.Nil(t, resp)
	n, err := f.State().NodeByID(nil, "n1")
	must.NoError(t, err)
	must.NotNil(t, n)
}

func TestApply_UndecodableBodyPanics(t *testing.T) {
	f := testFSM(t)
	// 0xc1 is never used by msgpack.
	must.Panic(t, func() {
		f.Apply(&raft.Log{Index: 1, Data: []byte{byte(structs.NodeRegisterRequestType), 0xc1}})
	})
	// A map header promising more than follows.
	must.Panic(t, func() {
		f.Apply(&raft.Log{Index: 1, Data: []byte{byte(structs.CSIVolumeClaimRequestType), 0x83, 0xa1}})
	})
	must.Panic(t, func() {
		f.Apply(&raft.Log{Index: 1, Data: []byte{byte(structs.AllocUpsertRequestType)}})
	})
}

func TestApply_Nodes(t *testing.T) {
	f := testFSM(t)
	mustApply(t, f, 10, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})

	st := f.State()
	n, err := st.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, uint64(10), n.CreateIndex)
	p, err := st.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Eq(t, 1, p.NodesHealthy)

	mustApply(t, f, 11, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{
		NodeID: "n1", Status: structs.NodeStatusDown, UpdatedAt: 4242,
	})
	n, err = st.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, structs.NodeStatusDown, n.Status)
	must.Eq(t, int64(4242), n.StatusUpdatedAt)

	// A refused write is the response, not a panic.
	resp := apply(t, f, 12, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "nope", Status: structs.NodeStatusDown})
	mustRespCode(t, resp, structs.ErrCodeNotFound)
	mustRespCode(t, apply(t, f, 12, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{}), structs.ErrCodeInvalid)

	mustApply(t, f, 13, structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	n, err = st.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Nil(t, n)
	p, err = st.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p)
}

func TestApply_CSIVolumes(t *testing.T) {
	f := testFSM(t)
	st := f.State()
	createNamespaces(t, f, 9, "prod")
	mustApply(t, f, 10, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1", "p")})

	// A volume without a namespace gets the request's.
	vol := testVolume("", "vol", "p")
	mustApply(t, f, 11, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
		Volumes: []*structs.CSIVolume{vol}, Timestamp: 1000,
		WriteRequest: structs.WriteRequest{Namespace: "prod"},
	})
	v, err := st.CSIVolumeByID(nil, "prod", "vol")
	must.NoError(t, err)
	must.NotNil(t, v)
	must.Eq(t, int64(1000), v.CreateTime)
	must.Eq(t, int64(1000), v.ModifyTime)
	must.True(t, v.Schedulable)
	must.Eq(t, structs.CSISecrets{"token": "s3cret"}, v.Secrets)

	// An update keeps the creation time and takes the new modify time.
	upd := testVolume("prod", "vol", "p")
	upd.Context = map[string]string{"k": "v"}
	mustApply(t, f, 12, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
		Volumes: []*structs.CSIVolume{upd}, Timestamp: 2000,
	})
	v, err = st.CSIVolumeByID(nil, "prod", "vol")
	must.NoError(t, err)
	must.Eq(t, int64(1000), v.CreateTime)
	must.Eq(t, int64(2000), v.ModifyTime)
	must.Eq(t, uint64(12), v.ModifyIndex)

	mustRespCode(t, apply(t, f, 13, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
		Volumes: []*structs.CSIVolume{testVolume(ns, "x", "missing")}, Timestamp: 3000,
	}), structs.ErrCodeNotFound)

	// Claims: the claim time is the request's.
	next := placeRunning(t, f, 14, volumeJob("prod", "web1", "vol"), "a1", "n1")
	placeRunning(t, f, next, volumeJob("prod", "web2", "vol"), "a2", "n1") // 17 to 19
	prod := structs.WriteRequest{Namespace: "prod"}
	mustApply(t, f, 20, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol", Claim: claim("a1", "n1", structs.CSIVolumeClaimWrite), Timestamp: 4000, WriteRequest: prod,
	})
	v, err = st.CSIVolumeByID(nil, "prod", "vol")
	must.NoError(t, err)
	must.Eq(t, int64(4000), v.WriteClaims["a1"].ClaimedAt)
	must.Eq(t, int64(4000), v.ModifyTime)
	must.Eq(t, map[string]string{"device": "/dev/xvdb"}, v.WriteClaims["a1"].PublishContext)

	// A second writer is refused with the claim rules' typed error.
	resp := apply(t, f, 21, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol", Claim: claim("a2", "n1", structs.CSIVolumeClaimWrite), Timestamp: 4100, WriteRequest: prod,
	})
	mustRespCode(t, resp, structs.ErrCodeMaxClaims)
	must.StrContains(t, resp.(error).Error(), `"a1"`)

	// Deregistration uses the request's namespace and is refused in use.
	mustRespCode(t, apply(t, f, 22, structs.CSIVolumeDeregisterRequestType, &structs.CSIVolumeDeregisterRequest{
		VolumeIDs: []string{"vol"}, WriteRequest: prod,
	}), structs.ErrCodeConflict)
	free := claim("a1", "n1", structs.CSIVolumeClaimWrite)
	free.State = structs.CSIVolumeClaimStateUnpublishing
	mustApply(t, f, 23, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol", Claim: free, Timestamp: 5000, WriteRequest: prod,
	})
	free.State = structs.CSIVolumeClaimStateReadyToFree
	mustApply(t, f, 24, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
		VolumeID: "vol", Claim: free, Timestamp: 5000, WriteRequest: prod,
	})
	mustRespCode(t, apply(t, f, 25, structs.CSIVolumeDeregisterRequestType, &structs.CSIVolumeDeregisterRequest{
		VolumeIDs: []string{"vol"},
	}), structs.ErrCodeNotFound)
	mustApply(t, f, 26, structs.CSIVolumeDeregisterRequestType, &structs.CSIVolumeDeregisterRequest{
		VolumeIDs: []string{"vol"}, WriteRequest: prod,
	})
	v, err = st.CSIVolumeByID(nil, "prod", "vol")
	must.NoError(t, err)
	must.Nil(t, v)
}

func TestApply_Allocs(t *testing.T) {
	f := testFSM(t)
	mustApply(t, f, 9, structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: testNode("n1")})
	job := volumeJob(ns, "web")
	mustApply(t, f, 10, structs.JobRegisterRequestType, &structs.JobRegisterRequest{Job: job, Timestamp: 50})
	a := newAlloc(job, "a1", "n1")
	a.CreateTime, a.ModifyTime = 100, 100
	mustApply(t, f, 11, structs.PlanApplyRequestType, &structs.PlanApplyRequest{Namespace: ns, JobID: "web",
		JobModifyIndex: 10, Allocs: []*structs.Allocation{a}, Timestamp: 100})
	got, err := f.State().AllocByID(nil, "a1")
	must.NoError(t, err)
	must.Eq(t, int64(100), got.CreateTime)
	must.Eq(t, int64(100), got.ModifyTime)

	// A client report without a namespace gets the request's; it keeps
	// the creation time and takes the request's time.
	done := a.Copy()
	done.Namespace = ""
	done.ClientStatus = structs.AllocClientStatusComplete
	mustApply(t, f, 12, structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{
		Allocs: []*structs.Allocation{done}, Timestamp: 200,
	})
	got, err = f.State().AllocByID(nil, "a1")
	must.NoError(t, err)
	must.Eq(t, structs.AllocClientStatusComplete, got.ClientStatus)
	must.Eq(t, int64(100), got.CreateTime)
	must.Eq(t, int64(200), got.ModifyTime)
	must.Eq(t, uint64(12), got.ModifyIndex)
	byJob, err := f.State().AllocsByJob(nil, ns, "web")
	must.NoError(t, err)
	must.Len(t, 1, byJob)
}
