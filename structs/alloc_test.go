package structs

import (
	"testing"

	"github.com/shoenig/test/must"
)

// storedAlloc is web.g[1] of validJob, running on node n1.
func storedAlloc() *Allocation {
	return &Allocation{
		ID: "a1", Namespace: DefaultNamespace, Name: "web.g[1]", JobID: "web", TaskGroup: "g", NodeID: "n1",
		DesiredStatus: AllocDesiredStatusRun, ClientStatus: AllocClientStatusRunning,
		VolumeStates: map[string]*AllocVolumeState{"data": {VolumeID: "vol[1]", Step: AllocVolumeStepPublished}},
		CreateIndex:  5, ModifyIndex: 6,
	}
}

func TestAllocation_CheckUpdate(t *testing.T) {
	cases := []struct {
		name   string
		stored func(a *Allocation)
		next   func(a *Allocation)
		code   ErrorCode // "" when allowed
	}{
		{name: "unchanged", next: func(a *Allocation) {}},
		{name: "client completes", next: func(a *Allocation) { a.ClientStatus = AllocClientStatusComplete }},
		{name: "servers stop", next: func(a *Allocation) { a.DesiredStatus = AllocDesiredStatusStop }},
		{name: "another id", next: func(a *Allocation) { a.ID = "a2" }, code: ErrCodeInvalid},
		{name: "moved to another node", next: func(a *Allocation) { a.NodeID = "n2" }, code: ErrCodeInvalid},
		{name: "placed node dropped", next: func(a *Allocation) { a.NodeID = "" }, code: ErrCodeInvalid},
		{name: "another slot", next: func(a *Allocation) { a.Name = "web.g[2]" }, code: ErrCodeInvalid},
		{name: "another job", next: func(a *Allocation) { a.JobID = "db" }, code: ErrCodeInvalid},
		{name: "another group", next: func(a *Allocation) { a.TaskGroup = "h" }, code: ErrCodeInvalid},
		{name: "another namespace", next: func(a *Allocation) { a.Namespace = "other" }, code: ErrCodeInvalid},
		{name: "another job version", next: func(a *Allocation) { a.JobVersion = 3 }, code: ErrCodeInvalid},
		{name: "complete back to running",
			stored: func(a *Allocation) { a.ClientStatus = AllocClientStatusComplete },
			next:   func(a *Allocation) { a.ClientStatus = AllocClientStatusRunning }, code: ErrCodeConflict},
		{name: "lost back to running",
			stored: func(a *Allocation) { a.ClientStatus = AllocClientStatusLost },
			next:   func(a *Allocation) { a.ClientStatus = AllocClientStatusRunning }, code: ErrCodeConflict},
		{name: "failed becomes complete",
			stored: func(a *Allocation) { a.ClientStatus = AllocClientStatusFailed },
			next:   func(a *Allocation) { a.ClientStatus = AllocClientStatusComplete }, code: ErrCodeConflict},
		{name: "stopped back to run",
			stored: func(a *Allocation) { a.DesiredStatus = AllocDesiredStatusStop },
			next:   func(a *Allocation) { a.DesiredStatus = AllocDesiredStatusRun }, code: ErrCodeConflict},
		{name: "stopped then evicted",
			stored: func(a *Allocation) { a.DesiredStatus = AllocDesiredStatusStop },
			next:   func(a *Allocation) { a.DesiredStatus = AllocDesiredStatusEvict }},
		{name: "terminal keeps reporting its volumes",
			stored: func(a *Allocation) { a.ClientStatus = AllocClientStatusComplete },
			next:   func(a *Allocation) { a.VolumeStates = nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stored := storedAlloc()
			if tc.stored != nil {
				tc.stored(stored)
			}
			next := stored.Copy()
			tc.next(next)
			err := stored.CheckUpdate(next)
			if tc.code == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, tc.code, CodeOf(err), must.Sprint(err))
			must.StrContains(t, err.Error(), `"a1"`)
		})
	}
}

func TestAllocation_MergeClientUpdate(t *testing.T) {
	t.Run("takes only what the client owns", func(t *testing.T) {
		stored := storedAlloc()
		stored.DesiredStatus, stored.DesiredDescription = AllocDesiredStatusStop, "job stopped"
		before := stored.Copy()
		// The client's report was built before the stop.
		report := storedAlloc()
		report.ClientStatus, report.ClientDescription = AllocClientStatusComplete, "exited"
		report.VolumeStates = map[string]*AllocVolumeState{"data": {VolumeID: "vol[1]", Step: AllocVolumeStepClaimed}}

		out, err := stored.MergeClientUpdate(report)
		must.NoError(t, err)
		must.Eq(t, before, stored, must.Sprint("the stored allocation must not change"))
		must.Eq(t, AllocDesiredStatusStop, out.DesiredStatus)
		must.Eq(t, "job stopped", out.DesiredDescription)
		must.Eq(t, AllocClientStatusComplete, out.ClientStatus)
		must.Eq(t, "exited", out.ClientDescription)
		must.Eq(t, AllocVolumeStepClaimed, out.VolumeStates["data"].Step)
		must.Eq(t, uint64(5), out.CreateIndex)
		report.VolumeStates["data"].Step = "mutated"
		must.Eq(t, AllocVolumeStepClaimed, out.VolumeStates["data"].Step, must.Sprint("the result shares nothing with the report"))
	})

	refused := []struct {
		name   string
		stored func(a *Allocation)
		report func(a *Allocation)
		code   ErrorCode
	}{
		{name: "lost is the servers' word", report: func(a *Allocation) { a.ClientStatus = AllocClientStatusLost },
			code: ErrCodeInvalid},
		{name: "unknown status", report: func(a *Allocation) { a.ClientStatus = "sleeping" }, code: ErrCodeInvalid},
		{name: "empty volume state", report: func(a *Allocation) { a.VolumeStates["data"] = nil }, code: ErrCodeInvalid},
		{name: "another node's allocation", report: func(a *Allocation) { a.NodeID = "n2" }, code: ErrCodeInvalid},
		{name: "terminal cannot run again", stored: func(a *Allocation) { a.ClientStatus = AllocClientStatusFailed },
			report: func(a *Allocation) { a.ClientStatus = AllocClientStatusRunning }, code: ErrCodeConflict},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			stored := storedAlloc()
			if tc.stored != nil {
				tc.stored(stored)
			}
			report := storedAlloc()
			tc.report(report)
			out, err := stored.MergeClientUpdate(report)
			must.Nil(t, out)
			must.Eq(t, tc.code, CodeOf(err), must.Sprint(err))
		})
	}
}

func TestAllocation_MergePlanUpdate(t *testing.T) {
	t.Run("takes only what the servers own", func(t *testing.T) {
		stored := storedAlloc()
		stored.ClientStatus = AllocClientStatusComplete
		// The plan was computed while the allocation still ran.
		plan := storedAlloc()
		plan.DesiredStatus, plan.DesiredDescription = AllocDesiredStatusStop, "replaced by job version 1"
		out, err := stored.MergePlanUpdate(plan)
		must.NoError(t, err)
		must.Eq(t, AllocClientStatusComplete, out.ClientStatus)
		must.Eq(t, AllocDesiredStatusStop, out.DesiredStatus)
		must.Eq(t, "replaced by job version 1", out.DesiredDescription)
	})
	t.Run("a stopped allocation stays stopped", func(t *testing.T) {
		stored := storedAlloc()
		stored.DesiredStatus = AllocDesiredStatusStop
		_, err := stored.MergePlanUpdate(storedAlloc())
		must.Eq(t, ErrCodeConflict, CodeOf(err))
	})
	t.Run("unknown desired status", func(t *testing.T) {
		plan := storedAlloc()
		plan.DesiredStatus = "pause"
		_, err := storedAlloc().MergePlanUpdate(plan)
		must.Eq(t, ErrCodeInvalid, CodeOf(err))
	})
	t.Run("cannot move an allocation", func(t *testing.T) {
		plan := storedAlloc()
		plan.NodeID, plan.DesiredStatus = "n2", AllocDesiredStatusStop
		_, err := storedAlloc().MergePlanUpdate(plan)
		must.Eq(t, ErrCodeInvalid, CodeOf(err))
	})
}

func TestAllocation_CheckNew(t *testing.T) {
	job := validJob() // group "g" of count 3, version 0
	newAlloc := func() *Allocation {
		return &Allocation{ID: "a9", Namespace: DefaultNamespace, Name: "web.g[2]", JobID: "web", TaskGroup: "g",
			NodeID: "n1", DesiredStatus: AllocDesiredStatusRun, ClientStatus: AllocClientStatusPending}
	}
	cases := []struct {
		name string
		job  func(j *Job)
		edit func(a *Allocation)
		code ErrorCode // "" when allowed
	}{
		{name: "last slot", edit: func(a *Allocation) {}},
		{name: "first slot", edit: func(a *Allocation) { a.Name = "web.g[0]" }},
		{name: "beyond the count", edit: func(a *Allocation) { a.Name = "web.g[3]" }, code: ErrCodeInvalid},
		{name: "negative index", edit: func(a *Allocation) { a.Name = "web.g[-1]" }, code: ErrCodeInvalid},
		{name: "index not as AllocName writes it", edit: func(a *Allocation) { a.Name = "web.g[01]" }, code: ErrCodeInvalid},
		{name: "another group's name", edit: func(a *Allocation) { a.Name = "web.h[0]" }, code: ErrCodeInvalid},
		{name: "no index", edit: func(a *Allocation) { a.Name = "web.g" }, code: ErrCodeInvalid},
		{name: "unknown group", edit: func(a *Allocation) { a.TaskGroup, a.Name = "h", "web.h[0]" }, code: ErrCodeInvalid},
		{name: "another job", edit: func(a *Allocation) { a.JobID = "db" }, code: ErrCodeInvalid},
		{name: "old job version", job: func(j *Job) { j.Version = 2 }, edit: func(a *Allocation) { a.JobVersion = 1 },
			code: ErrCodeConflict},
		{name: "no node", edit: func(a *Allocation) { a.NodeID = "" }, code: ErrCodeInvalid},
		{name: "born stopped", edit: func(a *Allocation) { a.DesiredStatus = AllocDesiredStatusStop }, code: ErrCodeInvalid},
		{name: "born running", edit: func(a *Allocation) { a.ClientStatus = AllocClientStatusRunning }, code: ErrCodeInvalid},
		{name: "bad id", edit: func(a *Allocation) { a.ID = "a/9" }, code: ErrCodeInvalid},
		{name: "system job: slot 0", job: func(j *Job) { j.Type = JobTypeSystem }, edit: func(a *Allocation) { a.Name = "web.g[0]" }},
		{name: "system job: other slot", job: func(j *Job) { j.Type = JobTypeSystem }, edit: func(a *Allocation) {},
			code: ErrCodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := job.Copy()
			if tc.job != nil {
				tc.job(j)
			}
			a := newAlloc()
			tc.edit(a)
			err := a.CheckNew(j)
			if tc.code == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, tc.code, CodeOf(err), must.Sprint(err))
		})
	}
}

func TestAllocation_CopyWithEmptyVolumeState(t *testing.T) {
	a := storedAlloc()
	a.VolumeStates["gone"] = nil
	c := a.Copy()
	must.MapContainsKey(t, c.VolumeStates, "gone")
	must.Nil(t, c.VolumeStates["gone"])
}
