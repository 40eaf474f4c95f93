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
// the volume is registered, because the registration wakes the loop. A pass
// that changes nothing writes nothing, so the loop's own writes settle.
func (s *Server) runPlacer(done <-chan struct{}) {
	ctx, cancel := context.WithCancel(s.shutdownCtx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	logger := s.logger.Named("placer")
	for {
		st := s.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		if _, err := st.IndexWatch(ws, state.TableJobs, state.TableAllocs, state.TableNodes,
			state.TableCSIVolumes, state.TableCSIPlugins); err != nil {
			logger.Error("watching state", "error", err)
		}
		if err := s.placeAll(st); err != nil {
			logger.Warn("placement pass failed; retrying on the next change", "error", err)
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(placerSettle):
		}
	}
}

// placeAll runs one placement pass over every job.
func (s *Server) placeAll(st *state.StateStore) error {
	snap, err := st.Snapshot()
	if err != nil {
		return err
	}
	var nodes []*structs.Node
	iter, err := snap.Nodes(nil)
	if err != nil {
		return err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		nodes = append(nodes, raw.(*structs.Node))
	}
	jobs, err := snap.Jobs(nil)
	if err != nil {
		return err
	}
	var firstErr error
	for raw := jobs.Next(); raw != nil; raw = jobs.Next() {
		job := raw.(*structs.Job)
		if err := s.placeJob(snap, nodes, job); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// placeJob computes and commits one job's plan.
func (s *Server) placeJob(snap *state.StateSnapshot, nodes []*structs.Node, job *structs.Job) error {
	existing, err := snap.AllocsByJob(nil, job.Namespace, job.ID)
	if err != nil {
		return err
	}
	plan, err := scheduler.Place(snap, nodes, job, existing, structs.NowNano(), newAllocID)
	if err != nil {
		return structs.Wrap(err, "placing job %q", job.ID)
	}
	if plan == nil {
		return nil
	}
	plan.Namespace, plan.JobID, plan.JobModifyIndex = job.Namespace, job.ID, job.JobModifyIndex
	plan.Timestamp = structs.NowNano()
	if _, _, err := s.raftApply(structs.PlanApplyRequestType, plan); err != nil {
		// A plan for an older job version is refused; the registration that
		// made it stale has woken the loop already.
		if structs.CodeOf(err) == structs.ErrCodeConflict {
			return nil
		}
		return structs.Wrap(err, "applying the plan of job %q", job.ID)
	}
	return nil
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
