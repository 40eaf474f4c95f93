package allocrunner

import (
	"cmp"
	"context"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// Manager runs the allocations placed on this node: it learns them
// with a blocking query (Node.GetClientAllocs), runs one allocRunner per
// allocation, keeps their state in the state file, and forgets an
// allocation some time after it ended, the servers know it, and the
// servers released its volumes from this node (NodeDetachVolume).
//
// The manager does not release a volume on its own: releases are the
// servers' (the volumewatcher drives them through ClientCSI.NodeDetachVolume),
// and the manager refuses them while an allocation still runs (CheckDetach).
// The one exception is a release the servers finished without the node step
// (the node was down): the client's orphan sweep undoes that use once the
// servers hold no claim of the allocation any more.
type Manager struct {
	cfg    Config
	logger hclog.Logger
	state  *state.DB
	rep    *allocReporter
	// shimExe supervises tasks (see the execdriver package); "" when unknown.
	shimExe string

	// reconciled counts the answers of the allocation query acted upon.
	reconciled atomic.Uint64

	mu      sync.Mutex
	runners map[string]*allocRunner
	// orphans are records left of allocations whose own record was lost
	// (a damaged state file): a runner built for the allocation later
	// takes them over, so a published volume is not published again.
	orphans map[string]*state.AllocBundle
	// draining is set once the agent stops every allocation before it
	// exits (DrainAllocations): no allocation is started after that.
	draining bool
}

// New builds the runners of the allocations the state file held
// (cfg.Restored); Start sets them going.
func New(cfg Config) *Manager {
	logger := cfg.Logger.Named("allocs")
	m := &Manager{
		cfg: cfg, logger: logger, state: cfg.State,
		runners: map[string]*allocRunner{}, orphans: map[string]*state.AllocBundle{},
	}
	m.rep = newAllocReporter(&m.cfg, logger.Named("alloc-reporter"), m.acked)
	var err error
	if m.shimExe, err = os.Executable(); err != nil {
		logger.Error("cannot find the agent's own executable: tasks cannot be started", "error", err)
	}
	for id, b := range cfg.Restored {
		if b.Alloc == nil {
			m.orphans[id] = b
			continue
		}
		m.runners[id] = newAllocRunner(m, b.Alloc, b.Volumes, b.Tasks)
	}
	if len(cfg.Restored) > 0 {
		logger.Info("restored allocations from the client state file", "allocs", len(m.runners), "orphaned_records", len(m.orphans))
	}
	return m
}

// Start runs the allocation query loop, the reporter and the restored
// runners, until ctx ends.
func (m *Manager) Start(ctx context.Context) {
	// The restored runners are started before the query loop, which adds
	// and starts runners of its own: one it added would otherwise be
	// taken for a restored one and run twice, starting its tasks twice.
	m.mu.Lock()
	restored := slices.Collect(maps.Values(m.runners))
	m.mu.Unlock()
	for _, r := range restored {
		m.cfg.GoFunc(func() { r.run(ctx) })
	}
	m.cfg.GoFunc(func() { m.rep.run(ctx) })
	m.cfg.GoFunc(func() { m.watch(ctx) })
}

// changed tells the client that allocations were learned or ended.
func (m *Manager) changed() {
	if m.cfg.AllocsChanged != nil {
		m.cfg.AllocsChanged()
	}
}

// watch asks the servers for the node's allocations, blocking until they
// change, and reconciles the runners with each answer. It starts once the
// node is registered (the query is authenticated by the node's secret) and
// retries with backoff while no server answers.
func (m *Manager) watch(ctx context.Context) {
	select {
	case <-m.cfg.Registered:
	case <-ctx.Done():
		return
	}
	var index uint64
	retry := m.cfg.ServerRetryMin
	var lastErr string
	for ctx.Err() == nil {
		args := &structs.NodeClientAllocsRequest{NodeID: m.cfg.NodeID, SecretID: m.cfg.SecretID}
		args.MinQueryIndex = index
		args.MaxQueryTime = m.cfg.AllocWatchWait
		// The server the client talks to answers from its own state rather
		// than forwarding to the leader: every client's long poll would
		// otherwise sit on the leader, and a follower answers even while
		// the cluster has no leader. Its state may lag by a moment, which
		// the next answer makes up.
		args.AllowStale = true
		var reply structs.NodeClientAllocsResponse
		err := m.cfg.Servers.NodeGetClientAllocs(args, &reply)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if err.Error() != lastErr {
				m.logger.Warn("querying the node's allocations failed; retrying", "error", err)
				lastErr = err.Error()
			}
			if !pause(ctx, retry) {
				return
			}
			retry = min(retry*2, m.cfg.ServerRetryMax)
			continue
		}
		retry, lastErr = m.cfg.ServerRetryMin, ""
		// An index that went back means the servers' state was rebuilt:
		// start over rather than wait for it to pass the old one.
		index = max(reply.Index, 1)
		m.reconcile(ctx, &reply)
	}
}

// reconcile starts a runner for each new allocation the servers want run
// here, and stops the runners of allocations they want stopped or no
// longer list (in an answer recent enough to list them).
func (m *Manager) reconcile(ctx context.Context, reply *structs.NodeClientAllocsResponse) {
	listed := map[string]bool{}
	var start []*allocRunner
	// Stops are applied once the lock is released: each writes the state
	// file.
	stops := map[*allocRunner]string{}
	var gone []*allocRunner
	m.mu.Lock()
	for _, a := range reply.Allocs {
		if a == nil || a.NodeID != m.cfg.NodeID {
			continue
		}
		listed[a.ID] = true
		if r := m.runners[a.ID]; r != nil {
			switch {
			case a.ServerTerminal():
				stops[r] = stopDescription(a)
			case a.ClientStatus == structs.AllocClientStatusLost:
				// The node was down long enough for the servers to give
				// its allocations up and release their claims: the tasks
				// must not go on using volumes detached from the node.
				stops[r] = "the servers marked the allocation lost (" + a.ClientDescription + ")"
			}
			continue
		}
		if m.draining {
			// Left pending: the agent is on its way out.
			continue
		}
		if a.Terminal() {
			if !a.ClientTerminal() {
				// Stopped before it ever ran here: it is done as far
				// as this node goes, which only this node can say.
				m.rep.update(&structs.AllocClientUpdate{
					ID: a.ID, ClientStatus: structs.AllocClientStatusComplete,
					ClientDescription: "stopped before it started on this node",
				})
			}
			// Otherwise it ended before, and was forgotten since.
			continue
		}
		var group *structs.TaskGroup
		if job := reply.Jobs[structs.JobKey(a.Namespace, a.JobID)]; job != nil {
			if job.Version != a.JobVersion {
				m.logger.Warn("allocation runs another version of its job than the servers have; running the servers' version",
					"alloc_id", a.ID, "alloc_job_version", a.JobVersion, "job_version", job.Version)
			}
			group = job.LookupTaskGroup(a.TaskGroup).Copy()
		}
		rec := &state.AllocRecord{
			ID: a.ID, Namespace: a.Namespace, Name: a.Name, JobID: a.JobID, TaskGroup: a.TaskGroup,
			JobVersion: a.JobVersion, Group: group, CreateIndex: a.CreateIndex, ClientStatus: structs.AllocClientStatusPending,
		}
		var vols map[string]*state.VolumeRecord
		var tasks map[string]*state.TaskRecord
		if o := m.orphans[a.ID]; o != nil {
			vols, tasks = o.Volumes, o.Tasks
			delete(m.orphans, a.ID)
		}
		r := newAllocRunner(m, rec, vols, tasks)
		m.runners[a.ID] = r
		start = append(start, r)
	}
	for id, r := range m.runners {
		// An answer older than the allocation (a server that lags, since
		// the query reads stale) says nothing about it.
		if !listed[id] && reply.Index >= r.createIndex() {
			gone = append(gone, r)
		}
	}
	m.mu.Unlock()
	for r, why := range stops {
		r.stop(why)
	}
	for _, r := range gone {
		r.forgotten()
	}
	m.collect()
	// The answer is where allocations lost or stopped while the node was
	// away are learned: their volumes may have been released without the
	// node step.
	m.changed()
	if m.reconciled.Add(1) == 1 {
		m.logger.Info(firstAllocsMessage, "allocs", len(listed), "new", len(start))
	}
	for _, r := range start {
		r.logger.Info("starting allocation", "name", r.rec.Name, "job_id", r.rec.JobID, "job_version", r.rec.JobVersion)
		r.persist(true, nil, nil)
		m.cfg.GoFunc(func() { r.run(ctx) })
	}
}

// firstAllocsMessage is logged once the allocations of the node were first
// heard from the servers after the agent started.
const firstAllocsMessage = "node allocations received from the servers"

func stopDescription(a *structs.Allocation) string {
	if a.DesiredDescription != "" {
		return "stopped by the servers: " + a.DesiredDescription
	}
	return "stopped by the servers"
}

func (m *Manager) runner(allocID string) *allocRunner {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runners[allocID]
}

// acked is the reporter telling that the servers accepted an update.
func (m *Manager) acked(u *structs.AllocClientUpdate, gone bool) {
	if r := m.runner(u.ID); r != nil {
		r.acked(u.ClientStatus, gone)
		m.collect()
	}
}

// CheckDetach refuses a release of the allocation's volume while the
// allocation still runs on this node: unpublishing a volume under a running
// task would pull its data away. The error is retryable, so the servers try
// again later.
func (m *Manager) CheckDetach(allocID string) error {
	r := m.runner(allocID)
	if r == nil {
		return nil
	}
	switch r.getPhase() {
	case phaseSetup:
		return structs.NewError(structs.ErrCodeRetryable, "allocation %q is still setting up its volumes on this node", allocID)
	case phaseRunning:
		return structs.NewError(structs.ErrCodeRetryable, "allocation %q still has running tasks", allocID)
	}
	return nil
}

// VolumeDetached forgets an allocation's volume once the servers released
// it from this node, and then the allocation, if nothing else is left.
func (m *Manager) VolumeDetached(allocID, volumeID string) {
	if r := m.runner(allocID); r != nil {
		r.volumeDetached(volumeID)
		m.collect()
		return
	}
	m.mu.Lock()
	o := m.orphans[allocID]
	var aliases []string
	if o != nil {
		for alias, v := range o.Volumes {
			if v.VolumeID == volumeID {
				aliases = append(aliases, alias)
				delete(o.Volumes, alias)
			}
		}
		if len(o.Volumes) == 0 {
			delete(m.orphans, allocID)
		}
	}
	m.mu.Unlock()
	for _, alias := range aliases {
		if err := m.state.DeleteVolume(allocID, alias); err != nil {
			m.logger.Error("forgetting a released volume", "alloc_id", allocID, "volume_id", volumeID, "error", err)
		}
	}
}

// collect forgets finished allocations: those that ended, whose end the
// servers know, and that hold no claimed volume on this node any more. The
// newest FinishedAllocsKept of them are kept, with their task logs, unless
// the servers no longer list them; the others lose their records, their
// runner and their directory.
func (m *Manager) collect() {
	type finished struct {
		r    *allocRunner
		at   int64
		gone bool
	}
	var done []finished
	m.mu.Lock()
	for _, r := range m.runners {
		if ok, at, gone := r.forgettable(); ok {
			done = append(done, finished{r, at, gone})
		}
	}
	slices.SortFunc(done, func(a, b finished) int { return cmp.Compare(b.at, a.at) })
	var drop []*allocRunner
	for i, f := range done {
		if i >= m.cfg.FinishedAllocsKept || f.gone {
			drop = append(drop, f.r)
			delete(m.runners, f.r.id)
		}
	}
	m.mu.Unlock()
	for _, r := range drop {
		if err := m.state.DeleteAlloc(r.id); err != nil {
			m.logger.Error("forgetting an allocation", "alloc_id", r.id, "error", err)
		}
		if err := os.RemoveAll(m.allocDir(r.id)); err != nil {
			m.logger.Warn("removing an allocation's directory", "alloc_id", r.id, "error", err)
		}
		// The allocation's directory of CSI targets, once the plugin
		// removed them; anything left in it stays.
		_ = os.Remove(m.cfg.Paths.AllocDir(r.id))
		r.logger.Debug("finished allocation forgotten")
	}
}

// backoff is the pause before attempt+1 of a claim, stage or publish: from
// ClaimBackoffMin, doubling up to ClaimBackoffMax, less up to a fifth so
// that allocations waiting for the same release do not retry in step.
func (m *Manager) backoff(attempt int) time.Duration {
	lo, hi := m.cfg.ClaimBackoffMin, m.cfg.ClaimBackoffMax
	d := hi
	if attempt < 32 {
		if s := lo << (attempt - 1); s > 0 && s < hi {
			d = s
		}
	}
	return d - rand.N(d/5+1)
}

// pause waits for d, and reports false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
