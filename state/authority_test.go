package state

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// authorityWorld builds, through the store's own writes, a state in which
// every rule the store enforces has something to refuse:
//   - nodes n1 and n2 run plugins p and q; n3 runs p and is down;
//   - volume "vol" (single-node-writer and multi-node-reader-only, file
//     system, mount options) is write-claimed by a1 on n1; "vol2" is free;
//     "vol3" holds the release of a2's read claim, at node-detached;
//   - job "web" (group "g", count 4) has a1 web.g[0] running on n1, a2
//     web.g[1] complete on n2, a3 web.g[2] running on n2 and a4 web.g[3]
//     stopped by a plan but still running on n1.
func authorityWorld(t *testing.T) *StateStore {
	t.Helper()
	s := TestStateStore(t)
	both := func(id string) *structs.Node {
		return withPlugin(withPlugin(testNode(id), nil, nodeInfo("p", true, false)), nil, nodeInfo("q", true, false))
	}
	must.NoError(t, s.UpsertNode(10, both("n1")))
	must.NoError(t, s.UpsertNode(11, both("n2")))
	must.NoError(t, s.UpsertNode(12, healthyNodePlugin("n3", "p")))
	must.NoError(t, s.UpdateNodeStatus(13, &structs.NodeUpdateStatusRequest{NodeID: "n3", Status: structs.NodeStatusDown, UpdatedAt: 13}))

	vol := testVolume("vol", "p")
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	must.NoError(t, s.UpsertCSIVolume(14, []*structs.CSIVolume{vol, testVolume("vol2", "p"), testVolume("vol3", "p")}))

	job := testJob("web")
	job.TaskGroups[0].Count = 4
	must.NoError(t, s.UpsertJob(15, 15, job))
	place := func(id, nodeID string, i int) *structs.Allocation {
		return &structs.Allocation{ID: id, Namespace: ns, Name: structs.AllocName("web", "g", i), JobID: "web", TaskGroup: "g",
			NodeID: nodeID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
	}
	allocs := []*structs.Allocation{place("a1", "n1", 0), place("a2", "n2", 1), place("a3", "n2", 2), place("a4", "n1", 3)}
	must.NoError(t, s.ApplyPlan(16, &structs.PlanApplyRequest{Namespace: ns, JobID: "web", JobModifyIndex: 15, Allocs: allocs}))
	var reports []*structs.Allocation
	for _, a := range allocs {
		r := a.Copy()
		r.ClientStatus = structs.AllocClientStatusRunning
		reports = append(reports, r)
	}
	must.NoError(t, s.UpdateAllocsFromClient(17, reports))

	must.NoError(t, s.CSIVolumeClaim(18, 18, ns, "vol", writeClaim("a1", "n1")))
	must.NoError(t, s.CSIVolumeClaim(19, 19, ns, "vol3", readClaim("a2", "n2")))
	done := reports[1].Copy()
	done.ClientStatus = structs.AllocClientStatusComplete
	must.NoError(t, s.UpdateAllocsFromClient(20, []*structs.Allocation{done}))
	detached := readClaim("a2", "n2")
	detached.State = structs.CSIVolumeClaimStateNodeDetached
	must.NoError(t, s.CSIVolumeClaim(21, 21, ns, "vol3", detached))

	stop := allocs[3].Copy()
	stop.DesiredStatus, stop.DesiredDescription = structs.AllocDesiredStatusStop, "not needed"
	must.NoError(t, s.ApplyPlan(22, &structs.PlanApplyRequest{Namespace: ns, JobID: "web", JobModifyIndex: 15,
		Allocs: []*structs.Allocation{stop}}))
	return s
}

// storeDump is every row of every table, index rows included.
func storeDump(t *testing.T, s *StateStore) map[string][]any {
	t.Helper()
	out := map[string][]any{}
	txn := s.db.Txn(false)
	for _, table := range append(Tables(), TableIndex) {
		iter, err := txn.Get(table, indexID)
		must.NoError(t, err)
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			out[table] = append(out[table], raw)
		}
	}
	return out
}

// TestAuthority_RefusedWritesChangeNothing applies, directly to the store
// (as a Raft entry the leader never checked would be), every kind of write
// the rules forbid, and finds each refused with its typed error and the
// store exactly as it was: the same rows and the same index rows.
func TestAuthority_RefusedWritesChangeNothing(t *testing.T) {
	const at = 1000
	vol := func(edit func(v *structs.CSIVolume)) []*structs.CSIVolume {
		v := testVolume("vol", "p")
		v.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
		edit(v)
		return []*structs.CSIVolume{v}
	}
	checkpoint := func(c *structs.CSIVolumeClaim, st structs.CSIVolumeClaimState) *structs.CSIVolumeClaim {
		c.State = st
		return c
	}
	alloc := func(s *StateStore, id string, edit func(a *structs.Allocation)) []*structs.Allocation {
		a, err := s.AllocByID(nil, id)
		must.NoError(t, err)
		c := a.Copy()
		edit(c)
		return []*structs.Allocation{c}
	}
	newAlloc := func(id, nodeID string, i int) *structs.Allocation {
		return &structs.Allocation{ID: id, Namespace: ns, Name: structs.AllocName("web", "g", i), JobID: "web", TaskGroup: "g",
			NodeID: nodeID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
	}
	plan := func(allocs ...*structs.Allocation) *structs.PlanApplyRequest {
		return &structs.PlanApplyRequest{Namespace: ns, JobID: "web", JobModifyIndex: 15, Allocs: allocs}
	}

	cases := []struct {
		name  string
		write func(s *StateStore) error
		code  structs.ErrorCode
	}{
		// Volume updates.
		{"update drops the capability in use", func(s *StateStore) error {
			return s.UpsertCSIVolume(at, vol(func(v *structs.CSIVolume) { v.RequestedCapabilities = v.RequestedCapabilities[1:] }))
		}, structs.ErrCodeConflict},
		{"update changes mount options in use", func(s *StateStore) error {
			return s.UpsertCSIVolume(at, vol(func(v *structs.CSIVolume) { v.MountOptions.FSType = "xfs" }))
		}, structs.ErrCodeConflict},
		{"update changes the external ID", func(s *StateStore) error {
			return s.UpsertCSIVolume(at, vol(func(v *structs.CSIVolume) { v.ExternalID = "other" }))
		}, structs.ErrCodeInvalid},
		{"update changes the plugin", func(s *StateStore) error {
			return s.UpsertCSIVolume(at, vol(func(v *structs.CSIVolume) { v.PluginID = "q" }))
		}, structs.ErrCodeInvalid},
		{"update leaves no capability", func(s *StateStore) error {
			return s.UpsertCSIVolume(at, []*structs.CSIVolume{func() *structs.CSIVolume {
				v := testVolume("vol2", "p")
				v.RequestedCapabilities = nil
				return v
			}()})
		}, structs.ErrCodeInvalid},
		{"new volume without capabilities, with a good one", func(s *StateStore) error {
			bad := testVolume("vol9", "p")
			bad.RequestedCapabilities = nil
			return s.UpsertCSIVolume(at, []*structs.CSIVolume{testVolume("vol8", "p"), bad})
		}, structs.ErrCodeInvalid},
		{"deregister in use", func(s *StateStore) error {
			return s.CSIVolumeDeregister(at, ns, []string{"vol2", "vol"}, false)
		}, structs.ErrCodeConflict},
		{"force deregister under a live allocation", func(s *StateStore) error {
			return s.CSIVolumeDeregister(at, ns, []string{"vol"}, true)
		}, structs.ErrCodeConflict},
		{"deregister names a volume twice", func(s *StateStore) error {
			return s.CSIVolumeDeregister(at, ns, []string{"vol2", "vol2"}, false)
		}, structs.ErrCodeInvalid},

		// Claims.
		{"second single-node writer", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol", writeClaim("a3", "n2"))
		}, structs.ErrCodeMaxClaims},
		{"claim by a terminal allocation", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol2", writeClaim("a2", "n2"))
		}, structs.ErrCodeInvalid},
		{"claim by a stopped allocation", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol2", writeClaim("a4", "n1"))
		}, structs.ErrCodeInvalid},
		{"claim by an unknown allocation", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol2", writeClaim("ghost", "n1"))
		}, structs.ErrCodeNotFound},
		{"claim for another node than the allocation's", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol2", writeClaim("a3", "n1"))
		}, structs.ErrCodePermissionDenied},
		{"claim of an unknown volume", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "nope", writeClaim("a3", "n2"))
		}, structs.ErrCodeNotFound},

		// Release checkpoints.
		{"checkpoint moves a release back", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol3", checkpoint(readClaim("a2", "n2"), structs.CSIVolumeClaimStateUnpublishing))
		}, structs.ErrCodeConflict},
		{"checkpoint skips the node step of a live claim", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol", checkpoint(writeClaim("a1", "n1"), structs.CSIVolumeClaimStateControllerDetached))
		}, structs.ErrCodeConflict},
		{"free a live claim without its release", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol", checkpoint(writeClaim("a1", "n1"), structs.CSIVolumeClaimStateReadyToFree))
		}, structs.ErrCodeConflict},
		{"checkpoint for an allocation that holds no claim", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol2", checkpoint(writeClaim("a3", "n2"), structs.CSIVolumeClaimStateUnpublishing))
		}, structs.ErrCodeNotFound},
		{"free a claim nobody holds", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol", checkpoint(writeClaim("ghost", "n1"), structs.CSIVolumeClaimStateReadyToFree))
		}, structs.ErrCodeNotFound},
		{"checkpoint aimed at another node", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol3", checkpoint(readClaim("a2", "n1"), structs.CSIVolumeClaimStateControllerDetached))
		}, structs.ErrCodeInvalid},
		{"checkpoint in an unknown state", func(s *StateStore) error {
			return s.CSIVolumeClaim(at, at, ns, "vol3", checkpoint(readClaim("a2", "n2"), 42))
		}, structs.ErrCodeInvalid},

		// Client reports.
		{"terminal allocation reported running", func(s *StateStore) error {
			return s.UpdateAllocsFromClient(at, alloc(s, "a2", func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusRunning }))
		}, structs.ErrCodeConflict},
		{"report for an unknown allocation", func(s *StateStore) error {
			return s.UpdateAllocsFromClient(at, []*structs.Allocation{newAlloc("ghost", "n1", 0)})
		}, structs.ErrCodeNotFound},
		{"report moves an allocation to another node", func(s *StateStore) error {
			return s.UpdateAllocsFromClient(at, alloc(s, "a1", func(a *structs.Allocation) { a.NodeID = "n2" }))
		}, structs.ErrCodeInvalid},
		{"client reports lost", func(s *StateStore) error {
			return s.UpdateAllocsFromClient(at, alloc(s, "a1", func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusLost }))
		}, structs.ErrCodeInvalid},
		{"one bad report among good ones", func(s *StateStore) error {
			good := alloc(s, "a3", func(a *structs.Allocation) { a.ClientDescription = "fine" })
			bad := alloc(s, "a2", func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusRunning })
			return s.UpdateAllocsFromClient(at, append(good, bad...))
		}, structs.ErrCodeConflict},

		// Plans.
		{"plan for a job that does not exist", func(s *StateStore) error {
			p := plan(newAlloc("a9", "n1", 0))
			p.JobID = "nope"
			p.Allocs[0].JobID = "nope"
			return s.ApplyPlan(at, p)
		}, structs.ErrCodeConflict},
		{"plan for an older registration", func(s *StateStore) error {
			p := plan(newAlloc("a9", "n1", 0))
			p.JobModifyIndex = 14
			return s.ApplyPlan(at, p)
		}, structs.ErrCodeConflict},
		{"allocation beyond the group's count", func(s *StateStore) error {
			return s.ApplyPlan(at, plan(newAlloc("a9", "n1", 4)))
		}, structs.ErrCodeInvalid},
		{"second allocation in a live slot", func(s *StateStore) error {
			return s.ApplyPlan(at, plan(newAlloc("a9", "n2", 0)))
		}, structs.ErrCodeConflict},
		{"one slot placed twice by one plan", func(s *StateStore) error {
			stop := alloc(s, "a4", func(a *structs.Allocation) {})[0] // already stopped: frees web.g[3]
			return s.ApplyPlan(at, plan(stop, newAlloc("a8", "n1", 3), newAlloc("a9", "n2", 3)))
		}, structs.ErrCodeConflict},
		{"allocation on an unknown node", func(s *StateStore) error {
			return s.ApplyPlan(at, plan(newAlloc("a9", "n9", 3)))
		}, structs.ErrCodeConflict},
		{"allocation on a down node", func(s *StateStore) error {
			return s.ApplyPlan(at, plan(newAlloc("a9", "n3", 3)))
		}, structs.ErrCodeConflict},
		{"allocation born running", func(s *StateStore) error {
			a := newAlloc("a9", "n1", 3)
			a.ClientStatus = structs.AllocClientStatusRunning
			return s.ApplyPlan(at, plan(a))
		}, structs.ErrCodeInvalid},
		{"stopped allocation set to run again", func(s *StateStore) error {
			return s.ApplyPlan(at, plan(alloc(s, "a4", func(a *structs.Allocation) { a.DesiredStatus = structs.AllocDesiredStatusRun })...))
		}, structs.ErrCodeConflict},
		{"plan moves an allocation", func(s *StateStore) error {
			return s.ApplyPlan(at, plan(alloc(s, "a1", func(a *structs.Allocation) {
				a.NodeID, a.DesiredStatus = "n2", structs.AllocDesiredStatusStop
			})...))
		}, structs.ErrCodeInvalid},
		{"plan with an empty group placement", func(s *StateStore) error {
			p := plan()
			p.Placement = map[string]*structs.GroupPlacement{"g": nil}
			return s.ApplyPlan(at, p)
		}, structs.ErrCodeInvalid},
		{"allocation upsert stops being terminal", func(s *StateStore) error {
			return s.UpsertAllocs(at, alloc(s, "a2", func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusRunning }))
		}, structs.ErrCodeConflict},

		// Jobs and nodes.
		{"job that fails validation", func(s *StateStore) error {
			j := testJob("web")
			j.TaskGroups[0].Count = -1
			return s.UpsertJob(at, at, j)
		}, structs.ErrCodeInvalid},
		{"node re-registered with another secret", func(s *StateStore) error {
			n := healthyNodePlugin("n1", "p")
			n.SecretID = "stolen"
			return s.UpsertNode(at, n)
		}, structs.ErrCodePermissionDenied},
		{"node without a name", func(s *StateStore) error {
			n := testNode("n7")
			n.Name = ""
			return s.UpsertNode(at, n)
		}, structs.ErrCodeInvalid},
		{"node status nobody knows", func(s *StateStore) error {
			return s.UpdateNodeStatus(at, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: "sleepy", UpdatedAt: at})
		}, structs.ErrCodeInvalid},
		{"heartbeat with a fingerprint of another plugin", func(s *StateStore) error {
			return s.UpdateNodeStatus(at, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady,
				UpdatedAt: at, CSINodePlugins: map[string]*structs.CSIInfo{"p": nodeInfo("q", true, false)}})
		}, structs.ErrCodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := authorityWorld(t)
			before := storeDump(t, s)
			latest, err := s.LatestIndex()
			must.NoError(t, err)

			err = tc.write(s)
			mustCode(t, err, tc.code)
			must.Eq(t, before, storeDump(t, s))
			after, err := s.LatestIndex()
			must.NoError(t, err)
			must.Eq(t, latest, after)
		})
	}
}

// TestAuthority_WorldIsReachable makes sure the refusals above are refusals
// of the change they name, not of a store that refuses everything: the
// allowed neighbour of several of them goes through.
func TestAuthority_WorldIsReachable(t *testing.T) {
	s := authorityWorld(t)
	// A capability added, the one in use kept.
	v := testVolume("vol", "p")
	v.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	v.RequestedCapabilities = append(v.RequestedCapabilities, &structs.CSIVolumeCapability{
		AccessMode: structs.CSIVolumeAccessModeMultiNodeMultiWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem})
	must.NoError(t, s.UpsertCSIVolume(30, []*structs.CSIVolume{v}))
	// The release of vol3 moves on.
	next := readClaim("a2", "n2")
	next.State = structs.CSIVolumeClaimStateControllerDetached
	must.NoError(t, s.CSIVolumeClaim(31, 31, ns, "vol3", next))
	// a3 claims the free volume; a1's claim is released from the start.
	must.NoError(t, s.CSIVolumeClaim(32, 32, ns, "vol2", writeClaim("a3", "n2")))
	rel := writeClaim("a1", "n1")
	rel.State = structs.CSIVolumeClaimStateUnpublishing
	must.NoError(t, s.CSIVolumeClaim(33, 33, ns, "vol", rel))
	// The stopped slot is placed again.
	must.NoError(t, s.ApplyPlan(34, &structs.PlanApplyRequest{Namespace: ns, JobID: "web", JobModifyIndex: 15,
		Allocs: []*structs.Allocation{{ID: "a9", Namespace: ns, Name: "web.g[3]", JobID: "web", TaskGroup: "g", NodeID: "n2",
			DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}}}))
	mustIndex(t, s, TableAllocs, 34)
}

// TestAuthority_PlanKeepsWhatTheClientReported: a plan computed before
// the client's report, applied after it, stops the allocation without
// undoing the report, and a report computed before a stop, applied after
// it, keeps the stop.
func TestAuthority_PlanKeepsWhatTheClientReported(t *testing.T) {
	s := authorityWorld(t)
	a3, err := s.AllocByID(nil, "a3")
	must.NoError(t, err)
	planned := a3.Copy() // as the placer read it
	reported := a3.Copy()

	reported.ClientStatus = structs.AllocClientStatusFailed
	must.NoError(t, s.UpdateAllocsFromClient(40, []*structs.Allocation{reported}))
	planned.DesiredStatus, planned.DesiredDescription = structs.AllocDesiredStatusStop, "job stopped"
	must.NoError(t, s.ApplyPlan(41, &structs.PlanApplyRequest{Namespace: ns, JobID: "web", JobModifyIndex: 15,
		Allocs: []*structs.Allocation{planned}}))
	got, err := s.AllocByID(nil, "a3")
	must.NoError(t, err)
	must.Eq(t, structs.AllocClientStatusFailed, got.ClientStatus)
	must.Eq(t, structs.AllocDesiredStatusStop, got.DesiredStatus)

	// a1's client reports, from a copy read before a stop.
	a1, err := s.AllocByID(nil, "a1")
	must.NoError(t, err)
	report := a1.Copy()
	stop := a1.Copy()
	stop.DesiredStatus = structs.AllocDesiredStatusStop
	must.NoError(t, s.ApplyPlan(42, &structs.PlanApplyRequest{Namespace: ns, JobID: "web", JobModifyIndex: 15,
		Allocs: []*structs.Allocation{stop}}))
	report.ClientStatus = structs.AllocClientStatusComplete
	must.NoError(t, s.UpdateAllocsFromClient(43, []*structs.Allocation{report}))
	got, err = s.AllocByID(nil, "a1")
	must.NoError(t, err)
	must.Eq(t, structs.AllocDesiredStatusStop, got.DesiredStatus)
	must.Eq(t, structs.AllocClientStatusComplete, got.ClientStatus)
}

// TestAuthority_ConflictingClaimsFromOneSnapshot: two claims that each
// pass the leader's check against the same snapshot cannot both be
// written; the second is refused against the state the first left.
func TestAuthority_ConflictingClaimsFromOneSnapshot(t *testing.T) {
	s := authorityWorld(t)
	snap, err := s.Snapshot()
	must.NoError(t, err)
	first, second := writeClaim("a3", "n2"), writeClaim("a1", "n1")
	_, err = snap.CheckCSIVolumeClaim(ns, "vol2", first)
	must.NoError(t, err)
	_, err = snap.CheckCSIVolumeClaim(ns, "vol2", second)
	must.NoError(t, err)

	must.NoError(t, s.CSIVolumeClaim(50, 50, ns, "vol2", first))
	mustCode(t, s.CSIVolumeClaim(51, 51, ns, "vol2", second), structs.ErrCodeMaxClaims)
	v, err := s.CSIVolumeByID(nil, ns, "vol2")
	must.NoError(t, err)
	must.MapLen(t, 1, v.WriteClaims)
	must.MapContainsKey(t, v.WriteClaims, "a3")

	// The leader's check on the state as it is now agrees.
	_, err = s.CheckCSIVolumeClaim(ns, "vol2", second)
	mustCode(t, err, structs.ErrCodeMaxClaims)
}

func TestCheckCSIVolumeDeregister(t *testing.T) {
	s := authorityWorld(t)
	must.NoError(t, s.CheckCSIVolumeDeregister(ns, []string{"vol2"}, false))
	mustCode(t, s.CheckCSIVolumeDeregister(ns, nil, false), structs.ErrCodeInvalid)
	mustCode(t, s.CheckCSIVolumeDeregister(ns, []string{"vol2", "vol"}, false), structs.ErrCodeConflict)
	mustCode(t, s.CheckCSIVolumeDeregister(ns, []string{"vol"}, true), structs.ErrCodeConflict)
	mustCode(t, s.CheckCSIVolumeDeregister(ns, []string{"nope"}, true), structs.ErrCodeNotFound)
	// vol3 is held only by a2, which is complete: force may remove it.
	must.NoError(t, s.CheckCSIVolumeDeregister(ns, []string{"vol3"}, true))
	mustCode(t, s.CheckCSIVolumeDeregister(ns, []string{"vol3"}, false), structs.ErrCodeConflict)
	err := s.CheckCSIVolumeDeregister(ns, []string{"vol"}, false)
	must.StrContains(t, err.Error(), `write claim of allocation "a1" on node "n1" (taken)`)
}
