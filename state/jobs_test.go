package state

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func testJob(id string) *structs.Job {
	return &structs.Job{
		ID: id, Namespace: "default", Name: id, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: 2,
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"}}},
		}},
	}
}

func TestJobs_UpsertVersionsAndPlans(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(9, testNode("n1")))
	must.NoError(t, s.UpsertJob(10, 100, testJob("web")))
	j, err := s.JobByID(nil, "default", "web")
	must.NoError(t, err)
	must.Eq(t, uint64(0), j.Version)
	must.Eq(t, uint64(10), j.JobModifyIndex)
	must.Eq(t, structs.JobStatusPending, j.Status)

	// The same specification again changes nothing.
	must.NoError(t, s.UpsertJob(11, 101, testJob("web")))
	mustIndex(t, s, TableJobs, 10)

	// A plan for this version places allocations and explains the group.
	alloc := &structs.Allocation{ID: "a1", Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g",
		NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
	plan := &structs.PlanApplyRequest{Namespace: "default", JobID: "web", JobModifyIndex: 10,
		Allocs:    []*structs.Allocation{alloc},
		Placement: map[string]*structs.GroupPlacement{"g": {Desired: 2, Placed: 1, Blocked: []string{`volume "v" does not exist`}}}}
	must.NoError(t, s.ApplyPlan(12, plan))
	j, _ = s.JobByID(nil, "default", "web")
	must.Eq(t, 1, j.Placement["g"].Placed)
	must.Eq(t, []string{`volume "v" does not exist`}, j.Placement["g"].Blocked)
	must.Eq(t, structs.JobStatusRunning, j.Status)

	// Scaling is a new registration but not a new version: running
	// allocations stay. A plan for the old registration is refused.
	v2 := testJob("web")
	v2.TaskGroups[0].Count = 3
	must.NoError(t, s.UpsertJob(13, 102, v2))
	j, _ = s.JobByID(nil, "default", "web")
	must.Eq(t, uint64(0), j.Version)
	must.Eq(t, uint64(13), j.JobModifyIndex)
	err = s.ApplyPlan(14, plan)
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err))

	// A changed task is a new version.
	v3 := testJob("web")
	v3.TaskGroups[0].Tasks[0].Config.Command = "/bin/false"
	must.NoError(t, s.UpsertJob(15, 103, v3))
	j, _ = s.JobByID(nil, "default", "web")
	must.Eq(t, uint64(1), j.Version)

	// A client status update refreshes the job's status.
	done := alloc.Copy()
	done.ClientStatus = structs.AllocClientStatusComplete
	must.NoError(t, s.UpsertAllocs(16, []*structs.Allocation{done}))
	j, _ = s.JobByID(nil, "default", "web")
	must.Eq(t, structs.JobStatusPending, j.Status)
}

func TestJobs_StopAndPurge(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(9, testNode("n1")))
	must.NoError(t, s.UpsertJob(10, 100, testJob("web")))
	alloc := &structs.Allocation{ID: "a1", Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g",
		NodeID: "n1", DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
	must.NoError(t, s.ApplyPlan(11, &structs.PlanApplyRequest{Namespace: "default", JobID: "web", JobModifyIndex: 10,
		Allocs: []*structs.Allocation{alloc}}))
	running := alloc.Copy()
	running.ClientStatus = structs.AllocClientStatusRunning
	must.NoError(t, s.UpdateAllocsFromClient(11, []*structs.Allocation{running}))

	must.NoError(t, s.DeregisterJob(12, 200, "default", "web", false))
	j, _ := s.JobByID(nil, "default", "web")
	must.True(t, j.Stop)
	must.Eq(t, structs.JobStatusRunning, j.Status, must.Sprint("its allocation still runs"))
	a, _ := s.AllocByID(nil, "a1")
	must.Eq(t, structs.AllocDesiredStatusStop, a.DesiredStatus)
	must.Eq(t, "job stopped", a.DesiredDescription)

	// Re-registering a stopped job starts it again.
	must.NoError(t, s.UpsertJob(13, 300, testJob("web")))
	j, _ = s.JobByID(nil, "default", "web")
	must.False(t, j.Stop)
	must.Eq(t, uint64(1), j.Version)

	must.NoError(t, s.DeregisterJob(14, 400, "default", "web", true))
	j, _ = s.JobByID(nil, "default", "web")
	must.Nil(t, j)
	err := s.DeregisterJob(15, 500, "default", "web", true)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
}

// TestJobs_UpdateBlockIsNotAVersion: changing only an update block (the
// job's or a group's) is a new registration but not a new version, as in
// Nomad: it replaces no allocation. Its JobVersionAfter agrees.
func TestJobs_UpdateBlockIsNotAVersion(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertJob(10, 100, testJob("web")))

	v := testJob("web")
	v.Update = &structs.UpdateStrategy{MaxParallel: 2}
	existing, err := s.JobByID(nil, "default", "web")
	must.NoError(t, err)
	version, changed := JobVersionAfter(existing, v)
	must.Eq(t, uint64(0), version)
	must.True(t, changed)
	must.NoError(t, s.UpsertJob(11, 101, v))
	j, _ := s.JobByID(nil, "default", "web")
	must.Eq(t, uint64(0), j.Version)
	must.Eq(t, uint64(11), j.JobModifyIndex)
	must.Eq(t, 2, j.Update.MaxParallel)

	v = v.Copy()
	v.TaskGroups[0].Update = &structs.UpdateStrategy{MaxParallel: 1}
	must.NoError(t, s.UpsertJob(12, 102, v))
	j, _ = s.JobByID(nil, "default", "web")
	must.Eq(t, uint64(0), j.Version)
	must.Eq(t, uint64(12), j.JobModifyIndex)
	must.Eq(t, 1, j.TaskGroups[0].MaxParallel())

	// The same again changes nothing.
	must.NoError(t, s.UpsertJob(13, 103, v))
	mustIndex(t, s, TableJobs, 12)
}
