package volumewatcher

import (
	"context"
	"sync"
)

// DefaultMaxCallsPerClient is how many release calls the watcher has in
// flight at once to one client agent (node calls to a node, controller
// calls to a plugin's controllers): enough that a thousand claims on one
// node are released in parallel, few enough that a node's plugin is not
// handed hundreds of unmounts at once.
const DefaultMaxCallsPerClient = 32

// DefaultWorkers is how many volumes are released at once. A release is
// mostly waiting (on a client's call, on a Raft commit), so the workers
// are many more than the cores: with 32, a thousand claims released at
// once left a third of a 2-core machine idle (volplane bench -phases
// release: 1.04-1.32 s, 1.33-1.56 cores; with 64, 0.98-1.08 s, 1.43-1.63
// cores, in alternate runs).
const DefaultWorkers = 64

// clientLimits bounds the calls in flight per client key. A key's slot
// channel is made on first use and kept while calls hold it.
type clientLimits struct {
	max int

	mu    sync.Mutex
	slots map[string]*clientSlots
}

type clientSlots struct {
	ch    chan struct{}
	users int
}

func newClientLimits(max int) *clientLimits {
	return &clientLimits{max: max, slots: map[string]*clientSlots{}}
}

// acquire waits for a slot of key, or until ctx ends; the returned release
// frees it.
func (l *clientLimits) acquire(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	s := l.slots[key]
	if s == nil {
		s = &clientSlots{ch: make(chan struct{}, l.max)}
		l.slots[key] = s
	}
	s.users++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if s.users--; s.users == 0 {
			delete(l.slots, key)
		}
		l.mu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
