package volumewatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

func TestWatcher_Lock(t *testing.T) {
	t.Run("a worker leaves a locked volume, and the unlock hands it back", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.start()
		unlock, err := h.w.Lock(context.Background(), h.vol.Namespace, h.vol.ID)
		must.NoError(t, err)
		h.complete("a1")
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			h.w.locks.mu.Lock()
			defer h.w.locks.mu.Unlock()
			return h.w.locks.deferred[h.key()], errors.New("no worker has found the volume locked yet")
		})
		must.SliceEmpty(t, h.backend.takeCalls(), must.Sprint("nothing runs while another operation holds the volume"))
		unlock()
		h.settle()
		mustCalls(t, "after the unlock", []string{nodeCall("a1", "client"), ctrlCall("client")}, h.backend.takeCalls())
		h.mustFreed("a1")
	})

	t.Run("an operation waits for a release step in flight", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		inCall, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		h.backend.setDuring(func(_ context.Context, kind string) {
			once.Do(func() {
				close(inCall)
				<-release
			})
		})
		h.start()
		h.complete("a1")
		<-inCall
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := h.w.Lock(ctx, h.vol.Namespace, h.vol.ID)
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err), must.Sprint("the node detach holds the volume"))
		must.ErrorIs(t, err, context.DeadlineExceeded)
		close(release)
		unlock, err := h.w.Lock(context.Background(), h.vol.Namespace, h.vol.ID)
		must.NoError(t, err)
		unlock()
		h.settle()
		h.mustFreed("a1")
	})

	t.Run("operations under the lock never overlap a release's plugin calls", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		for i := range 6 {
			h.reader(fmt.Sprintf("a%d", i), "client")
		}
		// Some steps fail, so releases retry while the operations run.
		h.backend.fail(callNode, "", errNodeRestarting, 3)
		h.start()
		var ops sync.WaitGroup
		for i := range 4 {
			ops.Add(1)
			go func() {
				defer ops.Done()
				for range 25 {
					unlock, err := h.w.Lock(context.Background(), h.vol.Namespace, h.vol.ID)
					if err != nil {
						t.Errorf("lock: %v", err)
						return
					}
					// A claim's controller publish, say: recorded like the
					// release's calls, so an overlap is seen.
					_ = h.backend.call(context.Background(), "publish", h.vol.ID, "client", fmt.Sprintf("publish %d", i))
					unlock()
				}
			}()
		}
		for i := range 6 {
			h.complete(fmt.Sprintf("a%d", i))
			h.clock.Advance(time.Minute) // every backoff passes
		}
		ops.Wait()
		testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
			h.clock.Advance(time.Minute)
			v := h.volume()
			return len(v.PastClaims) == 0 && !v.InUse(), fmt.Errorf("past claims %d", len(v.PastClaims))
		})
		must.SliceEmpty(t, h.backend.overlaps(), must.Sprint("two calls ran at once on the volume"))
	})
}

// failedNodeStepOnce releases a claim whose first node step fails, and
// returns the harness and when the step is due again.
func failedNodeStepOnce(t *testing.T) (*harness, time.Time) {
	t.Helper()
	h := newHarness(t)
	withController(h)
	h.writer("a1", "client")
	h.backend.fail(callNode, "", errNodeRestarting, 1)
	h.start()
	h.complete("a1")
	h.settle()
	h.backend.takeCalls()
	return h, h.nextAttempt("a1")
}

func TestWatcher_Attempts(t *testing.T) {
	t.Run("a retry records its deadline as the next attempt while it runs", func(t *testing.T) {
		h, next := failedNodeStepOnce(t)

		seen := make(chan *structs.CSIVolumeClaim, 1)
		h.backend.setDuring(func(_ context.Context, kind string) {
			if kind == callNode {
				seen <- h.past("a1")
			}
		})
		h.clock.AdvanceTo(next)
		c := <-seen
		must.Eq(t, 1, c.Attempts)
		must.Eq(t, h.clock.Now().Add(DefaultStepTimeout).UnixNano(), c.NextAttempt,
			must.Sprint("while the retry runs, its next attempt is when it ends at the latest, not the past due time"))
		must.True(t, c.AttemptInFlight)
		h.settle()
		h.mustFreed("a1")
	})

	t.Run("a retry whose leader went is retried at once by the next leader, not at its deadline", func(t *testing.T) {
		h, next := failedNodeStepOnce(t)

		began := make(chan struct{})
		h.backend.setDuring(func(ctx context.Context, kind string) {
			if kind == callNode {
				close(began)
				<-ctx.Done() // hangs until its leader goes
			}
		})
		h.clock.AdvanceTo(next)
		<-began
		c := h.past("a1")
		must.True(t, c.AttemptInFlight, must.Sprint("a running retry is marked in flight"))
		must.Eq(t, h.clock.Now().Add(DefaultStepTimeout).UnixNano(), c.NextAttempt)
		h.backend.setDuring(nil)
		h.stop() // the leader goes: its call is cancelled, not failed
		must.True(t, h.past("a1").AttemptInFlight)
		h.backend.takeCalls()

		h.start() // the next leader; the clock does not move
		h.settle()
		h.mustFreed("a1")
		must.Eq(t, []string{nodeCall("a1", "client"), ctrlCall("client")}, h.backend.takeCalls(),
			must.Sprint("the next leader retries the node step at once"))
	})

	t.Run("a step's call ends at the step's deadline and is a failed attempt", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.backend.setDuring(func(ctx context.Context, kind string) {
			if kind == callNode {
				<-ctx.Done() // a hung plugin call
			}
		})
		h.w = New(Config{Backend: h.backend, Clock: h.clock, StepTimeout: 50 * time.Millisecond})
		h.complete("a1")
		start := time.Now()
		res := h.w.process(context.Background(), h.key(), "", false)
		must.Between(t, 50*time.Millisecond, time.Since(start), 5*time.Second)
		must.ErrorIs(t, res.err, context.DeadlineExceeded)
		c := h.past("a1")
		must.Eq(t, 1, c.Attempts)
		must.Eq(t, "node detach: context deadline exceeded", c.LastError)
	})

	t.Run("a call cancelled because the leader stepped down is not a failure", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		ctx, cancel := context.WithCancel(context.Background())
		h.backend.setDuring(func(callCtx context.Context, kind string) {
			if kind == callNode {
				cancel() // leadership lost while the call runs
				<-callCtx.Done()
			}
		})
		h.w = New(Config{Backend: h.backend, Clock: h.clock, Hooks: Hooks{
			Failure: func(s string) { t.Errorf("failure of %s", s) },
		}})
		h.complete("a1")
		res := h.w.process(ctx, h.key(), "", false)
		must.ErrorIs(t, res.err, context.Canceled)
		c := h.past("a1")
		must.Eq(t, 0, c.Attempts, must.Sprint("no failed attempt is recorded"))
		must.Eq(t, "", c.LastError)
	})

	t.Run("waiting for the client is not an attempt: no hook, no failure", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.w = New(Config{Backend: h.backend, Clock: h.clock, Hooks: Hooks{
			Attempt: func(s string) { t.Errorf("attempt of %s", s) },
			Failure: func(s string) { t.Errorf("failure of %s", s) },
		}})
		h.stopAllocs("a1")
		res := h.w.process(context.Background(), h.key(), "", false)
		must.NoError(t, res.err)
		must.True(t, res.next.IsZero())
		must.Eq(t, []string{"a1"}, res.waiting)
		must.SliceEmpty(t, h.backend.takeCalls())
		must.SliceEmpty(t, h.backend.takeCheckpoints())
	})
}

func TestWatcher_DetachWaitsForTheClient(t *testing.T) {
	t.Run("the client does not report in time: a conflict that says so", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.start()
		h.stopAllocs("a1")
		h.settle()
		steps, err := h.w.Detach(context.Background(), h.vol.Namespace, h.vol.ID, h.nodes["client"].ID, 50*time.Millisecond)
		must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err))
		must.StrContains(t, structs.MessageOf(err), structs.WaitingForClientNote)
		must.Eq(t, []string{fmt.Sprintf("claim of allocation %q: %s", "a1", structs.WaitingForClientNote)}, steps)
		must.SliceEmpty(t, h.backend.takeCalls())
		must.Zero(t, h.past("a1").Attempts)
	})

	t.Run("the client reports while the detach waits: released", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.start()
		h.stopAllocs("a1")
		h.settle()
		reads := h.backend.allocReads.Load()
		type result struct {
			steps []string
			err   error
		}
		done := make(chan result, 1)
		go func() {
			steps, err := h.detach("client")
			done <- result{steps, err}
		}()
		// The detach has seen the allocation still running.
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			return h.backend.allocReads.Load() > reads, errors.New("the detach has not looked at the allocation")
		})
		h.complete("a1")
		r := <-done
		must.NoError(t, r.err)
		must.Eq(t, fmt.Sprintf("claim of allocation %q: %s", "a1", structs.WaitingForClientNote), r.steps[0])
		if len(r.steps) > 1 {
			// The detach's next pass released it (a worker woken by the
			// same report may have got there first).
			must.Eq(t, releasedSteps("a1", "client"), r.steps[1:])
		}
		h.mustFreed("a1")
		h.settle()
		mustCalls(t, "the release, once", []string{nodeCall("a1", "client"), ctrlCall("client")}, h.backend.takeCalls())
	})
}
