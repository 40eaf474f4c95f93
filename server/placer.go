package server

import (
	"context"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-uuid"

	"github.com/volplane/volplane/scheduler"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// placerSettle is how long the placer lets a burst of changes settle before
// it looks, so registering a hundred volumes costs one pass, not a hundred.
const placerSettle = 20 * time.Millisecond

// runPlacer is the leader's placement loop: whenever jobs, allocations,
// nodes, volumes or plugins change, it computes each job's plan and commits
// the ones that change something. A job waiting for a volume is placed when
// the volume is registered, because the registration wakes the loop; a
// failed allocation's delayed replacement is placed when its delay is over,
// because the loop also wakes at the earliest NextPlacement of any group. A
// pass that changes nothing writes nothing, so the loop's own writes settle.
func (s *Server) runPlacer(done <-chan struct{}) {
	ctx, cancel := s.leaderContext(done)
	defer cancel()
	logger := s.logger.Named("placer")
	settled := map[string]settledJob{}
	var last passMark
	var next int64 // the earliest delayed replacement, 0 when none waits
	for {
		st := s.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		if _, err := st.IndexWatch(ws, state.TableJobs, state.TableAllocs, state.TableNodes,
			state.TableCSIVolumes, state.TableCSIPlugins); err != nil {
			logger.Error("watching state", "error", err)
		}
		// When every job is settled and neither jobs, allocations nor nodes
		// changed, a volume or plugin write (every claim is one) concerns
		// no job: skip the pass without reading them.
		mark, err := placerMark(st)
		if err != nil || !last.allSettled || mark != last.mark {
			var allSettled bool
			allSettled, next, err = s.placeAll(st, settled)
			if err != nil {
				logger.Warn("placement pass failed; retrying on the next change", "error", err)
			}
			last = passMark{mark: mark, allSettled: allSettled && err == nil}
		}
		if !waitChangeOrTime(ctx, ws, next) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(placerSettle):
		}
	}
}

// waitChangeOrTime waits for a change in the watch set or, when at is not
// zero, for that time (Unix nanoseconds); it returns false when ctx ends.
func waitChangeOrTime(ctx context.Context, ws memdb.WatchSet, at int64) bool {
	wctx := ctx
	if at > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, time.Unix(0, at))
		defer cancel()
	}
	_ = ws.WatchCtx(wctx) // a change, or the deadline: both mean a pass
	return ctx.Err() == nil
}

// passMark is what the state looked like at the last placement pass.
type passMark struct {
	mark       [3]uint64
	allSettled bool
}

// placerMark is the indexes of the tables whose changes can concern a
// settled job.
func placerMark(st *state.StateStore) ([3]uint64, error) {
	var m [3]uint64
	for i, t := range []string{state.TableJobs, state.TableAllocs, state.TableNodes} {
		idx, err := st.Index(t)
		if err != nil {
			return m, err
		}
		m[i] = idx
	}
	return m, nil
}

// settledJob is what a job looked like when its last pass changed nothing
// and left it fully placed.
type settledJob struct {
	jobModifyIndex uint64
	allocsIndex    uint64
	nodesIndex     uint64
}

// placeAll runs one placement pass and reports whether every job is
// settled afterwards, and the earliest time a delayed replacement of a
// failed allocation may be placed (0 when none waits). A job that is fully placed, with
// nothing blocked, is looked at again only when it, one of its allocations
// or (for system jobs) the nodes changed: volume and plugin writes, such as
// every claim, do not concern it. Jobs still waiting for something are
// looked at on every pass.
func (s *Server) placeAll(st *state.StateStore, settled map[string]settledJob) (bool, int64, error) {
	snap, err := st.Snapshot()
	if err != nil {
		return false, 0, err
	}
	nodesIndex, err := snap.Index(state.TableNodes)
	if err != nil {
		return false, 0, err
	}
	var nodes []*structs.Node
	iter, err := snap.Nodes(nil)
	if err != nil {
		return false, 0, err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		nodes = append(nodes, raw.(*structs.Node))
	}
	jobs, err := snap.Jobs(nil)
	if err != nil {
		return false, 0, err
	}
	var firstErr error
	var next int64
	live := map[string]bool{}
	for raw := jobs.Next(); raw != nil; raw = jobs.Next() {
		job := raw.(*structs.Job)
		k := structs.JobKey(job.Namespace, job.ID)
		live[k] = true
		existing, err := snap.AllocsByJob(nil, job.Namespace, job.ID)
		if err != nil {
			return false, 0, err
		}
		mark := settledJob{jobModifyIndex: job.ModifyIndex, allocsIndex: maxAllocIndex(existing)}
		if job.IsSystem() {
			mark.nodesIndex = nodesIndex
		}
		if prev, ok := settled[k]; ok && prev == mark {
			continue
		}
		changed, placement, err := s.placeJob(snap, nodes, job, existing)
		next = earliestPlacement(next, placement, structs.NowNano())
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if !changed && fullyPlaced(job) {
			settled[k] = mark
		} else {
			delete(settled, k)
		}
	}
	for k := range settled {
		if !live[k] {
			delete(settled, k)
		}
	}
	return len(settled) == len(live), next, firstErr
}

// earliestPlacement is the earlier of next and the groups' NextPlacement
// still to come. One already past is left out: the pass just made placed
// it, or failed, and a failed pass is retried on the next change rather
// than at once in a loop.
func earliestPlacement(next int64, placement map[string]*structs.GroupPlacement, now int64) int64 {
	for _, gp := range placement {
		if gp.NextPlacement > now && (next == 0 || gp.NextPlacement < next) {
			next = gp.NextPlacement
		}
	}
	return next
}

func maxAllocIndex(allocs []*structs.Allocation) uint64 {
	var m uint64
	for _, a := range allocs {
		m = max(m, a.ModifyIndex)
	}
	return m
}

// fullyPlaced reports whether every group has all it wants, nothing
// blocked and no rolling update waiting.
func fullyPlaced(job *structs.Job) bool {
	for _, p := range job.Placement {
		if p.Placed < p.Desired || len(p.Blocked) > 0 || len(p.Waiting) > 0 {
			return false
		}
	}
	return job.Placement != nil || job.Stop
}

// placeJob computes and commits one job's plan, and reports whether it
// changed anything and the job's placement as it stands after it.
func (s *Server) placeJob(snap *state.StateSnapshot, nodes []*structs.Node, job *structs.Job,
	existing []*structs.Allocation) (bool, map[string]*structs.GroupPlacement, error) {
	plan, err := scheduler.Place(snap, nodes, job, existing, structs.NowNano(), s.config.ReschedulePolicy, newAllocID)
	if err != nil {
		return false, job.Placement, structs.Wrap(err, "placing job %q", job.ID)
	}
	if plan == nil {
		return false, job.Placement, nil
	}
	// Place stamped the plan with the job's identity and version and with
	// now, as its Timestamp.
	if _, _, err := s.raftApply(structs.PlanApplyRequestType, plan); err != nil {
		// A plan for an older job version is refused; the registration that
		// made it stale has woken the loop already.
		if structs.CodeOf(err) == structs.ErrCodeConflict {
			return true, nil, nil
		}
		return false, job.Placement, structs.Wrap(err, "applying the plan of job %q", job.ID)
	}
	return true, plan.Placement, nil
}

func newAllocID() string {
	id, err := uuid.GenerateUUID()
	if err != nil {
		// crypto/rand does not fail on Linux; if it ever does, placing
		// nothing is better than placing with a duplicate ID.
		panic("generating an allocation ID: " + err.Error())
	}
	return id
}
