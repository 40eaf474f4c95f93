package scheduler_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/scheduler"
	"github.com/volplane/volplane/scheduler/internal/schedtest"
	"github.com/volplane/volplane/structs"
)

const (
	now = int64(1000)
	snw = structs.CSIVolumeAccessModeSingleNodeWriter
	mnr = structs.CSIVolumeAccessModeMultiNodeReader
	mmw = structs.CSIVolumeAccessModeMultiNodeMultiWriter
)

// harness runs Place against a store and applies its plans as the FSM would.
type harness struct {
	t   *testing.T
	s   *schedtest.Store
	ids func() string
	// reschedule is the zero policy (failed allocations replaced at once)
	// unless a test sets one.
	reschedule scheduler.ReschedulePolicy
}

func newHarness(t *testing.T, nodes ...*structs.Node) *harness {
	h := &harness{t: t, s: schedtest.NewStore(t), ids: schedtest.IDs("a")}
	if len(nodes) > 0 {
		h.s.Nodes(nodes...)
	}
	return h
}

// register stores a job and returns it as the store has it.
func (h *harness) register(job *structs.Job) *structs.Job {
	h.t.Helper()
	return h.s.Jobs(job)[0]
}

// place runs Place for job over every node and the job's allocations; the
// plan is nil when nothing changes.
func (h *harness) place(job *structs.Job) *structs.PlanApplyRequest {
	h.t.Helper()
	allocs, err := h.s.AllocsByJob(nil, job.Namespace, job.ID)
	must.NoError(h.t, err)
	plan, err := scheduler.Place(h.s, h.s.AllNodes(), job, allocs, now, h.reschedule, h.ids)
	must.NoError(h.t, err)
	must.Eq(h.t, plan == nil, scheduler.NoChange(plan))
	if plan != nil {
		must.Eq(h.t, job.ID, plan.JobID)
		must.Eq(h.t, job.Namespace, plan.Namespace)
		must.Eq(h.t, job.JobModifyIndex, plan.JobModifyIndex)
		must.Eq(h.t, now, plan.Timestamp)
	}
	return plan
}

// run places a registered job, applies the plan as the FSM would, and reads
// the job back into job.
func (h *harness) run(job *structs.Job) *structs.PlanApplyRequest {
	h.t.Helper()
	plan := h.place(job)
	if plan != nil {
		h.s.ApplyPlan(plan)
	}
	*job = *h.s.Job(job.ID)
	return plan
}

// where maps allocation names to nodes, for allocations to run.
func where(plan *structs.PlanApplyRequest) map[string]string {
	out := map[string]string{}
	if plan == nil {
		return out
	}
	for _, a := range plan.Allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusRun {
			out[a.Name] = a.NodeID
		}
	}
	return out
}

// stopped maps the IDs of the allocations the plan stops to why.
func stopped(plan *structs.PlanApplyRequest) map[string]string {
	out := map[string]string{}
	if plan == nil {
		return out
	}
	for _, a := range plan.Allocs {
		if a.DesiredStatus == structs.AllocDesiredStatusStop {
			out[a.ID] = a.DesiredDescription
		}
	}
	return out
}

func mustPlacement(t *testing.T, plan *structs.PlanApplyRequest, desired, placed int, blocked ...string) {
	t.Helper()
	must.NotNil(t, plan)
	must.NotNil(t, plan.Placement)
	gp := plan.Placement["g"]
	must.NotNil(t, gp)
	must.Eq(t, desired, gp.Desired, must.Sprint("desired"))
	must.Eq(t, placed, gp.Placed, must.Sprint("placed"))
	must.Eq(t, blocked, gp.Blocked)
}

func devNodes(ids ...string) []*structs.Node {
	out := make([]*structs.Node, len(ids))
	for i, id := range ids {
		out[i] = schedtest.Node(id, schedtest.Plugin("dev"))
	}
	return out
}

func TestPlace_NewAllocation(t *testing.T) {
	h := newHarness(t, devNodes("n1")...)
	job := schedtest.Job("web", structs.JobTypeService, 1)
	job.Version = 4
	plan := h.place(job)
	must.Len(t, 1, plan.Allocs)
	must.Eq(t, &structs.Allocation{
		ID: "a-1", Namespace: schedtest.NS, Name: "web.g[0]", JobID: "web", JobVersion: 4, TaskGroup: "g", NodeID: "n1",
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending,
		CreateTime: now, ModifyTime: now,
	}, plan.Allocs[0])
	mustPlacement(t, plan, 1, 1)
	must.Eq(t, now, plan.Placement["g"].UpdatedAt)
}

func TestPlace_PerAllocBlocking(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2")...)
	job := h.register(schedtest.Job("web", structs.JobTypeService, 2, schedtest.PerAlloc(schedtest.Writer("vol", snw))))

	t.Run("both volumes missing", func(t *testing.T) {
		plan := h.run(job)
		must.SliceEmpty(t, plan.Allocs)
		mustPlacement(t, plan, 2, 0, `volume "vol[0]" does not exist`, `volume "vol[1]" does not exist`)
	})
	t.Run("still missing is no change", func(t *testing.T) {
		must.Nil(t, h.place(job))
	})
	t.Run("index 1 placed once its volume exists", func(t *testing.T) {
		h.s.Volumes(schedtest.Volume("vol[1]", "dev"))
		plan := h.run(job)
		must.Eq(t, map[string]string{"web.g[1]": "n1"}, where(plan))
		mustPlacement(t, plan, 2, 1, `volume "vol[0]" does not exist`)
	})
	t.Run("index 0 placed once its volume exists", func(t *testing.T) {
		h.s.Volumes(schedtest.Volume("vol[0]", "dev"))
		plan := h.run(job)
		must.Eq(t, map[string]string{"web.g[0]": "n2"}, where(plan))
		mustPlacement(t, plan, 2, 2)
		must.Eq(t, structs.JobStatusRunning, job.Status)
		must.Nil(t, h.place(job))
	})
}

func TestPlace_PerAllocMaxVolumes(t *testing.T) {
	limited := func(ids ...string) []*structs.Node {
		out := make([]*structs.Node, len(ids))
		for i, id := range ids {
			out[i] = schedtest.Node(id, schedtest.Plugin("dev", schedtest.MaxVolumes(1)))
		}
		return out
	}
	setup := func(t *testing.T, nodes ...*structs.Node) (*harness, *structs.Job) {
		h := newHarness(t, nodes...)
		h.s.Volumes(schedtest.Volume("vol[0]", "dev"), schedtest.Volume("vol[1]", "dev"), schedtest.Volume("vol[2]", "dev"))
		return h, schedtest.Job("web", structs.JobTypeService, 3, schedtest.PerAlloc(schedtest.Writer("vol", snw)))
	}

	t.Run("count 3 over 3 volumes and 3 nodes", func(t *testing.T) {
		h, job := setup(t, limited("n1", "n2", "n3")...)
		plan := h.place(job)
		must.Eq(t, map[string]string{"web.g[0]": "n1", "web.g[1]": "n2", "web.g[2]": "n3"}, where(plan))
		mustPlacement(t, plan, 3, 3)
	})
	t.Run("a node full with another job's volume is skipped", func(t *testing.T) {
		h, job := setup(t, limited("n0", "n1", "n2", "n3")...)
		h.s.Volumes(schedtest.Volume("x", "dev"))
		other := schedtest.Job("other", structs.JobTypeService, 1, schedtest.Writer("x", snw))
		h.s.Jobs(other)
		h.s.Allocs(schedtest.Alloc("o1", "other", 0, "n0"))
		plan := h.place(job)
		must.Eq(t, map[string]string{"web.g[0]": "n1", "web.g[1]": "n2", "web.g[2]": "n3"}, where(plan))
	})
	t.Run("allocations planned in the same run count", func(t *testing.T) {
		h, job := setup(t, limited("n1", "n2")...)
		plan := h.place(job)
		must.Eq(t, map[string]string{"web.g[0]": "n1", "web.g[1]": "n2"}, where(plan))
		mustPlacement(t, plan, 3, 2,
			`node n1: CSI plugin "dev" has 1 volumes on the node, its maximum is 1: volume "vol[2]" would exceed it`,
			`node n2: CSI plugin "dev" has 1 volumes on the node, its maximum is 1: volume "vol[2]" would exceed it`)
	})
}

func TestPlace_SecondJobWriter(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2")...)
	h.s.Volumes(schedtest.Volume("vol[0]", "dev"), schedtest.Volume("vol[1]", "dev"), schedtest.Volume("vol[2]", "dev"))
	req := schedtest.PerAlloc(schedtest.Writer("vol", snw))
	first := h.register(schedtest.Job("first", structs.JobTypeService, 3, req))
	plan := h.run(first)
	must.Len(t, 3, plan.Allocs)
	for _, a := range plan.Allocs {
		h.s.Claim(req.VolumeID(a.Name), schedtest.Claim(a.ID, a.NodeID, req))
	}
	holder := plan.Allocs[0]
	must.Eq(t, "first.g[0]", holder.Name)

	second := schedtest.Job("second", structs.JobTypeService, 1, schedtest.Writer("vol[0]", snw))
	plan = h.place(second)
	must.SliceEmpty(t, plan.Allocs)
	why := `volume "vol[0]" has exhausted its available writer claims: allocation "` + holder.ID + `" of job "first" holds a write claim`
	mustPlacement(t, plan, 1, 0, "node n1: "+why, "node n2: "+why)
}

func TestPlace_SameJobReplacement(t *testing.T) {
	setup := func(t *testing.T) (*harness, *structs.Job, *structs.Allocation) {
		h := newHarness(t, devNodes("n1", "n2")...)
		h.s.Volumes(schedtest.Volume("vol", "dev"))
		req := schedtest.Writer("vol", snw)
		job := h.register(schedtest.Job("web", structs.JobTypeService, 1, req))
		a := schedtest.Alloc("old", "web", 0, "n2")
		h.s.Allocs(a)
		h.s.Claim("vol", schedtest.Claim("old", "n2", req))
		return h, job, a
	}
	t.Run("failed allocation replaced while its claim is held", func(t *testing.T) {
		h, job, a := setup(t)
		a = a.Copy()
		a.ClientStatus = structs.AllocClientStatusFailed
		h.s.Allocs(a)
		plan := h.place(job)
		must.Eq(t, map[string]string{"web.g[0]": "n1"}, where(plan))
		must.MapEmpty(t, stopped(plan))
	})
	t.Run("new job version stops and replaces the holder", func(t *testing.T) {
		h, job, _ := setup(t)
		job.TaskGroups[0].Tasks[0].Config.Command = "/bin/false"
		job = h.register(job)
		must.Eq(t, uint64(1), job.Version)
		plan := h.place(job)
		must.Eq(t, map[string]string{"old": "replaced by job version 1"}, stopped(plan))
		must.Eq(t, map[string]string{"web.g[0]": "n1"}, where(plan))
		must.Eq(t, uint64(1), plan.Allocs[1].JobVersion)
		must.Eq(t, now, plan.Allocs[0].ModifyTime)
	})
	t.Run("running holder of the current version is kept", func(t *testing.T) {
		h, job, _ := setup(t)
		plan := h.run(job)
		must.SliceEmpty(t, plan.Allocs)
		mustPlacement(t, plan, 1, 1)
		must.Nil(t, h.place(job))
	})
}

func TestPlace_GarbageCollectedClaim(t *testing.T) {
	h := newHarness(t, devNodes("n1")...)
	h.s.Volumes(schedtest.Volume("vol", "dev"))
	req := schedtest.Writer("vol", snw)
	h.s.ForceClaims("vol", schedtest.Claim("gc1", "n1", req))
	plan := h.place(schedtest.Job("web", structs.JobTypeService, 1, req))
	must.SliceEmpty(t, plan.Allocs)
	mustPlacement(t, plan, 1, 0, `node n1: volume "vol": waiting for claim of garbage-collected allocation "gc1" to be released`)
}

func TestPlace_Topology(t *testing.T) {
	h := newHarness(t,
		schedtest.Node("n1", schedtest.Plugin("dev", schedtest.Zone("a"))),
		schedtest.Node("n2", schedtest.Plugin("dev", schedtest.Zone("b"))),
		schedtest.Node("n3", schedtest.Plugin("dev")))
	h.s.Volumes(schedtest.Zoned(schedtest.Volume("vol", "dev"), "b"), schedtest.Zoned(schedtest.Volume("far", "dev"), "c"))

	t.Run("placed where the volume is accessible", func(t *testing.T) {
		plan := h.place(schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("vol", mmw)))
		must.Eq(t, map[string]string{"web.g[0]": "n2"}, where(plan))
	})
	t.Run("nowhere", func(t *testing.T) {
		plan := h.place(schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("far", mmw)))
		must.SliceEmpty(t, plan.Allocs)
		mustPlacement(t, plan, 1, 0,
			`node n1: volume "far" requires topology {zone=c}; the node has {zone=a}`,
			`node n2: volume "far" requires topology {zone=c}; the node has {zone=b}`,
			`node n3: volume "far" requires topology {zone=c} and the node reports none for plugin "dev"`)
	})
}

func TestPlace_System(t *testing.T) {
	down := schedtest.Node("n3", schedtest.Plugin("dev"))
	down.Status = structs.NodeStatusDown
	h := newHarness(t, schedtest.Node("n1", schedtest.Plugin("dev")), schedtest.Node("n2"), down,
		schedtest.Node("n4", schedtest.Plugin("dev")))
	h.s.Volumes(schedtest.Volume("shared", "dev"), schedtest.Volume("solo", "dev"))
	job := h.register(schedtest.Job("sys", structs.JobTypeSystem, 0, schedtest.Reader("shared", mnr)))

	t.Run("one per eligible node", func(t *testing.T) {
		plan := h.run(job)
		must.Len(t, 2, plan.Allocs)
		for _, a := range plan.Allocs {
			must.Eq(t, "sys.g[0]", a.Name)
		}
		must.Eq(t, []string{"n1", "n4"}, []string{plan.Allocs[0].NodeID, plan.Allocs[1].NodeID})
		mustPlacement(t, plan, 2, 2, `node n2: CSI plugin "dev" is missing`, `node n3: node is not ready (status "down")`)
	})
	t.Run("again is no change", func(t *testing.T) {
		must.Nil(t, h.place(job))
	})
	t.Run("a node that becomes eligible gets one", func(t *testing.T) {
		h.s.Nodes(schedtest.Node("n2", schedtest.Plugin("dev")))
		plan := h.run(job)
		must.Eq(t, map[string]string{"sys.g[0]": "n2"}, where(plan))
		mustPlacement(t, plan, 3, 3, `node n3: node is not ready (status "down")`)
	})
	t.Run("a single-node writer goes to one node only", func(t *testing.T) {
		solo := schedtest.Job("solo", structs.JobTypeSystem, 0, schedtest.Writer("solo", snw))
		plan := h.place(solo)
		must.Eq(t, map[string]string{"solo.g[0]": "n1"}, where(plan))
		why := `volume "solo" has exhausted its available writer claims: allocation "solo.g[0]" placed on node "n1" by this placement takes a write claim`
		mustPlacement(t, plan, 1, 1, "node n2: "+why, `node n3: node is not ready (status "down")`, "node n4: "+why)
	})
}

func TestPlace_Spread(t *testing.T) {
	t.Run("evenly over the nodes", func(t *testing.T) {
		h := newHarness(t, devNodes("n1", "n2")...)
		plan := h.place(schedtest.Job("web", structs.JobTypeService, 4))
		must.Eq(t, map[string]string{"web.g[0]": "n1", "web.g[1]": "n2", "web.g[2]": "n1", "web.g[3]": "n2"}, where(plan))
	})
	t.Run("fewest allocations of the job first", func(t *testing.T) {
		h := newHarness(t, devNodes("n1", "n2", "n3")...)
		h.s.Allocs(schedtest.Alloc("x0", "web", 0, "n1"), schedtest.Alloc("x1", "web", 1, "n1"),
			schedtest.Alloc("x2", "web", 2, "n3"), schedtest.Alloc("o", "other", 0, "n2"))
		plan := h.place(schedtest.Job("web", structs.JobTypeService, 5))
		must.Eq(t, map[string]string{"web.g[3]": "n2", "web.g[4]": "n2"}, where(plan))
	})
}

func TestPlace_Stop(t *testing.T) {
	setup := func(t *testing.T, count int) (*harness, *structs.Job) {
		h := newHarness(t, devNodes("n1", "n2")...)
		job := h.register(schedtest.Job("web", structs.JobTypeService, count))
		h.run(job)
		return h, job
	}
	t.Run("stopped job", func(t *testing.T) {
		h, job := setup(t, 2)
		job.Stop = true
		plan := h.place(job)
		must.Eq(t, map[string]string{"a-1": "job stopped", "a-2": "job stopped"}, stopped(plan))
		mustPlacement(t, plan, 0, 0)
	})
	t.Run("deregistered job", func(t *testing.T) {
		// The deregistration stops the allocations itself; the placer
		// only updates the explanation, once.
		h, job := setup(t, 2)
		h.s.Deregister(job.ID)
		*job = *h.s.Job(job.ID)
		plan := h.run(job)
		must.MapEmpty(t, stopped(plan))
		mustPlacement(t, plan, 0, 0)
		must.Nil(t, h.place(job))
	})
	t.Run("count reduced", func(t *testing.T) {
		h, job := setup(t, 3)
		job.TaskGroups[0].Count = 1
		plan := h.place(job)
		must.Eq(t, map[string]string{"a-2": "not needed: the group's count is 1", "a-3": "not needed: the group's count is 1"}, stopped(plan))
		must.MapEmpty(t, where(plan))
		mustPlacement(t, plan, 1, 1)
	})
	t.Run("group removed", func(t *testing.T) {
		h, job := setup(t, 1)
		job.TaskGroups[0] = schedtest.Job("web", structs.JobTypeService, 1).TaskGroups[0]
		job.TaskGroups[0].Name = "h"
		plan := h.place(job)
		must.Eq(t, map[string]string{"a-1": `task group "g" is no longer in the job`}, stopped(plan))
		must.Eq(t, map[string]string{"web.h[0]": "n1"}, where(plan))
	})
	t.Run("duplicate", func(t *testing.T) {
		h := newHarness(t, devNodes("n1", "n2")...)
		dup := schedtest.Alloc("b", "web", 0, "n2")
		dup.CreateTime = 5
		h.s.Allocs(schedtest.Alloc("a", "web", 0, "n1"), dup)
		plan := h.place(schedtest.Job("web", structs.JobTypeService, 1))
		must.Eq(t, map[string]string{"b": `duplicate of allocation "a"`}, stopped(plan))
		must.MapEmpty(t, where(plan))
	})
}

func TestPlace_NoChange(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2")...)
	h.s.Volumes(schedtest.Volume("vol[0]", "dev"), schedtest.Volume("vol[1]", "dev"))
	job := h.register(schedtest.Job("web", structs.JobTypeService, 2, schedtest.PerAlloc(schedtest.Writer("vol", snw))))
	first := h.run(job)
	must.Len(t, 2, first.Allocs)
	must.False(t, scheduler.NoChange(first))
	must.Nil(t, h.place(job))

	t.Run("an explanation that changes is a change", func(t *testing.T) {
		h.s.Nodes(schedtest.Node("n3"))
		job.TaskGroups[0].Count = 3
		plan := h.place(job)
		must.SliceEmpty(t, plan.Allocs)
		mustPlacement(t, plan, 3, 2, `volume "vol[2]" does not exist`)
	})
}

func TestPlace_BatchDone(t *testing.T) {
	// A batch allocation that completed is done; one that failed is
	// replaced. (A terminal client status is final, so each is its own
	// allocation.)
	end := func(t *testing.T, status string) (*harness, *structs.Job) {
		h := newHarness(t, devNodes("n1")...)
		job := h.register(schedtest.Job("b", structs.JobTypeBatch, 1))
		plan := h.run(job)
		a := plan.Allocs[0].Copy()
		a.ClientStatus = status
		h.s.Allocs(a)
		return h, job
	}
	h, job := end(t, structs.AllocClientStatusComplete)
	must.Nil(t, h.place(job))

	h, job = end(t, structs.AllocClientStatusFailed)
	must.Eq(t, map[string]string{"b.g[0]": "n1"}, where(h.place(job)))
}

func TestPlace_NoNodes(t *testing.T) {
	h := newHarness(t)
	plan := h.place(schedtest.Job("web", structs.JobTypeService, 1))
	must.SliceEmpty(t, plan.Allocs)
	mustPlacement(t, plan, 1, 0, "no nodes are registered")
}

// failing reads volumes from a store that cannot answer.
type failing struct{ *schedtest.Store }

func (failing) CSIVolumeByID(memdb.WatchSet, string, string) (*structs.CSIVolume, error) {
	return nil, errors.New("store closed")
}

func TestPlace_StateError(t *testing.T) {
	h := newHarness(t, devNodes("n1")...)
	job := schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("vol", snw))
	plan, err := scheduler.Place(failing{h.s}, h.s.AllNodes(), job, nil, now, scheduler.ReschedulePolicy{}, h.ids)
	must.ErrorContains(t, err, "store closed")
	must.Nil(t, plan)
}

// A failed allocation's slot is placed again only after the reschedule
// delay, which doubles with each failure of the slot under the job's
// version up to the maximum; meanwhile the group says why and when.
func TestPlace_FailedReplacementDelayed(t *testing.T) {
	const sec = int64(time.Second)
	h := newHarness(t, devNodes("n1", "n2")...)
	policy := scheduler.ReschedulePolicy{BaseDelay: 10 * time.Second, MaxDelay: 25 * time.Second}
	job := h.register(schedtest.Job("web", structs.JobTypeService, 2))
	h.run(job)

	placeAt := func(at int64) *structs.PlanApplyRequest {
		t.Helper()
		allocs, err := h.s.AllocsByJob(nil, job.Namespace, job.ID)
		must.NoError(t, err)
		plan, err := scheduler.Place(h.s, h.s.AllNodes(), job, allocs, at, policy, h.ids)
		must.NoError(t, err)
		return plan
	}
	// fail marks the running allocation of slot web.g[0] failed at a time.
	fail := func(at int64) {
		t.Helper()
		allocs, err := h.s.AllocsByJob(nil, job.Namespace, job.ID)
		must.NoError(t, err)
		for _, a := range allocs {
			if a.Name == "web.g[0]" && !a.Terminal() {
				f := a.Copy()
				f.ClientStatus, f.ModifyTime = structs.AllocClientStatusFailed, at
				h.s.Allocs(f)
				return
			}
		}
		t.Fatal("no live web.g[0]")
	}
	waits := func(plan *structs.PlanApplyRequest, failures string, until int64) {
		t.Helper()
		must.MapEmpty(t, where(plan))
		gp := plan.Placement["g"]
		must.Eq(t, 2, gp.Desired)
		must.Eq(t, 1, gp.Placed)
		must.Eq(t, []string{"allocation web.g[0] failed " + failures + "; it is replaced after " +
			time.Unix(0, until).UTC().Format(time.RFC3339)}, gp.Blocked)
		must.Eq(t, until, gp.NextPlacement)
	}
	apply := func(plan *structs.PlanApplyRequest) {
		h.s.ApplyPlan(plan)
		*job = *h.s.Job(job.ID)
	}

	fail(now)
	plan := placeAt(now + 5*sec)
	waits(plan, "once", now+10*sec)
	apply(plan)
	must.Nil(t, placeAt(now+9*sec), must.Sprint("the same wait is no change"))
	plan = placeAt(now + 10*sec)
	must.Eq(t, map[string]string{"web.g[0]": "n1"}, where(plan))
	must.Zero(t, plan.Placement["g"].NextPlacement)
	apply(plan)

	fail(now + 20*sec)
	waits(placeAt(now+39*sec), "2 times", now+40*sec)
	apply(placeAt(now + 40*sec))
	fail(now + 50*sec)
	waits(placeAt(now+50*sec), "3 times", now+75*sec) // 40 s capped at 25 s

	// A new version of the job starts the count again: its first
	// allocation of the slot is placed at once.
	job.TaskGroups[0].Tasks[0].Config.Command = "/usr/bin/env"
	job = h.register(job)
	must.Eq(t, uint64(1), job.Version)
	plan = placeAt(now + 51*sec)
	must.Eq(t, map[string]string{"web.g[0]": "n1", "web.g[1]": "n2"}, where(plan))
}

// A system job's failed allocation waits on its node; the other nodes are
// placed, and the waiting one counts as desired but not placed.
func TestPlace_SystemFailedReplacementDelayed(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2")...)
	h.reschedule = scheduler.ReschedulePolicy{BaseDelay: time.Minute}
	job := h.register(schedtest.Job("sys", structs.JobTypeSystem, 1))
	plan := h.run(job)
	must.Len(t, 2, plan.Allocs)
	f := plan.Allocs[0].Copy()
	f.ClientStatus, f.ModifyTime = structs.AllocClientStatusFailed, now
	h.s.Allocs(f)

	plan = h.place(job)
	must.MapEmpty(t, where(plan))
	mustPlacement(t, plan, 2, 1, "allocation sys.g[0] on node "+f.NodeID+" failed once; it is replaced after "+
		time.Unix(0, now+int64(time.Minute)).UTC().Format(time.RFC3339))
}

func TestReschedulePolicy_Delay(t *testing.T) {
	p := scheduler.ReschedulePolicy{BaseDelay: 30 * time.Second, MaxDelay: time.Hour}
	for failures, want := range map[int]time.Duration{
		1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 7: 32 * time.Minute, 8: time.Hour, 1000: time.Hour,
	} {
		must.Eq(t, want, p.Delay(failures), must.Sprintf("after %d failures", failures))
	}
	must.Eq(t, 30*time.Second, scheduler.ReschedulePolicy{BaseDelay: 30 * time.Second}.Delay(5),
		must.Sprint("a maximum below the base keeps the base"))
	must.Zero(t, scheduler.ReschedulePolicy{}.Delay(3))
	must.Eq(t, scheduler.ReschedulePolicy{BaseDelay: 30 * time.Second, MaxDelay: time.Hour}, scheduler.DefaultReschedulePolicy)
}

// TestPlace_DrainingAndIneligible: nothing new goes to a draining or an
// ineligible node; a service job says why when no node is left, and a
// system job leaves such nodes out without counting them as blocking.
func TestPlace_DrainingAndIneligible(t *testing.T) {
	h := newHarness(t, devNodes("n1", "n2", "n3")...)
	h.s.Drain("n1")
	h.s.Eligibility("n3", structs.NodeSchedulingIneligible)

	plan := h.place(schedtest.Job("web", structs.JobTypeService, 2))
	must.Eq(t, map[string]string{"web.g[0]": "n2", "web.g[1]": "n2"}, where(plan))

	sys := h.place(schedtest.Job("sys", structs.JobTypeSystem, 0))
	must.Eq(t, map[string]string{"sys.g[0]": "n2"}, where(sys))
	mustPlacement(t, sys, 1, 1)

	h.s.Eligibility("n2", structs.NodeSchedulingIneligible)
	none := h.place(schedtest.Job("solo", structs.JobTypeService, 1))
	must.Eq(t, map[string]string{}, where(none))
	mustPlacement(t, none, 1, 0, "node n1: node is draining", "node n2: node is ineligible", "node n3: node is ineligible")
}
