// Package volumewatcher is the leader's release of volume claims. When an
// allocation ends, its claims become past claims; the watcher takes each
// through node-detach, then controller-detach, then frees it, with a Raft
// checkpoint after every step so a new leader resumes where the old one
// stopped. It is a keyed, rate-limited work queue with a few workers: no
// goroutine per volume, one operation at a time per volume, failed steps
// retried with exponential backoff and jitter.
package volumewatcher

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// State is what the watcher reads.
type State interface {
	CSIVolumesWithPastClaims(ws memdb.WatchSet) (memdb.ResultIterator, error)
	CSIVolumeByID(ws memdb.WatchSet, namespace, id string) (*structs.CSIVolume, error)
	CSIPluginByID(ws memdb.WatchSet, id string) (*structs.CSIPlugin, error)
	NodeByID(ws memdb.WatchSet, id string) (*structs.Node, error)
	AllocByID(ws memdb.WatchSet, id string) (*structs.Allocation, error)
	AbandonCh() <-chan struct{}
}

// Backend is the watcher's view of the server it runs in.
type Backend interface {
	// State is the current state store (a restore replaces it).
	State() State
	// NodeConnected says, cheaply and without calling the agent, whether
	// some server holds a connection with the node's agent: nil if so,
	// otherwise why not (the error a node call would fail with).
	NodeConnected(ctx context.Context, nodeID string) error
	// NodeDetach runs ClientCSI.NodeDetachVolume on the claim's node,
	// within ctx.
	NodeDetach(ctx context.Context, req *structs.ClientCSINodeDetachVolumeRequest) error
	// ControllerDetach runs ClientCSI.ControllerDetachVolume on a
	// controller, within ctx.
	ControllerDetach(ctx context.Context, req *structs.ClientCSIControllerDetachVolumeRequest) error
	// Checkpoint writes a claim's release state through Raft.
	Checkpoint(namespace, volumeID string, claim *structs.CSIVolumeClaim, now time.Time) error
	// VolumeSecrets opens the volume's secrets (the state keeps them
	// sealed) for the controller call.
	VolumeSecrets(vol *structs.CSIVolume) (structs.CSISecrets, error)
}

// Hooks are told of release steps, for metrics.
type Hooks struct {
	Attempt func(step string)
	Failure func(step string)
}

// Config configures a Watcher; zero values get production defaults.
type Config struct {
	Backend Backend
	Logger  hclog.Logger
	Clock   Clock
	// Workers is how many volumes are released at once (DefaultWorkers).
	Workers int
	// MaxCallsPerClient bounds the release calls in flight to one client
	// agent (DefaultMaxCallsPerClient).
	MaxCallsPerClient int
	// BaseDelay and MaxDelay bound the backoff of a failing step.
	BaseDelay, MaxDelay time.Duration
	// StepTimeout bounds one step's call to a client agent (real time):
	// a hung plugin call fails the step then, and the agent ends it.
	StepTimeout time.Duration
	// Settle is how long the watch waits after a change before rescanning,
	// so bursts cost one rescan (real time, not the injected clock).
	Settle time.Duration
	Hooks  Hooks
}

// DefaultStepTimeout is the deadline of one release step's call: long
// enough for a plugin to unmount, short enough that a hung call holds the
// claim for a fraction of the backoff cap.
const DefaultStepTimeout = 30 * time.Second

// Watcher releases past claims. Run it on the leader only.
type Watcher struct {
	cfg    Config
	logger hclog.Logger
	clock  Clock

	// locks is the one lock table for operations on a volume (see Lock).
	locks *volumeLocks
	// clients bounds the release calls in flight per client agent.
	clients *clientLimits

	mu    sync.Mutex
	queue *queue
	seen  map[string]seenVolume // key -> the volume as the watch last saw it

	// gmu guards gates: the nodes whose agents cannot be reached, by
	// node ID, with the volumes waiting for them (see nodeGate).
	gmu   sync.Mutex
	gates map[string]*nodeGate
}

// New returns a Watcher.
func New(cfg Config) *Watcher {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.MaxCallsPerClient <= 0 {
		cfg.MaxCallsPerClient = DefaultMaxCallsPerClient
	}
	if cfg.BaseDelay <= 0 {
		cfg.BaseDelay = time.Second
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 5 * time.Minute
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	return &Watcher{cfg: cfg, logger: cfg.Logger.Named("volumewatcher"), clock: cfg.Clock, locks: newVolumeLocks(),
		clients: newClientLimits(cfg.MaxCallsPerClient), gates: map[string]*nodeGate{}}
}

// Run releases claims until ctx ends (leadership lost or shutdown), then
// waits for its workers. It first sweeps every volume with past claims,
// so a new leader picks up what the old one left.
func (w *Watcher) Run(ctx context.Context) {
	q := newQueue(w.clock)
	w.mu.Lock()
	w.queue, w.seen = q, map[string]seenVolume{}
	w.mu.Unlock()
	w.gmu.Lock()
	w.gates = map[string]*nodeGate{}
	w.gmu.Unlock()
	defer func() {
		q.Close()
		w.mu.Lock()
		w.queue = nil
		w.mu.Unlock()
	}()

	var wg sync.WaitGroup
	for i := 0; i < w.cfg.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.work(ctx, q)
		}()
	}
	w.logger.Debug("enabled")
	w.watch(ctx, q)
	q.Close()
	wg.Wait()
	w.logger.Debug("disabled")
}

// currentQueue is the running watcher's queue, nil when it is not running.
func (w *Watcher) currentQueue() *queue {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queue
}

// QueueDepth is how many volumes wait for or are in a release.
func (w *Watcher) QueueDepth() int {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q == nil {
		return 0
	}
	return q.Len()
}

// watch enqueues volumes whose past claims appeared or moved. A write that
// only touched a claim's bookkeeping (attempts, last error, next attempt)
// does not change the signature, so it neither wakes a volume early nor
// resets its backoff.
func (w *Watcher) watch(ctx context.Context, q *queue) {
	for {
		st := w.cfg.Backend.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		iter, err := st.CSIVolumesWithPastClaims(ws)
		if err != nil {
			w.logger.Error("listing volumes with past claims", "error", err)
		} else {
			current := map[string]bool{}
			for raw := iter.Next(); raw != nil; raw = iter.Next() {
				v := raw.(*structs.CSIVolume)
				k := key(v.Namespace, v.ID)
				current[k] = true
				w.mu.Lock()
				prev, known := w.seen[k]
				w.mu.Unlock()
				if known && prev.vol == v {
					// The same stored object: not written since.
					continue
				}
				sig := signature(v)
				changed := !known || prev.sig != sig
				w.mu.Lock()
				w.seen[k] = seenVolume{vol: v, sig: sig}
				w.mu.Unlock()
				if changed {
					q.Add(k)
				}
			}
			w.mu.Lock()
			for k := range w.seen {
				if !current[k] {
					delete(w.seen, k)
				}
			}
			w.mu.Unlock()
			w.wakeGatesOnNodeWrites(st, ws, q)
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return
		}
		// Let a burst of writes (a thousand claims released at once, or
		// their failure checkpoints) settle into one rescan.
		if w.cfg.Settle > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(w.cfg.Settle):
			}
		}
	}
}

func (w *Watcher) work(ctx context.Context, q *queue) {
	for {
		k, ok := q.Get()
		if !ok {
			return
		}
		if nodeID, isGate := gateNode(k); isGate {
			w.recheckNode(ctx, nodeID)
			q.Done(k)
			continue
		}
		if !w.locks.tryLock(k) {
			// Another operation on the volume is in flight (a claim's
			// publish, an operator's detach): its unlock hands the volume
			// back to the queue.
			q.Done(k)
			continue
		}
		res := w.process(ctx, k, "", false)
		w.unlock(k)
		if res.err != nil && ctx.Err() == nil {
			w.logger.Debug("release step failed; retrying later", "volume", k, "error", res.err)
		}
		if !res.next.IsZero() {
			q.AddAt(k, res.next)
		}
		for _, nodeID := range res.parked {
			w.park(nodeID, k, q)
		}
		q.Done(k)
	}
}

// seenVolume is a volume with past claims as the watch last saw it: the
// state's object (stored objects are never changed in place, so the same
// pointer is the same volume, whose signature need not be computed again
// at every pass) and the signature of its past claims.
type seenVolume struct {
	vol *structs.CSIVolume
	sig string
}

func key(namespace, id string) string { return namespace + "/" + id }

func splitKey(k string) (string, string) {
	ns, id, _ := strings.Cut(k, "/")
	return ns, id
}

// signature names a volume's past claims and their states.
func signature(v *structs.CSIVolume) string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(v.PastClaims)) {
		b.WriteString(id)
		b.WriteByte('=')
		b.WriteString(strconv.Itoa(int(v.PastClaims[id].State)))
		b.WriteByte(';')
	}
	return b.String()
}

// backoff is the wait after a step failed attempts times: BaseDelay
// doubling to MaxDelay, with 20% jitter either way so that many volumes
// failing together do not retry together.
func (w *Watcher) backoff(attempts int) time.Duration {
	d := w.cfg.BaseDelay
	for i := 1; i < attempts && d < w.cfg.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, w.cfg.MaxDelay)
	jitter := time.Duration(rand.Int64N(int64(d)/5*2+1)) - d/5
	return d + jitter
}
