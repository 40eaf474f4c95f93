package fsm

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// TestFSM_NodeGC: a node GC entry removes a node only when it is down
// beyond the entry's threshold at the entry's time and no claim on it is
// left; the node's plugin instances go with it, and a plugin left without
// instances stays while volumes name it, unschedulable with a reason, and
// goes with its last volume.
func TestFSM_NodeGC(t *testing.T) {
	f, next := authorityFSM(t)
	st := f.State
	down := func(nodeID string, at int64) {
		t.Helper()
		mustApply(t, f, next, structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{
			NodeID: nodeID, Status: structs.NodeStatusDown, UpdatedAt: at})
		next++
	}
	gc := func(threshold time.Duration, now int64, ids ...string) any {
		t.Helper()
		resp := apply(t, f, next, structs.NodeGCRequestType, &structs.NodeGCRequest{NodeIDs: ids, Threshold: threshold, Timestamp: now})
		next++
		return resp
	}
	const threshold = 100 * time.Nanosecond

	// n2 runs a2, which holds no claim.
	down("n2", 1000)
	before := dump(t, st())
	mustRespCode(t, gc(threshold, 1099, "n2"), structs.ErrCodeConflict)
	must.Eq(t, before, dump(t, st()), must.Sprint("a node down for less than the threshold stays"))
	mustRespCode(t, gc(threshold, 5000, "n1", "n2"), structs.ErrCodeConflict)
	must.Eq(t, before, dump(t, st()), must.Sprint("a ready node in the batch keeps every node"))

	must.Nil(t, gc(threshold, 1100, "n2"))
	n, err := st().NodeByID(nil, "n2")
	must.NoError(t, err)
	must.Nil(t, n)
	p, err := st().CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.MapNotContainsKey(t, p.Nodes, "n2")
	must.Eq(t, []int{1, 1}, []int{p.NodesHealthy, p.NodesExpected}, must.Sprint("the expected count is back to the live node"))

	// n1's allocation a1 holds a write claim on "vol": n1 stays until the
	// claim is released, whatever the time.
	down("n1", 2000)
	resp := gc(0, 1<<62, "n1")
	mustRespCode(t, resp, structs.ErrCodeConflict)
	must.StrContains(t, resp.(error).Error(), "vol (allocation a1)")
	for _, s := range []structs.CSIVolumeClaimState{structs.CSIVolumeClaimStateUnpublishing,
		structs.CSIVolumeClaimStateNodeDetached, structs.CSIVolumeClaimStateControllerDetached,
		structs.CSIVolumeClaimStateReadyToFree} {
		mustApply(t, f, next, structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
			VolumeID: "vol", Claim: checkpointOf(claim("a1", "n1", structs.CSIVolumeClaimWrite), s), Timestamp: int64(next)})
		next++
	}
	must.Nil(t, gc(0, 2000, "n1"), must.Sprint("a zero threshold collects a node down at the entry's time"))

	// No node runs p; the volumes that name it keep it, unschedulable.
	p, err = st().CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.NotNil(t, p)
	must.Eq(t, []int{0, 0, 0, 0}, []int{p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected})
	v, err := st().CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.False(t, v.Schedulable)
	must.Eq(t, `plugin "p" has no healthy node plugins (0/0): no node runs it`, v.UnschedulableReason)
	stubs, _, err := st().CSIVolumeStubs(nil, ns, "", "", "", 0)
	must.NoError(t, err)
	must.Len(t, 2, stubs)
	must.Eq(t, v.UnschedulableReason, stubs[0].UnschedulableReason)

	mustApply(t, f, next, structs.CSIVolumeDeregisterRequestType, &structs.CSIVolumeDeregisterRequest{
		VolumeIDs: []string{"vol", "vol2"}, WriteRequest: structs.WriteRequest{Namespace: ns}})
	p, err = st().CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p, must.Sprint("the plugin goes with its last volume"))
}

// TestFSM_PluginGC: a plugin GC entry removes an empty plugin row that no
// volume names, such as one restored from an older snapshot, skips one
// that is gone, and refuses one with instances or volumes.
func TestFSM_PluginGC(t *testing.T) {
	f, next := authorityFSM(t)
	r, err := f.State().Restore()
	must.NoError(t, err)
	must.NoError(t, r.CSIPluginRestore(structs.NewCSIPlugin("stale", 3)))
	must.NoError(t, r.Commit())

	ids, err := f.State().GCPluginCandidates()
	must.NoError(t, err)
	must.Eq(t, []string{"stale"}, ids)

	before := dump(t, f.State())
	mustRespCode(t, apply(t, f, next, structs.CSIPluginGCRequestType, &structs.CSIPluginGCRequest{PluginIDs: []string{"stale", "p"}}),
		structs.ErrCodeConflict)
	must.Eq(t, before, dump(t, f.State()))
	mustApply(t, f, next+1, structs.CSIPluginGCRequestType, &structs.CSIPluginGCRequest{PluginIDs: []string{"gone", "stale"}})
	p, err := f.State().CSIPluginByID(nil, "stale")
	must.NoError(t, err)
	must.Nil(t, p)
	ids, err = f.State().GCPluginCandidates()
	must.NoError(t, err)
	must.SliceEmpty(t, ids)
}

// TestFSM_VolumeCapacityOnlyGrows: a register entry may raise a volume's
// capacity (an expansion's answer) but never lower it, and one whose
// capacity_max is below the capacity is refused.
func TestFSM_VolumeCapacityOnlyGrows(t *testing.T) {
	f, next := authorityFSM(t)
	update := func(edit func(v *structs.CSIVolume)) any {
		v := testVolume(ns, "vol2", "p")
		edit(v)
		resp := apply(t, f, next, structs.CSIVolumeRegisterRequestType, &structs.CSIVolumeRegisterRequest{
			Volumes: []*structs.CSIVolume{v}, Timestamp: int64(next)})
		next++
		return resp
	}
	capacity := func() int64 {
		v, err := f.State().CSIVolumeByID(nil, ns, "vol2")
		must.NoError(t, err)
		return v.Capacity
	}
	must.Nil(t, update(func(v *structs.CSIVolume) { v.Capacity, v.RequestedCapacityMin = 2048, 2048 }))
	must.Eq(t, int64(2048), capacity())
	must.Nil(t, update(func(v *structs.CSIVolume) { v.Capacity = 1024 }))
	must.Eq(t, int64(2048), capacity(), must.Sprint("a lower capacity is not taken"))

	before := dump(t, f.State())
	resp := update(func(v *structs.CSIVolume) { v.RequestedCapacityMax = 1024 })
	mustRespCode(t, resp, structs.ErrCodeInvalid)
	must.StrContains(t, resp.(error).Error(), "current capacity of 2048 bytes")
	must.Eq(t, before, dump(t, f.State()))
}
