package volumewatcher

import (
	"context"
	"fmt"
	"sync"

	"github.com/volplane/volplane/structs"
)

// volumeLocks is the leader's one lock table for volumes: every controller
// or node call for a volume (a claim's publish, a create, a delete, a
// validation, an operator's detach, a release step) is made holding its
// volume's lock, so that at most one operation per volume is in flight, as
// the CSI spec asks of a CO. The release workers never wait for a lock: a
// worker that finds its volume locked leaves it, and the holder's unlock
// hands the volume back to the queue. The table lives as long as the
// Watcher, across leadership terms, so that an endpoint holding a lock when
// leadership changes still excludes a new term's workers.
type volumeLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{} // closed on unlock
	// deferred are the volumes a worker found locked.
	deferred map[string]bool
}

func newVolumeLocks() *volumeLocks {
	return &volumeLocks{held: map[string]chan struct{}{}, deferred: map[string]bool{}}
}

// lock waits until k is free and takes it, or returns ctx's error.
func (l *volumeLocks) lock(ctx context.Context, k string) error {
	for {
		l.mu.Lock()
		ch, busy := l.held[k]
		if !busy {
			l.held[k] = make(chan struct{})
			l.mu.Unlock()
			return nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryLock takes k if it is free. When it is not, k is remembered, and the
// unlock that frees it reports so.
func (l *volumeLocks) tryLock(k string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, busy := l.held[k]; busy {
		l.deferred[k] = true
		return false
	}
	l.held[k] = make(chan struct{})
	return true
}

// unlock frees k and reports whether a worker found it locked meanwhile.
func (l *volumeLocks) unlock(k string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.held[k]; ok {
		close(ch)
		delete(l.held, k)
	}
	deferred := l.deferred[k]
	delete(l.deferred, k)
	return deferred
}

// Lock takes the lock of a volume for an operation that calls its plugin
// and returns its unlock, which the caller defers; it waits for the
// operation in flight, if any, or until ctx ends (then the error is
// ErrCodeRetryable, with ctx's error as its cause). Every controller or node
// call the servers make for a volume holds it, on the leader, where they
// are all made. The volume does not need to exist (a create locks the ID
// it is about to use).
func (w *Watcher) Lock(ctx context.Context, namespace, volumeID string) (func(), error) {
	k := key(namespace, volumeID)
	if err := w.locks.lock(ctx, k); err != nil {
		return nil, &structs.Error{Code: structs.ErrCodeRetryable, Cause: err,
			Message: fmt.Sprintf("volume %q: another operation on the volume is still in flight", volumeID)}
	}
	return func() { w.unlock(k) }, nil
}

// unlock frees k and hands it back to the queue if a worker left it
// because it was locked.
func (w *Watcher) unlock(k string) {
	if !w.locks.unlock(k) {
		return
	}
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q != nil {
		q.Add(k)
	}
}
