package server

import (
	"slices"
	"sync"
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

	mu       sync.Mutex
	pending  []*groupItem[T]
	flushing bool
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
		batch := g.next()
		g.mu.Unlock()
		g.writeBatch(batch)
	}
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

// writeBatch commits one entry and hands each caller its answer.
func (g *groupCommit[T]) writeBatch(batch []*groupItem[T]) {
	items := make([]T, len(batch))
	for i, p := range batch {
		items[i] = p.item
	}
	errs := g.write(items)
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
