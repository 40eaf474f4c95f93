package server

import (
	"slices"
	"sync"
	"time"

	"github.com/volplane/volplane/metrics"
)

// groupCommit writes items through Raft many to an entry: callers each
// wait for their own item, and those that arrive while an entry is being
// committed share the next one. With one entry in flight, every entry
// carries all that queued behind the one before it, which is what lets
// concurrent writers outrun a Raft stack that commits one entry per write
// (the bench's bare raft side): the log, the followers' appends and the
// state machine each pay once per entry, not once per item.
//
// No goroutine waits for work: the first caller to find no write in
// flight writes the pending items, entry after entry, until its own has
// been answered; then it hands what is left to a goroutine that writes on
// until none is left, and returns.
//
// With one entry in flight, callers that each write again as soon as they
// are answered split into two cohorts that take turns: one in the entry
// being written, the other queued for the next, so each caller waits for
// about two entry writes. With linger set, an entry about to be written
// while fewer items are queued than were in the system during the last
// write (the one in flight and the most queued behind it) waits for them,
// until linger after that write ended: the cohorts merge into one, and
// each caller waits for about one write and its own round trip. As
// PostgreSQL's commit_delay, it waits only when there are others to wait
// for: one caller alone, or callers back after a quiet spell, find nobody
// expected and never wait. When fewer callers come back than the last
// write saw, one entry waits the whole linger; the next expects fewer.
type groupCommit[T any] struct {
	// write commits one batch of items and returns each item's answer, in
	// order (nil where applied).
	write func(items []T) []error
	// max bounds the items of an entry; weight, when set, gives each
	// item's size and maxWeight bounds an entry's total. An entry always
	// takes at least one item.
	max       int
	weight    func(T) int
	maxWeight int
	// linger bounds how long an entry waits for the callers expected
	// back (0: it never waits).
	linger time.Duration
	// observe, when set, records each entry's requests and linger.
	observe *metrics.EntryObserver

	mu       sync.Mutex
	pending  []*groupItem[T]
	flushing bool
	// inFlight is the number of items of the entry being written, and
	// seen the most items in the system (in flight and queued) during its
	// write; expected is seen of the last entry written, which ended at
	// lastDone.
	inFlight, seen, expected int
	lastDone                 time.Time
	// arrived wakes a lingering flush when an item is queued.
	arrived chan struct{}
}

type groupItem[T any] struct {
	item T
	err  error
	done chan struct{}
}

// commit writes item and returns its own answer.
func (g *groupCommit[T]) commit(item T) error {
	p := &groupItem[T]{item: item, done: make(chan struct{})}
	g.mu.Lock()
	g.pending = append(g.pending, p)
	g.seen = max(g.seen, g.inFlight+len(g.pending))
	if g.arrived != nil {
		select {
		case g.arrived <- struct{}{}:
		default:
		}
	}
	if g.flushing {
		g.mu.Unlock()
		<-p.done
		return p.err
	}
	g.flushing = true
	g.mu.Unlock()
	g.flush(p.done)
	<-p.done
	return p.err
}

// flush writes entries of pending items until none is left, or until own
// (when not nil) is closed, when it hands the rest on to a goroutine.
func (g *groupCommit[T]) flush(own <-chan struct{}) {
	for {
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.flushing = false
			g.mu.Unlock()
			return
		}
		if own != nil && closed(own) {
			g.mu.Unlock()
			go g.flush(nil)
			return
		}
		lingered := g.lingerLocked()
		batch := g.next()
		g.inFlight = len(batch)
		g.seen = g.inFlight + len(g.pending)
		g.mu.Unlock()
		g.observe.Entry(len(batch), lingered)
		g.writeBatch(batch)
	}
}

// lingerLocked holds the next entry back while fewer items are queued than
// the last write expects back, and the entry has room for more: until
// they are, or linger has passed since the last write ended, and returns
// how long it waited. g.mu is held, and released while it waits.
func (g *groupCommit[T]) lingerLocked() time.Duration {
	if g.linger <= 0 || len(g.pending) >= g.expected || g.full() {
		return 0
	}
	wait := time.Until(g.lastDone.Add(g.linger))
	if wait <= 0 {
		return 0
	}
	start := time.Now()
	if g.arrived == nil {
		g.arrived = make(chan struct{}, 1)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(g.pending) < g.expected && !g.full() {
		g.mu.Unlock()
		select {
		case <-g.arrived:
			g.mu.Lock()
		case <-timer.C:
			g.mu.Lock()
			return time.Since(start)
		}
	}
	return time.Since(start)
}

// full reports whether the queued items fill an entry; g.mu is held.
func (g *groupCommit[T]) full() bool {
	if len(g.pending) >= g.max {
		return true
	}
	if g.weight == nil {
		return false
	}
	total := 0
	for _, p := range g.pending {
		if total += g.weight(p.item); total >= g.maxWeight {
			return true
		}
	}
	return false
}

// next takes the next entry's items off the queue; g.mu is held.
func (g *groupCommit[T]) next() []*groupItem[T] {
	n, total := 0, 0
	for n < len(g.pending) && n < g.max {
		if g.weight != nil {
			w := g.weight(g.pending[n].item)
			if n > 0 && total+w > g.maxWeight {
				break
			}
			total += w
		}
		n++
	}
	// Copied out, and the queue's slots cleared, so the queue's array
	// keeps no answered item alive.
	batch := slices.Clone(g.pending[:n])
	clear(g.pending[:n])
	g.pending = g.pending[n:]
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return batch
}

// writeBatch commits one entry and hands each caller its answer. What it
// saw is counted before any caller is answered, so a caller back at once
// counts towards the next entry only.
func (g *groupCommit[T]) writeBatch(batch []*groupItem[T]) {
	items := make([]T, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	errs := g.write(items)
	g.mu.Lock()
	g.lastDone = time.Now()
	g.expected, g.inFlight = g.seen, 0
	g.mu.Unlock()
	for i, p := range batch {
		p.err = errs[i]
		close(p.done)
	}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
