package server

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// The garbage collection of nodes and plugins, as Nomad's node GC: a node
// down for longer than node_gc_threshold is removed with its plugin
// instances, once no claim on it is left (its release, which skips a down
// node's step, must be done first); a plugin row that no node runs and no
// volume names is removed. The leader runs it whenever a down node becomes
// due or something it waits for changes; `volplane system gc` (PUT
// /v1/system/gc) runs it at once, for every down node whatever its age.

// gcMinInterval spaces the leader's GC passes: a pass is woken by every
// volume write while a down node waits for its claims, and one pass a
// second is plenty for a collection measured in hours.
const gcMinInterval = time.Second

// runGC collects garbage while this server leads.
func (s *Server) runGC(done <-chan struct{}) {
	ctx, cancel := s.leaderContext(done)
	defer cancel()
	for {
		start := time.Now()
		res, next, err := s.collectGarbage(ctx, false)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.logger.Warn("garbage collection failed; will try again", "error", err)
		case len(res.Nodes)+len(res.Plugins) > 0:
			s.logger.Info("garbage collected", "nodes", res.Nodes, "plugins", res.Plugins)
		}
		// Wait for the next node to become due, a node to change, or,
		// while nodes wait for their claims, a volume to change.
		st := s.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		tables := []string{state.TableNodes, state.TableCSIPlugins}
		if res != nil && len(res.Waiting) > 0 {
			tables = append(tables, state.TableCSIVolumes)
		}
		if _, werr := st.IndexWatch(ws, tables...); werr != nil {
			s.logger.Warn("watching the state for the garbage collection", "error", werr)
		}
		wait := ctx
		if err != nil {
			next = time.Now().Add(s.config.NodeGracePeriod)
		}
		if !next.IsZero() {
			var cancelWait context.CancelFunc
			wait, cancelWait = context.WithDeadline(ctx, next)
			_ = ws.WatchCtx(wait)
			cancelWait()
		} else {
			_ = ws.WatchCtx(wait)
		}
		if !sleepCtx(ctx, gcMinInterval-time.Since(start)) {
			return
		}
	}
}

// collectGarbage removes the down nodes that are due and the plugins that
// are empty and unused, and returns what it removed, the nodes it had to
// keep because of their claims, and when the next down node becomes due
// (zero when none waits). With force, every down node is due, whatever
// node_gc_threshold says, as Nomad's forced GC.
func (s *Server) collectGarbage(ctx context.Context, force bool) (*structs.GCResponse, time.Time, error) {
	res := &structs.GCResponse{}
	threshold := s.config.NodeGCThreshold
	if force {
		threshold = 0
	}
	now := time.Now()
	st := s.State()
	iter, err := st.Nodes(nil)
	if err != nil {
		return res, time.Time{}, err
	}
	var due []string
	var next time.Time
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		n := raw.(*structs.Node)
		if n.Status != structs.NodeStatusDown {
			continue
		}
		if at := time.Unix(0, n.StatusUpdatedAt).Add(threshold); at.After(now) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if err := st.CheckNodeGC(n.ID, threshold, now.UnixNano()); err != nil {
			res.Waiting = append(res.Waiting, structs.MessageOf(err))
			continue
		}
		due = append(due, n.ID)
	}
	if len(due) > 0 {
		if err := s.gcNodes(ctx, res, due, threshold, now); err != nil {
			return res, next, err
		}
	}
	plugins, err := s.State().GCPluginCandidates()
	if err != nil {
		return res, next, err
	}
	if len(plugins) > 0 {
		_, index, err := s.raftApply(structs.CSIPluginGCRequestType, &structs.CSIPluginGCRequest{PluginIDs: plugins})
		if err != nil {
			return res, next, structs.Wrap(err, "collecting plugins %v", plugins)
		}
		res.Plugins, res.Index = plugins, index
	}
	return res, next, nil
}

// gcNodes removes nodes in one entry; when the FSM refuses it (a node came
// back, was claimed or was removed since it was checked), each node is
// tried alone, so one node does not keep the others.
func (s *Server) gcNodes(ctx context.Context, res *structs.GCResponse, ids []string, threshold time.Duration, now time.Time) error {
	apply := func(ids []string) error {
		_, index, err := s.raftApply(structs.NodeGCRequestType, &structs.NodeGCRequest{
			NodeIDs: ids, Threshold: threshold, Timestamp: now.UnixNano()})
		if err != nil {
			return err
		}
		res.Nodes, res.Index = append(res.Nodes, ids...), index
		for _, id := range ids {
			s.heartbeats.forget(id)
		}
		return nil
	}
	// Refused because a node changed in between: back, claimed, or
	// collected by a run of `system gc` at the same time.
	changed := func(err error) bool {
		code := structs.CodeOf(err)
		return code == structs.ErrCodeConflict || code == structs.ErrCodeNotFound
	}
	err := apply(ids)
	if err == nil || !changed(err) {
		return err
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err := apply([]string{id})
		switch {
		case err == nil:
		case structs.CodeOf(err) == structs.ErrCodeConflict:
			res.Waiting = append(res.Waiting, structs.MessageOf(err))
		case structs.CodeOf(err) != structs.ErrCodeNotFound:
			return err
		}
	}
	return nil
}

// sleepCtx waits d (nothing when d <= 0), and reports false when ctx ends
// first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// System holds the operator's cluster-wide maintenance calls.
type System struct {
	srv *Server
}

// GarbageCollect runs the garbage collection now, on the leader: every
// node that is down (whatever node_gc_threshold says) and has no claim
// left is removed, and every plugin that no node runs and no volume names.
func (e *System) GarbageCollect(args *structs.GCRequest, reply *structs.GCResponse) error {
	if done, err := e.srv.forward("System.GarbageCollect", args, args, reply); done {
		return err
	}
	res, _, err := e.srv.collectGarbage(e.srv.shutdownCtx, true)
	if res != nil {
		*reply = *res
		slices.Sort(reply.Nodes)
	}
	return err
}

// gcAfter is when the node GC removes n, zero for a node that is not down.
func (s *Server) gcAfter(n *structs.Node) time.Time {
	return n.DueForGC(s.config.NodeGCThreshold)
}
