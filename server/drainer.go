package server

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// drainRetry is how soon the drainer looks again after a pass that failed
// (a write refused while leadership changes hands, say), when nothing
// else wakes it first.
const drainRetry = time.Second

// runDrainer is the leader's node drainer. For every draining node, in
// the order that keeps a node's CSI node plugins until the volumes on the
// node are released:
//
//  1. the allocations of non-system jobs are stopped (desired status stop);
//     the placer replaces them on eligible nodes, as their volumes allow;
//  2. the drainer waits until each of them is done on the node: its client
//     reported it stopped and every claim it held (live or past) was
//     released, through node unpublish (by the node plugin) and controller
//     unpublish, by the volume watcher;
//  3. only then are the allocations of system jobs, the node plugins
//     among them, stopped, unless the drain ignores system jobs; once they
//     ended too (and released any claims of their own), the drain is complete: the strategy is cleared, the node
//     stays ineligible, and LastDrain says complete.
//
// When the drain's deadline passes, whatever is left is stopped at once and
// the drain is complete. Every write goes through Raft, stamped with the
// leader's clock; a new leader resumes from the state where the old one
// stopped, since each step is decided from the state alone.
func (s *Server) runDrainer(done <-chan struct{}) {
	ctx, cancel := s.leaderContext(done)
	defer cancel()
	logger := s.logger.Named("drainer")
	for {
		st := s.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		if _, err := st.IndexWatch(ws, state.TableNodes, state.TableAllocs, state.TableCSIVolumes, state.TableJobs); err != nil {
			logger.Error("watching state", "error", err)
		}
		next, err := s.drainPass(st, logger)
		if err != nil {
			logger.Warn("drain pass failed; retrying", "error", err, "retry_in", drainRetry)
			if retry := time.Now().Add(drainRetry).UnixNano(); next == 0 || retry < next {
				next = retry
			}
		}
		if !waitChangeOrTime(ctx, ws, next) {
			return
		}
		// Let a burst of writes (every claim is one) settle into one pass,
		// as the placer does.
		select {
		case <-ctx.Done():
			return
		case <-time.After(placerSettle):
		}
	}
}

// drainPass takes one step for every draining node and returns the
// earliest force deadline still to come (Unix nanoseconds, 0 for none).
func (s *Server) drainPass(st *state.StateStore, logger hclog.Logger) (int64, error) {
	iter, err := st.Nodes(nil)
	if err != nil {
		return 0, err
	}
	var draining []*structs.Node
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		if n := raw.(*structs.Node); n.Draining() {
			draining = append(draining, n)
		}
	}
	var next int64
	var firstErr error
	for _, n := range draining {
		if err := s.drainNode(st, n, logger); err != nil {
			if firstErr == nil {
				firstErr = structs.Wrap(err, "draining node %q", n.ID)
			}
		}
		d := n.DrainStrategy
		if d.Deadline > 0 && !d.DeadlinePassed(time.Now()) {
			if at := d.ForceDeadline.UnixNano(); next == 0 || at < next {
				next = at
			}
		}
	}
	return next, firstErr
}

// DrainProgress is where a node's drain stands, as the drainer sees it.
type DrainProgress struct {
	// Migrating are the non-system allocations still to stop, or stopped
	// but not done on the node (running, or holding claims).
	Migrating []*structs.Allocation
	// Claims are the volumes on which the allocations above still hold a
	// claim (live or past), by allocation ID.
	Claims map[string][]string
	// System are the allocations of system jobs that still run, are
	// still to stop or still hold claims on the node (empty when the
	// drain ignores system jobs).
	System []*structs.Allocation
}

// drainProgress reads a node's drain progress from the state.
func drainProgress(st *state.StateStore, node *structs.Node) (*DrainProgress, error) {
	allocs, err := st.AllocsByNode(nil, node.ID)
	if err != nil {
		return nil, err
	}
	p := &DrainProgress{Claims: map[string][]string{}}
	ignoreSystem := node.DrainStrategy != nil && node.DrainStrategy.IgnoreSystemJobs
	for _, a := range allocs {
		system, err := allocOfSystemJob(st, a)
		if err != nil {
			return nil, err
		}
		if system && ignoreSystem {
			continue
		}
		claims, err := allocClaims(st, a)
		if err != nil {
			return nil, err
		}
		if len(claims) > 0 {
			p.Claims[a.ID] = claims
		}
		if allocDoneOnNode(a, node) && len(claims) == 0 {
			continue
		}
		if system {
			p.System = append(p.System, a)
		} else {
			p.Migrating = append(p.Migrating, a)
		}
	}
	return p, nil
}

// allocDoneOnNode reports whether nothing of the allocation runs on the
// node any more: the servers stopped it (or it ended) and its client
// reported it ended, or the node is down, when nothing can be asked of it.
func allocDoneOnNode(a *structs.Allocation, node *structs.Node) bool {
	if a.ClientTerminal() {
		return true
	}
	return a.ServerTerminal() && structs.NodeDownOrGone(node)
}

// allocOfSystemJob reports whether the allocation is of a system or
// sysbatch job. An allocation whose job is gone counts as not: it has no
// placement to protect and is drained first.
func allocOfSystemJob(st *state.StateStore, a *structs.Allocation) (bool, error) {
	job, err := st.JobByID(nil, a.Namespace, a.JobID)
	if err != nil {
		return false, err
	}
	return job != nil && job.IsSystem(), nil
}

// allocClaims returns the volumes on which an allocation holds a claim,
// live or past.
func allocClaims(st *state.StateStore, a *structs.Allocation) ([]string, error) {
	vols, err := st.CSIVolumesByClaimAlloc(nil, a.ID)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(vols))
	for _, v := range vols {
		out = append(out, v.ID)
	}
	return out, nil
}

// drainNode takes the next step of one node's drain.
func (s *Server) drainNode(st *state.StateStore, node *structs.Node, logger hclog.Logger) error {
	now := time.Now()
	p, err := drainProgress(st, node)
	if err != nil {
		return err
	}
	if node.DrainStrategy.DeadlinePassed(now) {
		// Force: stop everything left and end the drain, as Nomad does
		// at the deadline; releases go on as for any stop.
		var stop []string
		for _, a := range append(p.Migrating, p.System...) {
			if !a.ServerTerminal() {
				stop = append(stop, a.ID)
			}
		}
		if err := s.drainStop(node.ID, stop, structs.AllocDrainForcedDescription); err != nil {
			return err
		}
		logger.Info("drain deadline reached; remaining allocations stopped", "node_id", node.ID, "stopped", len(stop))
		return s.drainComplete(node, now)
	}
	if migrate := notStopped(p.Migrating); len(migrate) > 0 {
		logger.Info("stopping allocations of a draining node", "node_id", node.ID, "count", len(migrate))
		return s.drainStop(node.ID, migrate, structs.AllocDrainDescription)
	}
	if len(p.Migrating) > 0 {
		// Stopped, but still running on the node or holding claims there:
		// the node plugins must stay until those are released.
		return nil
	}
	if system := notStopped(p.System); len(system) > 0 {
		logger.Info("volumes of the draining node released; stopping its system allocations", "node_id", node.ID, "count", len(system))
		return s.drainStop(node.ID, system, structs.AllocDrainDescription)
	}
	if len(p.System) > 0 {
		return nil
	}
	logger.Info("node drain complete", "node_id", node.ID)
	return s.drainComplete(node, now)
}

// drainStop stops allocations of a draining node through Raft.
func (s *Server) drainStop(nodeID string, allocIDs []string, why string) error {
	if len(allocIDs) == 0 {
		return nil
	}
	_, _, err := s.raftApply(structs.AllocDrainStopRequestType, &structs.AllocDrainStopRequest{
		NodeID: nodeID, AllocIDs: allocIDs, Description: why, Timestamp: time.Now().UnixNano()})
	if structs.CodeOf(err) == structs.ErrCodeConflict {
		// The drain ended meanwhile (an operator cancelled it): the
		// change wakes the next pass.
		return nil
	}
	return err
}

// drainComplete ends a node's drain: no strategy, still ineligible,
// LastDrain complete.
func (s *Server) drainComplete(node *structs.Node, now time.Time) error {
	_, _, err := s.raftApply(structs.NodeUpdateDrainRequestType, &structs.NodeUpdateDrainRequest{
		NodeID: node.ID, Status: structs.DrainStatusComplete, UpdatedAt: now.UTC()})
	return err
}

// notStopped returns the IDs of the allocations the servers have not
// stopped yet.
func notStopped(allocs []*structs.Allocation) []string {
	var out []string
	for _, a := range allocs {
		if !a.ServerTerminal() {
			out = append(out, a.ID)
		}
	}
	return out
}
