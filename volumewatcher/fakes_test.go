package volumewatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// fakeClock is a Clock that moves only when a test advances it. After
// returns a channel that receives once the clock is advanced to or past its
// deadline, so backoff is observed without waiting for it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Until(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: t, ch: ch})
	return ch
}

// AdvanceTo moves the clock to t (never back) and fires every timer due.
func (c *fakeClock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now // buffered, and sent to once
	}
	c.timers = kept
}

func (c *fakeClock) Advance(d time.Duration) { c.AdvanceTo(c.Now().Add(d)) }

// pending returns the deadlines of the timers not fired yet, earliest first.
func (c *fakeClock) pending() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, tm := range c.timers {
		out = append(out, tm.at)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// Plugin call kinds, as the fake backend's failures are scripted by.
const (
	callNode       = "node-detach"
	callController = "controller-detach"
)

// failure makes the next calls of one kind (on one node, or any when node
// is "") fail with err: times of them, or every one when times < 0.
type failure struct {
	node  string
	err   error
	times int
}

// fakeBackend is the watcher's server: a real state store, written at
// increasing indexes (checkpoints apply the claim with CSIVolumeClaim, as
// the FSM does), and plugin calls that are recorded in order and fail as
// told. Node IDs are shown by the labels the test gave the nodes.
type fakeBackend struct {
	store *state.StateStore
	clock *fakeClock
	index atomic.Uint64

	// passes started and finished by the watch loop (a listing of the
	// volumes with past claims, read to its end), and the volume reads a
	// release begins with.
	passesStarted, passesDone, volumeReads atomic.Int64
	// allocReads counts the allocation reads of releases.
	allocReads atomic.Int64

	mu          sync.Mutex
	labels      *strings.Replacer
	labelPairs  []string
	calls       []string
	checkpoints []string
	failures    map[string][]*failure
	// during runs inside a plugin call, after it is recorded and before it
	// returns: a test changes state there "while the plugin works". A call
	// whose context ends meanwhile fails with the context's error.
	during   func(ctx context.Context, kind string)
	nodeReqs []*structs.ClientCSINodeDetachVolumeRequest
	ctrlReqs []*structs.ClientCSIControllerDetachVolumeRequest
	inFlight map[string]int // volume -> plugin calls running
	overlap  []string       // volumes that had two plugin calls at once
	// unreachable are the nodes whose agents no server reaches, with the
	// error of NodeConnected; nodeChecks counts its calls.
	unreachable map[string]error
	nodeChecks  int
}

func newFakeBackend(t *testing.T, clock *fakeClock) *fakeBackend {
	b := &fakeBackend{
		store:    state.TestStateStore(t),
		clock:    clock,
		failures: map[string][]*failure{},
		inFlight: map[string]int{},
		labels:   strings.NewReplacer(),
	}
	b.index.Store(100)
	return b
}

// nextIndex is the Raft index of the next write.
func (b *fakeBackend) nextIndex() uint64 { return b.index.Add(1) }

// label names a node ID by label in everything recorded from now on.
func (b *fakeBackend) label(nodeID, label string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// The provider's node ID first: it contains volplane's.
	b.labelPairs = append(b.labelPairs, "ext-"+nodeID, label, nodeID, label)
	b.labels = strings.NewReplacer(b.labelPairs...)
}

// fail scripts failures of a kind of call.
func (b *fakeBackend) fail(kind, node string, err error, times int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures[kind] = append(b.failures[kind], &failure{node: node, err: err, times: times})
}

// clearFailures makes every later call succeed.
func (b *fakeBackend) clearFailures() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = map[string][]*failure{}
}

func (b *fakeBackend) setDuring(f func(ctx context.Context, kind string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.during = f
}

// takeCalls returns the plugin calls made since the last take.
func (b *fakeBackend) takeCalls() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.calls
	b.calls = nil
	return out
}

// takeCheckpoints returns the checkpoints written since the last take.
func (b *fakeBackend) takeCheckpoints() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.checkpoints
	b.checkpoints = nil
	return out
}

func (b *fakeBackend) overlaps() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.overlap)
}

func (b *fakeBackend) State() State { return countingState{b.store, b} }

// setUnreachable makes NodeConnected fail for node with err, or succeed
// again with a nil err.
func (b *fakeBackend) setUnreachable(node string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unreachable == nil {
		b.unreachable = map[string]error{}
	}
	if err == nil {
		delete(b.unreachable, node)
	} else {
		b.unreachable[node] = err
	}
}

// takeNodeChecks returns the NodeConnected calls since the last take.
func (b *fakeBackend) takeNodeChecks() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.nodeChecks
	b.nodeChecks = 0
	return n
}

func (b *fakeBackend) NodeConnected(ctx context.Context, nodeID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodeChecks++
	return b.unreachable[nodeID]
}

func (b *fakeBackend) NodeDetach(ctx context.Context, req *structs.ClientCSINodeDetachVolumeRequest) error {
	b.mu.Lock()
	b.nodeReqs = append(b.nodeReqs, req)
	b.mu.Unlock()
	return b.call(ctx, callNode, req.VolumeID, req.NodeID, fmt.Sprintf("%s %s on %s", callNode, req.AllocID, req.NodeID))
}

func (b *fakeBackend) ControllerDetach(ctx context.Context, req *structs.ClientCSIControllerDetachVolumeRequest) error {
	b.mu.Lock()
	b.ctrlReqs = append(b.ctrlReqs, req)
	b.mu.Unlock()
	node := strings.TrimPrefix(req.ClientCSINodeID, "ext-")
	return b.call(ctx, callController, req.VolumeID, node, fmt.Sprintf("%s from %s", callController, req.ClientCSINodeID))
}

func (b *fakeBackend) call(ctx context.Context, kind, volume, node, desc string) error {
	b.mu.Lock()
	b.inFlight[volume]++
	if b.inFlight[volume] > 1 {
		b.overlap = append(b.overlap, volume)
	}
	var err error
	for i, f := range b.failures[kind] {
		if f.node != "" && f.node != node {
			continue
		}
		err = f.err
		if f.times > 0 {
			f.times--
			if f.times == 0 {
				b.failures[kind] = slices.Delete(b.failures[kind], i, i+1)
			}
		}
		break
	}
	desc = b.labels.Replace(desc)
	if err != nil {
		desc += " (failed)"
	}
	b.calls = append(b.calls, desc)
	during := b.during
	b.mu.Unlock()

	if during != nil {
		during(ctx, kind)
		if err == nil {
			err = ctx.Err()
		}
	}

	b.mu.Lock()
	b.inFlight[volume]--
	b.mu.Unlock()
	return err
}

// Checkpoint applies the claim to the store as the FSM applies a
// CSIVolumeClaimRequest, at the next index.
// VolumeSecrets: the fake state keeps secrets in clear.
func (b *fakeBackend) VolumeSecrets(vol *structs.CSIVolume) (structs.CSISecrets, error) {
	return vol.Secrets, nil
}

func (b *fakeBackend) Checkpoint(namespace, volumeID string, claim *structs.CSIVolumeClaim, now time.Time) error {
	c := claim.Copy() // what crosses Raft is a copy
	var prev *structs.CSIVolumeClaim
	if v, _ := b.store.CSIVolumeByID(nil, namespace, volumeID); v != nil {
		prev = v.PastClaims[c.AllocationID]
	}
	err := b.store.CSIVolumeClaim(b.nextIndex(), now.UnixNano(), namespace, volumeID, c)
	b.mu.Lock()
	defer b.mu.Unlock()
	desc := fmt.Sprintf("%s %s", c.AllocationID, c.State)
	switch {
	case c.Attempts > 0 && prev != nil && prev.State == c.State && prev.Attempts == c.Attempts:
		// The start of a retry, stamped with the time it may last.
		desc += fmt.Sprintf(" retrying after attempt %d", c.Attempts)
	case c.Attempts > 0:
		desc += fmt.Sprintf(" attempt %d", c.Attempts)
	}
	if c.Note != "" {
		desc += " (" + c.Note + ")"
	}
	if err != nil {
		desc += " failed: " + structs.MessageOf(err)
	}
	b.checkpoints = append(b.checkpoints, b.labels.Replace(desc))
	return err
}

// countingState is the store as the watcher reads it, counting the watch
// loop's passes and the releases begun, so a test knows when the watcher
// has caught up with a write and whether a write woke a volume.
type countingState struct {
	*state.StateStore
	b *fakeBackend
}

func (s countingState) CSIVolumesWithPastClaims(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	s.b.passesStarted.Add(1)
	iter, err := s.StateStore.CSIVolumesWithPastClaims(ws)
	if err != nil {
		s.b.passesDone.Add(1)
		return nil, err
	}
	return &passIter{ResultIterator: iter, done: &s.b.passesDone}, nil
}

func (s countingState) CSIVolumeByID(ws memdb.WatchSet, namespace, id string) (*structs.CSIVolume, error) {
	s.b.volumeReads.Add(1)
	return s.StateStore.CSIVolumeByID(ws, namespace, id)
}

func (s countingState) AllocByID(ws memdb.WatchSet, id string) (*structs.Allocation, error) {
	s.b.allocReads.Add(1)
	return s.StateStore.AllocByID(ws, id)
}

// passIter counts a pass as done when it has been read to its end: by then
// the watch loop has queued every volume the pass found changed.
type passIter struct {
	memdb.ResultIterator
	done     *atomic.Int64
	finished bool
}

func (it *passIter) Next() any {
	raw := it.ResultIterator.Next()
	if raw == nil && !it.finished {
		it.finished = true
		it.done.Add(1)
	}
	return raw
}

// harness is a watcher over a fake backend, with helpers to build the state
// a release starts from and to wait until the watcher has nothing left to
// do before the clock moves.
type harness struct {
	t       *testing.T
	clock   *fakeClock
	backend *fakeBackend
	store   *state.StateStore
	nodes   map[string]*structs.Node // by label
	vol     *structs.CSIVolume
	hooks   struct {
		sync.Mutex
		attempts, failures []string
	}

	// mark is a time a step keeps for a later one.
	mark time.Time

	w      *Watcher
	cancel context.CancelFunc
	done   chan struct{}
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	clock := newFakeClock()
	b := newFakeBackend(t, clock)
	return &harness{t: t, clock: clock, backend: b, store: b.store, nodes: map[string]*structs.Node{}}
}

func (h *harness) now() int64 { return h.clock.Now().UnixNano() }

// addNode registers a node under a label.
func (h *harness) addNode(label string, n *structs.Node) *structs.Node {
	h.t.Helper()
	h.backend.label(n.ID, label)
	must.NoError(h.t, h.store.UpsertNode(h.backend.nextIndex(), n))
	h.nodes[label] = n
	return n
}

// addVolume registers a volume of plugin "dev".
func (h *harness) addVolume() *structs.CSIVolume {
	h.t.Helper()
	v := mock.CSIVolume("dev")
	must.NoError(h.t, h.store.UpsertCSIVolume(h.backend.nextIndex(), []*structs.CSIVolume{v}))
	h.vol = v
	return v
}

// claim places a running allocation on a node and has it claim the volume.
func (h *harness) claim(allocID, node string, mode structs.CSIVolumeClaimMode, access structs.CSIVolumeAccessMode) {
	h.t.Helper()
	n := h.nodes[node]
	must.NotNil(h.t, n, must.Sprintf("no node labelled %q", node))
	must.NoError(h.t, h.store.UpsertAllocs(h.backend.nextIndex(), []*structs.Allocation{{
		ID: allocID, Namespace: structs.DefaultNamespace, Name: "web.g[0]", JobID: "web", TaskGroup: "g",
		NodeID: n.ID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning,
	}}))
	must.NoError(h.t, h.store.CSIVolumeClaim(h.backend.nextIndex(), h.now(), structs.DefaultNamespace, h.vol.ID,
		&structs.CSIVolumeClaim{
			AllocationID: allocID, NodeID: n.ID, ExternalNodeID: "ext-" + n.ID, Mode: mode, AccessMode: access,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem, ReadOnly: mode == structs.CSIVolumeClaimRead,
			PublishContext: map[string]string{"device": "/dev/" + allocID},
		}))
}

// writer and reader are the claims most rows use.
func (h *harness) writer(allocID, node string) {
	h.t.Helper()
	h.claim(allocID, node, structs.CSIVolumeClaimWrite, structs.CSIVolumeAccessModeSingleNodeWriter)
}

func (h *harness) reader(allocID, node string) {
	h.t.Helper()
	h.claim(allocID, node, structs.CSIVolumeClaimRead, structs.CSIVolumeAccessModeMultiNodeReader)
}

// complete reports allocations complete, in one write, which turns their
// claims into past claims.
func (h *harness) complete(allocIDs ...string) {
	h.t.Helper()
	h.updateAllocs(allocIDs, func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusComplete })
}

// stopAllocs has the servers stop allocations (a job stop) while their
// client still runs them: their claims wait for the client.
func (h *harness) stopAllocs(allocIDs ...string) {
	h.t.Helper()
	h.updateAllocs(allocIDs, func(a *structs.Allocation) { a.DesiredStatus = structs.AllocDesiredStatusStop })
}

func (h *harness) updateAllocs(allocIDs []string, change func(*structs.Allocation)) {
	h.t.Helper()
	var allocs []*structs.Allocation
	for _, id := range allocIDs {
		a, err := h.store.AllocByID(nil, id)
		must.NoError(h.t, err)
		must.NotNil(h.t, a)
		c := a.Copy()
		change(c)
		c.ModifyTime = h.now()
		allocs = append(allocs, c)
	}
	must.NoError(h.t, h.store.UpsertAllocs(h.backend.nextIndex(), allocs))
}

// nodeDown marks a node down beyond its grace period: its allocations are
// lost and their claims released.
func (h *harness) nodeDown(label string) {
	h.t.Helper()
	must.NoError(h.t, h.store.UpdateNodeStatus(h.backend.nextIndex(), &structs.NodeUpdateStatusRequest{
		NodeID: h.nodes[label].ID, Status: structs.NodeStatusDown, UpdatedAt: h.now(),
	}))
}

func (h *harness) deleteNode(label string) {
	h.t.Helper()
	must.NoError(h.t, h.store.DeleteNode(h.backend.nextIndex(), []string{h.nodes[label].ID}))
}

func (h *harness) key() string { return key(h.vol.Namespace, h.vol.ID) }

// volume is the stored volume, nil once deregistered.
func (h *harness) volume() *structs.CSIVolume {
	h.t.Helper()
	v, err := h.store.CSIVolumeByID(nil, h.vol.Namespace, h.vol.ID)
	must.NoError(h.t, err)
	return v
}

// past is the allocation's claim being released, nil when there is none.
func (h *harness) past(allocID string) *structs.CSIVolumeClaim {
	h.t.Helper()
	v := h.volume()
	must.NotNil(h.t, v)
	return v.PastClaims[allocID]
}

// nextAttempt is when the allocation's failed release is tried again.
func (h *harness) nextAttempt(allocID string) time.Time {
	h.t.Helper()
	c := h.past(allocID)
	must.NotNil(h.t, c, must.Sprintf("allocation %q has no claim being released", allocID))
	must.Positive(h.t, c.NextAttempt, must.Sprintf("allocation %q is not backing off", allocID))
	return time.Unix(0, c.NextAttempt)
}

// mustFreed checks that the allocation holds nothing on the volume any more.
func (h *harness) mustFreed(allocID string) {
	h.t.Helper()
	v := h.volume()
	must.NotNil(h.t, v)
	must.MapNotContainsKey(h.t, v.PastClaims, allocID)
	must.MapNotContainsKey(h.t, v.ReadClaims, allocID)
	must.MapNotContainsKey(h.t, v.WriteClaims, allocID)
}

// mustBackoff checks a failed release: where the claim stopped, how many
// attempts failed, the error it names, and a next attempt delay after the
// failure (the clock does not move while the watcher works) within the 20%
// jitter of the expected delay. The volume waits in the queue until then.
func (h *harness) mustBackoff(allocID string, state structs.CSIVolumeClaimState, attempts int, delay time.Duration, lastErr string) {
	h.t.Helper()
	c := h.past(allocID)
	must.NotNil(h.t, c, must.Sprintf("allocation %q has no claim being released", allocID))
	must.Eq(h.t, state, c.State)
	must.Eq(h.t, attempts, c.Attempts)
	must.Eq(h.t, lastErr, c.LastError)
	wait := time.Unix(0, c.NextAttempt).Sub(h.clock.Now())
	must.Between(h.t, delay-delay/5, wait, delay+delay/5)
	if h.cancel != nil {
		at, ok := h.queued(h.key())
		must.True(h.t, ok, must.Sprint("the volume waits in the queue"))
		must.LessEq(h.t, c.NextAttempt, at.UnixNano(), must.Sprint("the queue hands the volume out no later than its next attempt"))
	}
}

// start runs a new Watcher (a new leader) until the test ends.
func (h *harness) start() {
	h.t.Helper()
	h.w = New(Config{
		Backend: h.backend, Clock: h.clock, Workers: 4,
		Hooks: Hooks{
			Attempt: func(step string) { h.hooks.Lock(); h.hooks.attempts = append(h.hooks.attempts, step); h.hooks.Unlock() },
			Failure: func(step string) { h.hooks.Lock(); h.hooks.failures = append(h.hooks.failures, step); h.hooks.Unlock() },
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	w, done := h.w, h.done
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	h.t.Cleanup(h.stop)
}

// stop cancels Run (leadership lost) and waits for it to return.
func (h *harness) stop() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return after its context was cancelled")
	}
	h.cancel = nil
}

// queued returns when the key will be handed out, if it waits in the queue.
func (h *harness) queued(k string) (time.Time, bool) {
	h.w.mu.Lock()
	q := h.w.queue
	h.w.mu.Unlock()
	if q == nil {
		return time.Time{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	at, ok := q.ready[k]
	return at, ok
}

// settle waits until the watcher has nothing to do before the clock moves:
// the watch loop has seen every volume's past claims as they are now, no
// volume is being processed, and every volume with past claims waits in
// the queue for its earliest next attempt, which is in the future. Only
// then can a test say that a call did not happen.
func (h *harness) settle() {
	h.t.Helper()
	testutil.WaitForResult(h.t, 10*time.Second, h.idle)
}

// settleAfter waits for a watch pass that started after the watcher had
// seen passes passes, then settles: for a write that must not change what
// the watcher does, so there is nothing else to wait for.
func (h *harness) settleAfter(passes int64) {
	h.t.Helper()
	testutil.WaitForResult(h.t, 10*time.Second, func() (bool, error) {
		if h.backend.passesStarted.Load() <= passes {
			return false, errors.New("the watch loop has not woken")
		}
		return true, nil
	})
	h.settle()
}

func (h *harness) idle() (bool, error) {
	if h.backend.passesStarted.Load() == 0 || h.backend.passesStarted.Load() != h.backend.passesDone.Load() {
		return false, errors.New("a watch pass is under way")
	}
	h.w.mu.Lock()
	q, seen := h.w.queue, maps.Clone(h.w.seen)
	h.w.mu.Unlock()
	if q == nil {
		return false, errors.New("the watcher is not running")
	}
	want := map[string]time.Time{}
	iter, err := h.store.CSIVolumesWithPastClaims(nil)
	if err != nil {
		return false, err
	}
	now := h.clock.Now()
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		v := raw.(*structs.CSIVolume)
		k := key(v.Namespace, v.ID)
		if seen[k].sig != signature(v) {
			return false, fmt.Errorf("the watch loop has not seen the past claims of %s yet", k)
		}
		var next time.Time
		for id, c := range v.PastClaims {
			if c.State == structs.CSIVolumeClaimStateWaitingForClient {
				// Left alone until the client's report moves it on.
				continue
			}
			if c.NextAttempt == 0 && c.Note == nodeNote(c.NodeID) {
				// Parked on its node's gate, which waits in the queue.
				h.w.gmu.Lock()
				g := h.w.gates[c.NodeID]
				parked := g != nil && g.err != nil && g.parked[k]
				h.w.gmu.Unlock()
				if !parked {
					return false, fmt.Errorf("the claim of %s on %s waits for its node but is not parked on its gate", id, k)
				}
				continue
			}
			due := time.Unix(0, c.NextAttempt)
			if c.NextAttempt == 0 || !due.After(now) {
				return false, fmt.Errorf("the claim of %s on %s is due", id, k)
			}
			next = earliest(next, due)
		}
		want[k] = next
	}
	if len(seen) != len(want) {
		return false, fmt.Errorf("the watch loop knows %d volumes, the state has %d", len(seen), len(want))
	}
	if err := h.gatesIdle(q); err != nil {
		return false, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.processing) > 0 || len(q.dirty) > 0 {
		return false, fmt.Errorf("volumes being processed: %v", slices.Sorted(maps.Keys(q.processing)))
	}
	for k, at := range q.ready {
		if !at.After(now) {
			return false, fmt.Errorf("volume %s is due", k)
		}
	}

	for k, next := range want {
		at, ok := q.ready[k]
		if next.IsZero() {
			// Only claims waiting for their client: nothing to schedule.
			if ok {
				return false, fmt.Errorf("volume %s waits for its clients only, and is queued at %s", k, at)
			}
			continue
		}
		if !ok || at.After(next) {
			return false, fmt.Errorf("volume %s is not queued for %s (queued: %v at %s)", k, next, ok, at)
		}
	}
	return true, nil
}

// gatesIdle checks that no node is being checked and that every closed
// gate waits in the queue. The queue's lock is not held with the gates'
// (the watcher takes it while holding theirs).
func (h *harness) gatesIdle(q *queue) error {
	q.mu.Lock()
	ready := maps.Clone(q.ready)
	q.mu.Unlock()
	h.w.gmu.Lock()
	defer h.w.gmu.Unlock()
	for nodeID, g := range h.w.gates {
		if g.checking != nil {
			return fmt.Errorf("node %s is being checked", nodeID)
		}
		if _, ok := ready[gateKey(nodeID)]; !ok && g.err != nil {
			return fmt.Errorf("the gate of node %s is not queued", nodeID)
		}
	}
	return nil
}
