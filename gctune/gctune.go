// Package gctune sets the garbage collector's GOGC for a server agent's
// process from its live heap after every collection, so that a server with
// memory to spare collects less often than Go's default would make it.
//
// Go collects when the heap has grown by GOGC percent (100 by default) over
// what the last collection found live. A server's live heap is its whole
// state, so at the default every collection marks all of it again after
// as little garbage as the state's own size: with 50,000 volumes and
// thousands of claims a second, a collection runs every second or two and
// its marking takes a core for hundreds of milliseconds, while most of the
// machine's memory sits unused. The tuner lets the heap grow to a budget
// instead: after each collection it sets GOGC to what makes the next goal
// the budget, at least 100 (never more often than the default) and at most
// MaxPercent (400 unless configured). A live heap larger than a fifth of
// the budget gets less headroom, down to the default's at half of it.
//
// The budget defaults to a quarter of the memory the process may use: the
// machine's, its cgroup's limit, or GOMEMLIMIT, whichever is least. An
// operator who sets GOGC in the environment has chosen; the tuner then
// does not start.
package gctune

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"

	"github.com/dustin/go-humanize"
	"github.com/hashicorp/go-hclog"
)

const (
	// MinPercent is the least GOGC the tuner sets: Go's default.
	MinPercent = 100
	// DefaultMaxPercent is the most GOGC the tuner sets unless configured:
	// the heap may grow to five times what is live between collections.
	DefaultMaxPercent = 400
)

// ErrEnvSet is returned by Start when GOGC is set in the environment.
var ErrEnvSet = errors.New("GOGC is set in the environment")

// ErrRunning is returned by Start while another tuner runs in the process
// (several agents in one process, as in tests): GOGC is the process's.
var ErrRunning = errors.New("another tuner already tunes this process's collector")

// running is set while a tuner runs.
var running atomic.Bool

// Config is the tuner's configuration.
type Config struct {
	// Budget is the heap the tuner lets grow between collections: the goal
	// it sets. Zero is DefaultBudget's.
	Budget uint64
	// MaxPercent bounds the GOGC set; zero is DefaultMaxPercent.
	MaxPercent int
	// Logger gets one line when the tuner starts.
	Logger hclog.Logger
}

// Percent is the GOGC that makes the next collection's goal budget for a
// heap of live bytes, within [MinPercent, maxPercent].
func Percent(live, budget uint64, maxPercent int) int {
	if live == 0 {
		return maxPercent
	}
	if budget <= live {
		return MinPercent
	}
	p := (budget - live) / live * 100
	// The integer division above rounds down to whole multiples of the live
	// heap; add the remainder's share.
	p += (budget - live) % live * 100 / live
	return int(max(MinPercent, min(p, uint64(maxPercent))))
}

// Tuner adjusts GOGC after every collection until Stop.
type Tuner struct {
	budget     uint64
	from       string
	maxPercent int
	prev       int

	mu      sync.Mutex
	stopped bool

	percent atomic.Int64
	tunes   atomic.Uint64
	sample  []metrics.Sample
}

// Start starts tuning the collector of this process. It fails with
// ErrEnvSet when GOGC is set in the environment, with ErrRunning while
// another tuner runs, and when no budget is configured and none can be
// found (DefaultBudget's error).
func Start(cfg Config) (t *Tuner, err error) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		return nil, fmt.Errorf("%w (GOGC=%s)", ErrEnvSet, v)
	}
	if !running.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	defer func() {
		if err != nil {
			running.Store(false)
		}
	}()
	budget, from := cfg.Budget, "configured"
	if budget == 0 {
		b, src, err := DefaultBudget()
		if err != nil {
			return nil, err
		}
		budget, from = b, src
	}
	maxPercent := cfg.MaxPercent
	if maxPercent == 0 {
		maxPercent = DefaultMaxPercent
	}
	if maxPercent < MinPercent {
		return nil, fmt.Errorf("gc tuning: max percent %d is below %d", maxPercent, MinPercent)
	}
	t = &Tuner{
		budget:     budget,
		from:       from,
		maxPercent: maxPercent,
		sample:     []metrics.Sample{{Name: "/gc/heap/live:bytes"}},
	}
	t.prev = debug.SetGCPercent(MinPercent)
	t.percent.Store(MinPercent)
	t.tune()
	t.arm()
	if cfg.Logger != nil {
		cfg.Logger.Info("gc tuning on", "heap_budget_mb", budget>>20, "budget_from", from,
			"max_gc_percent", maxPercent, "gc_percent", t.percent.Load())
	}
	return t, nil
}

// sentinel is the object whose finalizer runs once after each collection.
// It holds a pointer so that it never shares a block of the tiny allocator
// with other objects, whose finalizers then may not run.
type sentinel struct {
	t *Tuner
}

// arm allocates a sentinel that nothing references: the next collection
// finds it unreachable and queues its finalizer, which tunes and arms the
// next one.
func (t *Tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) {
		if s.t.tune() {
			s.t.arm()
		}
	})
}

// tune sets GOGC for the live heap the last collection found. It reports
// false once the tuner is stopped.
func (t *Tuner) tune() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	metrics.Read(t.sample)
	live := uint64(0)
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := Percent(live, t.budget, t.maxPercent)
	if int64(p) != t.percent.Load() {
		debug.SetGCPercent(p)
		t.percent.Store(int64(p))
	}
	t.tunes.Add(1)
	return true
}

// Percent is the GOGC the tuner last set.
func (t *Tuner) Percent() int { return int(t.percent.Load()) }

// Budget is the heap goal the tuner aims at.
func (t *Tuner) Budget() uint64 { return t.budget }

// BudgetFrom says where the budget came from: "configured", or the share
// of the memory DefaultBudget found and where.
func (t *Tuner) BudgetFrom() string { return t.from }

// GCPercent is the collector's GOGC as the runtime has it now: the
// environment's, Go's default, or what a tuner set.
func GCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int(s[0].Value.Uint64())
}

// Tunes counts the times the tuner has run: once at Start and once after
// every collection since.
func (t *Tuner) Tunes() uint64 { return t.tunes.Load() }

// Stop stops tuning and puts back the GOGC found at Start. It may be
// called more than once.
func (t *Tuner) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.stopped = true
	debug.SetGCPercent(t.prev)
	running.Store(false)
}

// ParseBudget parses a budget as configured: a size such as "2GiB" or
// "512MB", "" for the default (zero), or "0" for no tuning (off).
func ParseBudget(v string) (budget uint64, off bool, err error) {
	if v == "" {
		return 0, false, nil
	}
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, false, fmt.Errorf("%q is not a size such as \"2GiB\" or \"512MB\" (or \"0\" for Go's default GOGC)", v)
	}
	return n, n == 0, nil
}
