package volumewatcher

import (
	"container/heap"
	"sync"
	"time"
)

// Clock is the watcher's time, injected so tests can drive backoff.
type Clock interface {
	Now() time.Time
	// Until returns a channel that receives once the clock reaches t. It
	// takes a time, not a duration, so that a clock moved between a
	// caller's Now and this call cannot push the deadline past t.
	Until(t time.Time) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                     { return time.Now() }
func (realClock) Until(t time.Time) <-chan time.Time { return time.After(time.Until(t)) }

// queue is a keyed work queue: a key is never handed to two workers at
// once, a key added while it is processed is handed out again when that
// processing ends, and a key can be added for later (backoff). Waiting keys
// cost a heap entry, not a goroutine.
type queue struct {
	mu         sync.Mutex
	clock      Clock
	ready      map[string]time.Time // key -> when it may be handed out
	heap       keyHeap
	processing map[string]bool
	dirty      map[string]time.Time // added while processing: re-add at this time
	wake       chan struct{}
	done       chan struct{}
	closed     bool
}

func newQueue(clock Clock) *queue {
	return &queue{
		clock:      clock,
		ready:      map[string]time.Time{},
		processing: map[string]bool{},
		dirty:      map[string]time.Time{},
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
}

// Add hands the key out as soon as a worker is free.
func (q *queue) Add(key string) { q.AddAt(key, time.Time{}) }

// AddAt hands the key out no earlier than at. A key already waiting keeps
// the earlier of the two times.
func (q *queue) AddAt(key string, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.processing[key] {
		if cur, ok := q.dirty[key]; !ok || at.Before(cur) {
			q.dirty[key] = at
		}
		return
	}
	if cur, ok := q.ready[key]; ok && !at.Before(cur) {
		return
	}
	q.ready[key] = at
	heap.Push(&q.heap, keyAt{key: key, at: at})
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Get blocks until a key is due and hands it out, marking it processing,
// or returns false once the queue is closed.
func (q *queue) Get() (string, bool) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return "", false
		}
		var wait <-chan time.Time
		for q.heap.Len() > 0 {
			top := q.heap[0]
			if at, ok := q.ready[top.key]; !ok || !at.Equal(top.at) {
				heap.Pop(&q.heap) // superseded by an earlier time, or taken
				continue
			}
			now := q.clock.Now()
			if !top.at.After(now) {
				heap.Pop(&q.heap)
				delete(q.ready, top.key)
				q.processing[top.key] = true
				if q.heap.Len() > 0 {
					// More may be due: let another worker look.
					q.signal()
				}
				q.mu.Unlock()
				return top.key, true
			}
			wait = q.clock.Until(top.at)
			break
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-wait:
		case <-q.done:
		}
	}
}

// Done ends a key's processing; a key added meanwhile is queued again.
func (q *queue) Done(key string) {
	q.mu.Lock()
	delete(q.processing, key)
	at, dirty := q.dirty[key]
	delete(q.dirty, key)
	q.mu.Unlock()
	if dirty {
		q.AddAt(key, at)
	}
	q.signal()
}

// Len is the number of keys waiting or being processed.
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) + len(q.processing)
}

// Close wakes every Get, which then returns false.
func (q *queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

type keyAt struct {
	key string
	at  time.Time
}

type keyHeap []keyAt

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(keyAt)) }
func (h *keyHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	*h = old[:n-1]
	return x
}
