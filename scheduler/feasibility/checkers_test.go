package feasibility_test

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/scheduler/feasibility"
	"github.com/volplane/volplane/scheduler/internal/schedtest"
	"github.com/volplane/volplane/structs"
)

const (
	snw  = structs.CSIVolumeAccessModeSingleNodeWriter
	snr  = structs.CSIVolumeAccessModeSingleNodeReader
	mnr  = structs.CSIVolumeAccessModeMultiNodeReader
	mnsw = structs.CSIVolumeAccessModeMultiNodeSingleWriter
	mnmw = structs.CSIVolumeAccessModeMultiNodeMultiWriter
)

// checkCase is one row of a checker table: a world, the job being placed,
// the allocation and node to check, and the reason expected ("" when the
// node is feasible).
type checkCase struct {
	name string
	// world fills the store; nil means node n1 running a healthy plugin
	// "dev" and a volume "vol" of it.
	world func(s *schedtest.Store)
	job   *structs.Job
	// alloc is the allocation's index (its name is job.g[alloc]).
	alloc int
	// before runs on the context before the check: planned and stopped
	// allocations of the run.
	before func(ctx *feasibility.Context)
	node   string
	want   string
}

type newChecker func(ctx *feasibility.Context, r *feasibility.Reasons, reqs []*feasibility.Request, allocName string) feasibility.Checker

func runChecks(t *testing.T, build newChecker, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := schedtest.NewStore(t)
			world := tc.world
			if world == nil {
				world = defaultWorld
			}
			world(s)
			job := tc.job
			if job == nil {
				job = schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("vol", snw))
			}
			s.Jobs(job)
			node := tc.node
			if node == "" {
				node = "n1"
			}
			n, err := s.NodeByID(nil, node)
			must.NoError(t, err)
			must.NotNil(t, n)

			ctx := feasibility.NewContext(s, job)
			if tc.before != nil {
				tc.before(ctx)
			}
			name := structs.AllocName(job.ID, "g", tc.alloc)
			reqs := feasibility.ResolveRequests(ctx, job.TaskGroups[0], name)
			r := feasibility.NewReasons()
			got := build(ctx, r, reqs, name).Feasible(n)
			must.NoError(t, ctx.Err())
			must.Eq(t, tc.want, r.Of(node))
			must.Eq(t, tc.want == "", got, must.Sprintf("feasible; reason %q", r.Of(node)))
		})
	}
}

func defaultWorld(s *schedtest.Store) {
	s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev")))
	s.Volumes(schedtest.Volume("vol", "dev"))
}

func TestNodeReady(t *testing.T) {
	status := func(st string) func(s *schedtest.Store) {
		return func(s *schedtest.Store) {
			n := schedtest.Node("n1")
			n.Status = st
			s.Nodes(n)
		}
	}
	none := schedtest.Job("web", structs.JobTypeService, 1)
	runChecks(t, func(_ *feasibility.Context, r *feasibility.Reasons, _ []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewNodeReady(r)
	}, []checkCase{
		{name: "ready", world: status(structs.NodeStatusReady), job: none},
		{name: "down", world: status(structs.NodeStatusDown), job: none, want: `node is not ready (status "down")`},
		{name: "initializing", world: status(structs.NodeStatusInit), job: none, want: `node is not ready (status "initializing")`},
	})
}

func TestNodeEligible(t *testing.T) {
	none := schedtest.Job("web", structs.JobTypeService, 1)
	world := func(change func(s *schedtest.Store)) func(s *schedtest.Store) {
		return func(s *schedtest.Store) {
			s.Nodes(schedtest.Node("n1"))
			change(s)
		}
	}
	runChecks(t, func(_ *feasibility.Context, r *feasibility.Reasons, _ []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewNodeEligible(r)
	}, []checkCase{
		{name: "eligible", world: world(func(*schedtest.Store) {}), job: none},
		{name: "eligible again", world: world(func(s *schedtest.Store) {
			s.Eligibility("n1", structs.NodeSchedulingIneligible)
			s.Eligibility("n1", structs.NodeSchedulingEligible)
		}), job: none},
		{name: "ineligible", world: world(func(s *schedtest.Store) { s.Eligibility("n1", structs.NodeSchedulingIneligible) }),
			job: none, want: "node is ineligible"},
		{name: "draining", world: world(func(s *schedtest.Store) { s.Drain("n1") }), job: none, want: "node is draining"},
		{name: "draining, system job too", world: world(func(s *schedtest.Store) { s.Drain("n1") }),
			job: schedtest.Job("plugin", structs.JobTypeSystem, 1), want: "node is draining"},
	})
}

func TestVolumesExist(t *testing.T) {
	perAlloc := schedtest.Job("web", structs.JobTypeService, 2, schedtest.PerAlloc(schedtest.Writer("vol", snw)))
	twoMissing := schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("b", snw), schedtest.Writer("a", snw))
	runChecks(t, func(_ *feasibility.Context, r *feasibility.Reasons, reqs []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewVolumesExist(r, reqs)
	}, []checkCase{
		{name: "exists"},
		{name: "missing", job: schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("nope", snw)),
			want: `volume "nope" does not exist`},
		{name: "per_alloc index resolved", job: perAlloc, alloc: 1, want: `volume "vol[1]" does not exist`},
		{name: "every missing volume, sorted", job: twoMissing, want: `volume "a" does not exist; volume "b" does not exist`},
		{name: "no volumes", job: schedtest.Job("web", structs.JobTypeService, 1)},
	})
}

func TestVolumesSchedulable(t *testing.T) {
	runChecks(t, func(_ *feasibility.Context, r *feasibility.Reasons, reqs []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewVolumesSchedulable(r, reqs)
	}, []checkCase{
		{name: "healthy plugin"},
		{name: "no healthy node plugin anywhere", world: func(s *schedtest.Store) {
			defaultWorld(s)
			s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev", schedtest.Unhealthy)))
		}, want: `volume "vol" is unschedulable: plugin "dev" has no healthy node plugins (0/1)`},
		{name: "healthy elsewhere is enough here", world: func(s *schedtest.Store) {
			defaultWorld(s)
			s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev", schedtest.Unhealthy)), schedtest.Node("n2", schedtest.Plugin("dev")))
		}},
		{name: "controller required and none", world: func(s *schedtest.Store) {
			s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev", func(i *structs.CSIInfo) { i.RequiresControllerPlugin = true })))
			s.Volumes(schedtest.Volume("vol", "dev"))
		}, want: `volume "vol" is unschedulable: plugin "dev" requires a controller and has no healthy controllers (0/0)`},
	})
}

func TestPluginOnNode(t *testing.T) {
	world := func(s *schedtest.Store) {
		s.Nodes(
			schedtest.Node("n1", schedtest.Plugin("dev")),
			schedtest.Node("n2", schedtest.Plugin("other")),
			schedtest.Node("n3", schedtest.Plugin("dev", schedtest.Unhealthy)),
		)
		s.Volumes(schedtest.Volume("vol", "dev"))
	}
	runChecks(t, func(_ *feasibility.Context, r *feasibility.Reasons, reqs []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewPluginOnNode(r, reqs)
	}, []checkCase{
		{name: "present and healthy", world: world, node: "n1"},
		{name: "missing", world: world, node: "n2", want: `CSI plugin "dev" is missing`},
		{name: "unhealthy", world: world, node: "n3", want: `CSI plugin "dev" is unhealthy: probe failed`},
		{name: "missing volume is not this checker's", world: world, node: "n2",
			job: schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("nope", snw))},
	})
}

func TestTopology(t *testing.T) {
	world := func(vol *structs.CSIVolume, opts ...schedtest.PluginOpt) func(s *schedtest.Store) {
		return func(s *schedtest.Store) {
			s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev", opts...)))
			s.Volumes(vol)
		}
	}
	segments := func(kv ...string) schedtest.PluginOpt {
		return func(i *structs.CSIInfo) {
			t := &structs.CSITopology{Segments: map[string]string{}}
			for j := 0; j < len(kv); j += 2 {
				t.Segments[kv[j]] = kv[j+1]
			}
			i.NodeInfo.AccessibleTopology = t
		}
	}
	rackA1 := schedtest.Volume("vol", "dev")
	rackA1.Topologies = []*structs.CSITopology{{Segments: map[string]string{"zone": "a", "rack": "1"}}}
	runChecks(t, func(_ *feasibility.Context, r *feasibility.Reasons, reqs []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewTopology(r, reqs)
	}, []checkCase{
		{name: "volume without topology fits a node without", world: world(schedtest.Volume("vol", "dev"))},
		{name: "volume without topology fits a zoned node", world: world(schedtest.Volume("vol", "dev"), schedtest.Zone("a"))},
		{name: "same zone", world: world(schedtest.Zoned(schedtest.Volume("vol", "dev"), "a"), schedtest.Zone("a"))},
		{name: "one of several", world: world(schedtest.Zoned(schedtest.Volume("vol", "dev"), "a", "b"), schedtest.Zone("b"))},
		{name: "other zone", world: world(schedtest.Zoned(schedtest.Volume("vol", "dev"), "a"), schedtest.Zone("b")),
			want: `volume "vol" requires topology {zone=a}; the node has {zone=b}`},
		{name: "node without topology", world: world(schedtest.Zoned(schedtest.Volume("vol", "dev"), "a", "b")),
			want: `volume "vol" requires topology {zone=a} or {zone=b} and the node reports none for plugin "dev"`},
		{name: "every segment is needed", world: world(rackA1, schedtest.Zone("a")),
			want: `volume "vol" requires topology {rack=1,zone=a}; the node has {zone=a}`},
		{name: "extra node segments are fine", world: world(rackA1, segments("zone", "a", "rack", "1", "host", "h1"))},
	})
}

func TestMaxVolumes(t *testing.T) {
	// n1 runs plugin dev with the given limit and plugin other without one;
	// volumes: vol, x, y, data[0], data[1] of dev, z of other.
	world := func(limit int64, allocs ...*structs.Allocation) func(s *schedtest.Store) {
		return func(s *schedtest.Store) {
			s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev", schedtest.MaxVolumes(limit)), schedtest.Plugin("other")))
			s.Volumes(schedtest.Volume("vol", "dev"), schedtest.Volume("x", "dev"), schedtest.Volume("y", "dev"),
				schedtest.Volume("data[0]", "dev"), schedtest.Volume("data[1]", "dev"), schedtest.Volume("z", "other"))
			s.Jobs(
				schedtest.Job("other", structs.JobTypeService, 1, schedtest.Writer("x", snw)),
				schedtest.Job("shared", structs.JobTypeService, 1, schedtest.Reader("vol", mnr)),
				schedtest.Job("pa", structs.JobTypeService, 2, schedtest.PerAlloc(schedtest.Writer("data", snw))),
				schedtest.Job("elsewhere", structs.JobTypeService, 1, schedtest.Writer("z", snw)),
				schedtest.Job("ghost", structs.JobTypeService, 1, schedtest.Writer("deregistered", snw)),
			)
			if len(allocs) > 0 {
				s.Allocs(allocs...)
			}
		}
	}
	stopped := schedtest.Alloc("a1", "other", 0, "n1")
	stopped.ClientStatus = structs.AllocClientStatusComplete
	reader := schedtest.Job("web", structs.JobTypeService, 1, schedtest.Reader("vol", mnr))
	two := schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("vol", snw), schedtest.Writer("y", snw))
	runChecks(t, func(ctx *feasibility.Context, r *feasibility.Reasons, reqs []*feasibility.Request, _ string) feasibility.Checker {
		return feasibility.NewMaxVolumes(ctx, r, reqs)
	}, []checkCase{
		{name: "no limit", world: world(0, schedtest.Alloc("a1", "other", 0, "n1"))},
		{name: "empty node", world: world(1)},
		{name: "full", world: world(1, schedtest.Alloc("a1", "other", 0, "n1")),
			want: `CSI plugin "dev" has 1 volumes on the node, its maximum is 1: volume "vol" would exceed it`},
		{name: "terminal allocation does not count", world: world(1, stopped)},
		{name: "a volume already on the node costs nothing", job: reader,
			world: world(1, schedtest.Alloc("a1", "shared", 0, "n1"))},
		{name: "per_alloc volumes of others are resolved per allocation", job: reader,
			world: world(1, schedtest.Alloc("a1", "pa", 1, "n1")),
			want:  `CSI plugin "dev" has 1 volumes on the node, its maximum is 1: volume "vol" would exceed it`},
		{name: "room for one more", world: world(2, schedtest.Alloc("a1", "pa", 1, "n1"))},
		{name: "all of the allocation's volumes count", job: two, world: world(2, schedtest.Alloc("a1", "pa", 1, "n1")),
			want: `CSI plugin "dev" has 1 volumes on the node, its maximum is 2: volume "vol", "y" would exceed it`},
		{name: "other plugins do not count", world: world(1, schedtest.Alloc("a1", "elsewhere", 0, "n1"))},
		{name: "missing volumes are skipped", world: world(1, schedtest.Alloc("a1", "ghost", 0, "n1"))},
		{name: "allocation of an unknown job is skipped", world: world(1, schedtest.Alloc("a1", "unknown", 0, "n1"))},
		{name: "planned earlier in the run counts", world: world(1),
			job: schedtest.Job("web", structs.JobTypeService, 2, schedtest.PerAlloc(schedtest.Writer("data", snw))), alloc: 1,
			before: func(ctx *feasibility.Context) { ctx.Plan(schedtest.Alloc("p0", "web", 0, "n1")) },
			want:   `CSI plugin "dev" has 1 volumes on the node, its maximum is 1: volume "data[1]" would exceed it`},
		{name: "planned on another node does not count", world: world(1),
			job: schedtest.Job("web", structs.JobTypeService, 2, schedtest.PerAlloc(schedtest.Writer("data", snw))), alloc: 1,
			before: func(ctx *feasibility.Context) { ctx.Plan(schedtest.Alloc("p0", "web", 0, "n2")) }},
	})
}

func TestStack(t *testing.T) {
	t.Run("first checker to filter gives the reason", func(t *testing.T) {
		s := schedtest.NewStore(t)
		defaultWorld(s)
		down := schedtest.Node("n2", schedtest.Plugin("other"))
		down.Status = structs.NodeStatusDown
		s.Nodes(down)
		job := schedtest.Job("web", structs.JobTypeService, 1, schedtest.Writer("vol", snw))
		stack := feasibility.NewStack(feasibility.NewContext(s, job), job.TaskGroups[0], "web.g[0]")
		n1, err := s.NodeByID(nil, "n1")
		must.NoError(t, err)
		n2, err := s.NodeByID(nil, "n2")
		must.NoError(t, err)
		must.True(t, stack.Feasible(n1))
		must.Eq(t, "", stack.Reasons.Of("n1"))
		must.False(t, stack.Feasible(n2))
		must.Eq(t, `node is not ready (status "down")`, stack.Reasons.Of("n2"))
		must.SliceEmpty(t, stack.Missing())
	})
	t.Run("missing volumes", func(t *testing.T) {
		s := schedtest.NewStore(t)
		defaultWorld(s)
		job := schedtest.Job("web", structs.JobTypeService, 2,
			schedtest.PerAlloc(schedtest.Writer("vol", snw)), schedtest.Writer("vol", mnmw), schedtest.Writer("nope", mnmw))
		stack := feasibility.NewStack(feasibility.NewContext(s, job), job.TaskGroups[0], "web.g[1]")
		must.Eq(t, []string{"nope", "vol[1]"}, stack.Missing())
		n1, err := s.NodeByID(nil, "n1")
		must.NoError(t, err)
		must.False(t, stack.Feasible(n1))
		must.Eq(t, `volume "nope" does not exist; volume "vol[1]" does not exist`, stack.Reasons.Of("n1"))
	})
}
