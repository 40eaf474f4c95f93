package feasibility_test

import (
	"testing"

	"github.com/volplane/volplane/scheduler/feasibility"
	"github.com/volplane/volplane/scheduler/internal/schedtest"
	"github.com/volplane/volplane/structs"
)

func TestClaims(t *testing.T) {
	// held is a world where allocation id of job holds the request's claim
	// on "vol" from node n2; terminal makes the allocation stop after it
	// claimed.
	type holder struct {
		id, job  string
		req      *structs.VolumeRequest
		terminal bool
	}
	held := func(hs ...holder) func(s *schedtest.Store) {
		return func(s *schedtest.Store) {
			s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev")), schedtest.Node("n2", schedtest.Plugin("dev")))
			s.Volumes(schedtest.Volume("vol", "dev"))
			for i, h := range hs {
				a := schedtest.Alloc(h.id, h.job, i, "n2")
				s.Allocs(a)
				s.Claim("vol", schedtest.Claim(h.id, "n2", h.req))
				if h.terminal {
					a = a.Copy()
					a.ClientStatus = structs.AllocClientStatusFailed
					s.Allocs(a)
				}
			}
		}
	}
	// gone is a world where claims are held by allocations that no longer
	// exist, next to the live holders.
	gone := func(claims []*structs.CSIVolumeClaim, hs ...holder) func(s *schedtest.Store) {
		return func(s *schedtest.Store) {
			held(hs...)(s)
			s.ForceClaims("vol", claims...)
		}
	}
	job := func(reqs ...*structs.VolumeRequest) *structs.Job {
		return schedtest.Job("web", structs.JobTypeService, 1, reqs...)
	}
	// twoGroups adds a group "h" like the job's group "g".
	twoGroups := func(j *structs.Job) *structs.Job {
		h := j.TaskGroups[0].Copy()
		h.Name = "h"
		j.TaskGroups = append(j.TaskGroups, h)
		return j
	}
	w, r := schedtest.Writer, schedtest.Reader
	onlyMNR := func(s *schedtest.Store) {
		s.Nodes(schedtest.Node("n1", schedtest.Plugin("dev")))
		v := schedtest.Volume("vol", "dev")
		v.RequestedCapabilities = v.RequestedCapabilities[2:3]
		s.Volumes(v)
	}

	runChecks(t, func(ctx *feasibility.Context, rs *feasibility.Reasons, reqs []*feasibility.Request, name string) feasibility.Checker {
		return feasibility.NewClaims(ctx, rs, reqs, name)
	}, []checkCase{
		{name: "unclaimed writer", job: job(w("vol", snw))},
		{name: "unclaimed reader", job: job(r("vol", snr))},
		{name: "single-node-writer held by another job", world: held(holder{"a1", "other", w("vol", snw), false}),
			job:  job(w("vol", snw)),
			want: `volume "vol" has exhausted its available writer claims: allocation "a1" of job "other" holds a write claim`},
		{name: "single-node-writer held, reader refused too", world: held(holder{"a1", "other", w("vol", snw), false}),
			job:  job(r("vol", snr)),
			want: `volume "vol" has exhausted its available reader claims: allocation "a1" of job "other" holds a write claim`},
		{name: "single-node-reader takes one reader", world: held(holder{"a1", "other", r("vol", snr), false}),
			job:  job(r("vol", snr)),
			want: `volume "vol" has exhausted its available reader claims: allocation "a1" of job "other" holds a read claim`},
		{name: "multi-node-reader takes more readers", world: held(holder{"a1", "other", r("vol", mnr), false}),
			job: job(r("vol", mnr))},
		{name: "multi-node-reader takes no writer", world: held(holder{"a1", "other", r("vol", mnr), false}),
			job:  job(w("vol", mnsw)),
			want: `volume "vol" is claimed read-only (multi-node-reader-only) and takes no writer: allocation "a1" of job "other" holds a read claim`},
		{name: "multi-node-single-writer takes readers", world: held(holder{"a1", "other", w("vol", mnsw), false}),
			job: job(r("vol", mnsw))},
		{name: "multi-node-single-writer takes one writer", world: held(holder{"a1", "other", w("vol", mnsw), false}),
			job:  job(w("vol", mnsw)),
			want: `volume "vol" has exhausted its available writer claims: allocation "a1" of job "other" holds a write claim`},
		{name: "multi-node-multi-writer takes more writers", world: held(holder{"a1", "other", w("vol", mnmw), false}),
			job: job(w("vol", mnmw))},
		// Stopping the allocation released its claim in the same write: it
		// is a past claim now, and still holds the volume until freed.
		{name: "stopped allocation of another job still holds it", world: held(holder{"a1", "other", w("vol", snw), true}),
			job:  job(w("vol", snw)),
			want: `volume "vol" has exhausted its available writer claims: allocation "a1" of job "other" holds a write claim (being released: unpublishing)`},
		{name: "terminal writer of the same job is replaced", world: held(holder{"a1", "web", w("vol", snw), true}),
			job: job(w("vol", snw))},
		{name: "terminal reader of the same job is replaced", world: held(holder{"a1", "web", r("vol", snr), true}),
			job: job(r("vol", snr))},
		{name: "writer of the same job stopped by this run is replaced", world: held(holder{"a1", "web", w("vol", snw), false}),
			job: job(w("vol", snw)), before: func(ctx *feasibility.Context) { ctx.Stop("a1") }},
		{name: "live sibling of the same job still blocks", world: held(holder{"a1", "web", w("vol", snw), false}),
			job:  job(w("vol", snw)),
			want: `volume "vol" has exhausted its available writer claims: allocation "a1" of job "web" holds a write claim`},
		{name: "claim of a garbage-collected allocation",
			world: gone([]*structs.CSIVolumeClaim{schedtest.Claim("gc1", "n2", w("vol", snw))}),
			job:   job(w("vol", snw)),
			want:  `volume "vol": waiting for claim of garbage-collected allocation "gc1" to be released`},
		{name: "garbage-collected reader is not what blocks a writer",
			world: gone([]*structs.CSIVolumeClaim{schedtest.Claim("gc1", "n2", r("vol", mnsw))}, holder{"a1", "other", w("vol", mnsw), false}),
			job:   job(w("vol", mnsw)),
			want:  `volume "vol" has exhausted its available writer claims: allocation "a1" of job "other" holds a write claim`},
		// Job validation refuses a group of several allocations sharing a
		// single-node volume; two groups of one allocation each may.
		{name: "planned earlier in the run", job: twoGroups(job(w("vol", snw))),
			before: func(ctx *feasibility.Context) {
				p := schedtest.Alloc("p0", "web", 0, "n1")
				p.TaskGroup, p.Name = "h", structs.AllocName("web", "h", 0)
				ctx.Plan(p)
			},
			want: `volume "vol" has exhausted its available writer claims: allocation "web.h[0]" placed on node "n1" by this placement takes a write claim`},
		{name: "one volume mounted twice by the allocation", job: job(w("vol", snw), r("vol", snw))},
		{name: "mode outside the volume's capabilities", world: onlyMNR, job: job(w("vol", snw)),
			want: `volume "vol": allocation "web.g[0]" cannot take a write claim: single-node-writer/file-system is not among the volume's capabilities [multi-node-reader-only/file-system]`},
	})
}
