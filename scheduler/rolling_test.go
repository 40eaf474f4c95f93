package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/scheduler/internal/schedtest"
	"github.com/volplane/volplane/structs"
)

// setRunning reports the allocations running, as their clients would.
func (h *harness) setRunning(jobID string, ids ...string) {
	h.t.Helper()
	for _, id := range ids {
		a, err := h.s.AllocByID(nil, id)
		must.NoError(h.t, err)
		must.NotNil(h.t, a, must.Sprintf("allocation %s", id))
		c := a.Copy()
		c.ClientStatus = structs.AllocClientStatusRunning
		h.s.Allocs(c)
	}
}

// live returns the job's allocations that are to run, by ID, each with its
// job version.
func (h *harness) live(job *structs.Job) map[string]uint64 {
	h.t.Helper()
	allocs, err := h.s.AllocsByJob(nil, job.Namespace, job.ID)
	must.NoError(h.t, err)
	out := map[string]uint64{}
	for _, a := range allocs {
		if !a.Terminal() {
			out[a.ID] = a.JobVersion
		}
	}
	return out
}

// placedIDs returns the IDs of the allocations a plan places.
func placedIDs(plan *structs.PlanApplyRequest) []string {
	var out []string
	if plan == nil {
		return out
	}
	for _, a := range plan.Allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusRun {
			out = append(out, a.ID)
		}
	}
	return out
}

func withUpdate(job *structs.Job, maxParallel int) *structs.Job {
	job.Update = &structs.UpdateStrategy{MaxParallel: maxParallel}
	job.Canonicalize() // as the endpoints do: groups take the job's block
	return job
}

// newVersion registers the job again with another command.
func (h *harness) newVersion(job *structs.Job, cmd string) *structs.Job {
	h.t.Helper()
	j := job.Copy()
	j.Placement = nil
	j.TaskGroups[0].Tasks[0].Config.Command = cmd
	j = h.register(j)
	return j
}

func TestPlace_RollingMaxParallelOne(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2", "n3")...)
	job := h.register(withUpdate(schedtest.Job("web", structs.JobTypeService, 3), 1))
	must.Eq(t, 1, job.TaskGroups[0].Update.MaxParallel, must.Sprint("groups take the job's update block"))
	plan := h.run(job)
	must.Len(t, 3, placedIDs(plan), must.Sprint("a new job is placed at once"))
	h.setRunning("web", placedIDs(plan)...)

	job = h.newVersion(job, "/bin/false")
	must.Eq(t, uint64(1), job.Version)
	plan = h.run(job)
	must.Eq(t, map[string]string{"a-1": "replaced by job version 1"}, stopped(plan))
	must.Eq(t, []string{"a-4"}, placedIDs(plan))
	must.Eq(t, "web.g[0]", plan.Allocs[1].Name)
	gp := plan.Placement["g"]
	must.Eq(t, 3, gp.Placed)
	must.SliceEmpty(t, gp.Blocked)
	must.Eq(t, []string{
		"rolling update: 2 allocation(s) of an older version left to replace, 1 at a time (update max_parallel)",
		"rolling update: waiting for allocation a-4 (web.g[0] on node n1) to run; it is pending",
	}, gp.Waiting)

	// Nothing moves while the replacement is not running.
	must.Nil(t, h.run(job))

	h.setRunning("web", "a-4")
	plan = h.run(job)
	must.Eq(t, map[string]string{"a-2": "replaced by job version 1"}, stopped(plan))
	must.Eq(t, []string{"a-5"}, placedIDs(plan))
	must.Eq(t, "web.g[1]", plan.Allocs[1].Name)

	h.setRunning("web", "a-5")
	plan = h.run(job)
	must.Eq(t, map[string]string{"a-3": "replaced by job version 1"}, stopped(plan))
	must.Eq(t, []string{"a-6"}, placedIDs(plan))
	must.SliceEmpty(t, plan.Placement["g"].Waiting, must.Sprint("no old allocation is left"))

	h.setRunning("web", "a-6")
	must.Nil(t, h.run(job))
	must.Eq(t, map[string]uint64{"a-4": 1, "a-5": 1, "a-6": 1}, h.live(job))
}

func TestPlace_RollingMaxParallelTwo(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2", "n3")...)
	job := schedtest.Job("web", structs.JobTypeService, 3)
	job.TaskGroups[0].Update = &structs.UpdateStrategy{MaxParallel: 2}
	job = h.register(job)
	plan := h.run(job)
	h.setRunning("web", placedIDs(plan)...)

	job = h.newVersion(job, "/bin/false")
	plan = h.run(job)
	must.Eq(t, map[string]string{"a-1": "replaced by job version 1", "a-2": "replaced by job version 1"}, stopped(plan))
	must.Eq(t, []string{"a-4", "a-5"}, placedIDs(plan))
	must.Len(t, 3, plan.Placement["g"].Waiting)

	// One of the two running frees one place in the budget.
	h.setRunning("web", "a-5")
	plan = h.run(job)
	must.Eq(t, map[string]string{"a-3": "replaced by job version 1"}, stopped(plan))
	must.Eq(t, []string{"a-6"}, placedIDs(plan))
	must.SliceEmpty(t, plan.Placement["g"].Waiting)
}

func TestPlace_RollingHaltsOnFailedReplacement(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2")...)
	job := h.register(withUpdate(schedtest.Job("web", structs.JobTypeService, 2), 1))
	plan := h.run(job)
	h.setRunning("web", placedIDs(plan)...)
	job = h.newVersion(job, "/bin/false")
	plan = h.run(job)
	must.Eq(t, []string{"a-3"}, placedIDs(plan))

	// The replacement fails: the update does not go on to the next old
	// allocation; the failed one is replaced (no reschedule delay here).
	a, err := h.s.AllocByID(nil, "a-3")
	must.NoError(t, err)
	a = a.Copy()
	a.ClientStatus = structs.AllocClientStatusFailed
	h.s.Allocs(a)
	plan = h.run(job)
	must.MapEmpty(t, stopped(plan))
	must.Eq(t, []string{"a-4"}, placedIDs(plan))
	must.SliceContains(t, plan.Placement["g"].Waiting,
		"rolling update: waiting for allocation a-4 (web.g[0] on node n1) to run; it is pending")
	must.Eq(t, map[string]uint64{"a-2": 0, "a-4": 1}, h.live(job))
}

// pluginJob is a system job whose task runs the node plugin "dev".
func pluginJob() *structs.Job {
	job := schedtest.Job("plugin", structs.JobTypeSystem, 0)
	job.TaskGroups[0].Volumes = nil
	job.TaskGroups[0].Tasks[0].CSIPluginConfig = &structs.TaskCSIPluginConfig{ID: "dev", Type: structs.CSIPluginTypeNode}
	return job
}

// pluginOn fingerprints the node plugin "dev" of allocation allocID on the
// node, healthy or not, as the node's client would.
func (h *harness) pluginOn(nodeID, allocID string, healthy bool) {
	h.t.Helper()
	info := schedtest.Plugin("dev")
	info.AllocID = allocID
	if !healthy {
		schedtest.Unhealthy(info)
	}
	h.s.Nodes(schedtest.Node(nodeID, info))
}

func TestPlace_RollingSystemPluginJob(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2", "n3")...)
	job := h.register(pluginJob())
	must.Nil(t, job.TaskGroups[0].Update, must.Sprint("no update block"))
	must.Eq(t, 1, job.TaskGroups[0].MaxParallel(), must.Sprint("a plugin group rolls one at a time by default"))
	plan := h.run(job)
	must.Eq(t, []string{"a-1", "a-2", "a-3"}, placedIDs(plan))
	h.setRunning("plugin", "a-1", "a-2", "a-3")
	for i, n := range []string{"n1", "n2", "n3"} {
		h.pluginOn(n, fmt.Sprintf("a-%d", i+1), true)
	}
	must.Nil(t, h.run(job))

	job = h.newVersion(job, "/bin/false")
	// One node at a time, in node order; each waits for the new instance
	// to run and its plugin to be healthy on the node.
	next := 4
	for i, n := range []string{"n1", "n2", "n3"} {
		plan = h.run(job)
		must.Eq(t, map[string]string{fmt.Sprintf("a-%d", i+1): "replaced by job version 1"}, stopped(plan),
			must.Sprintf("node %s", n))
		newID := fmt.Sprintf("a-%d", next)
		next++
		must.Eq(t, map[string]string{"plugin.g[0]": n}, where(plan))
		must.Eq(t, []string{newID}, placedIDs(plan))
		if i == 2 {
			must.SliceEmpty(t, plan.Placement["g"].Waiting)
			break
		}
		must.Eq(t, fmt.Sprintf("rolling update: waiting for allocation %s (plugin.g[0] on node %s) to run; it is pending", newID, n),
			plan.Placement["g"].Waiting[1])

		// Running, but the node still reports the old instance: waiting.
		h.setRunning("plugin", newID)
		plan = h.run(job)
		must.MapEmpty(t, stopped(plan))
		must.SliceEmpty(t, placedIDs(plan))
		must.Eq(t, fmt.Sprintf(`rolling update: waiting for the CSI plugin "dev" of allocation %s (task "t") to be healthy on node %s`, newID, n),
			plan.Placement["g"].Waiting[1])
		// The new instance registered, unhealthy yet: still waiting.
		h.pluginOn(n, newID, false)
		must.Nil(t, h.run(job))
		// Healthy: the next node's turn.
		h.pluginOn(n, newID, true)
	}
	h.setRunning("plugin", "a-6")
	h.pluginOn("n3", "a-6", true)
	must.Nil(t, h.run(job))
	must.Eq(t, map[string]uint64{"a-4": 1, "a-5": 1, "a-6": 1}, h.live(job))
}

func TestPlace_NoUpdateReplacesAllAtOnce(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2", "n3")...)
	job := h.register(schedtest.Job("web", structs.JobTypeService, 3))
	must.Eq(t, 0, job.TaskGroups[0].MaxParallel())
	plan := h.run(job)
	h.setRunning("web", placedIDs(plan)...)
	job = h.newVersion(job, "/bin/false")
	plan = h.run(job)
	must.MapLen(t, 3, stopped(plan))
	must.Eq(t, []string{"a-4", "a-5", "a-6"}, placedIDs(plan))
	must.SliceEmpty(t, plan.Placement["g"].Waiting)

	// max_parallel = 0 says the same for a plugin job.
	pj := pluginJob()
	pj = h.register(withUpdate(pj, 0))
	plan = h.run(pj)
	ids := placedIDs(plan)
	h.setRunning("plugin", ids...)
	pj = h.newVersion(pj, "/bin/false")
	plan = h.run(pj)
	must.MapLen(t, 3, stopped(plan))
	must.Len(t, 3, placedIDs(plan))
	must.False(t, slices.ContainsFunc(placedIDs(plan), func(id string) bool { return slices.Contains(ids, id) }))
}

// TestPlace_RollingSystemFailedNodeLeftOut: a system job's replacement that
// failed holds the update back, until its node is taken out of scheduling:
// its slot is then not replaced, so the update goes on.
func TestPlace_RollingSystemFailedNodeLeftOut(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2")...)
	job := h.register(withUpdate(schedtest.Job("sys", structs.JobTypeSystem, 0), 1))
	plan := h.run(job)
	h.setRunning("sys", placedIDs(plan)...)
	job = h.newVersion(job, "/bin/false")
	plan = h.run(job)
	must.Eq(t, map[string]string{"sys.g[0]": "n1"}, where(plan))
	newID := placedIDs(plan)[0]

	a, err := h.s.AllocByID(nil, newID)
	must.NoError(t, err)
	a = a.Copy()
	a.ClientStatus = structs.AllocClientStatusFailed
	h.s.Allocs(a)
	h.s.Eligibility("n1", structs.NodeSchedulingIneligible)
	plan = h.run(job)
	must.Eq(t, map[string]string{"sys.g[0]": "n2"}, where(plan), must.Sprint("n2's turn"))
	must.MapLen(t, 1, stopped(plan))
}
