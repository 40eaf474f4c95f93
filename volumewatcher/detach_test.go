package volumewatcher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// detach runs an operator's detach and returns its steps, with node IDs
// shown by their labels.
func (h *harness) detach(node string) ([]string, error) {
	h.t.Helper()
	steps, err := h.w.Detach(context.Background(), h.vol.Namespace, h.vol.ID, h.nodes[node].ID, 10*time.Second)
	h.backend.mu.Lock()
	defer h.backend.mu.Unlock()
	for i, s := range steps {
		steps[i] = h.backend.labels.Replace(s)
	}
	return steps, err
}

// releasedSteps is what Detach reports of a release that went through.
func releasedSteps(alloc, node string) []string {
	return []string{
		fmt.Sprintf("node detach of allocation %q on node %q done", alloc, node),
		fmt.Sprintf("controller detach of allocation %q from node %q done", alloc, node),
		fmt.Sprintf("claim of allocation %q freed", alloc),
	}
}

func TestWatcher_Detach(t *testing.T) {
	t.Run("no Run in progress: the no-leader error", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.w = New(Config{Backend: h.backend, Clock: h.clock})
		_, err := h.detach("client")
		must.ErrorIs(t, err, structs.ErrNoLeader)

		h.start()
		h.settle()
		mustCalls(t, "the leader's release", []string{nodeCall("a1", "client"), ctrlCall("client")}, h.backend.takeCalls())
		h.stop()
		_, err = h.detach("client")
		must.ErrorIs(t, err, structs.ErrNoLeader, must.Sprint("after leadership is lost"))
		must.SliceEmpty(t, h.backend.takeCalls())
	})

	t.Run("ignores the backoff and reports each step", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.backend.fail(callNode, "", errNodeRestarting, 1)
		h.start()
		h.settle()
		mustCalls(t, "the first attempt", []string{failed(nodeCall("a1", "client"))}, h.backend.takeCalls())
		h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 1, time.Second, "node detach: node plugin is restarting")

		steps, err := h.detach("client")
		must.NoError(t, err)
		must.Eq(t, releasedSteps("a1", "client"), steps)
		mustCalls(t, "the detach", []string{nodeCall("a1", "client"), ctrlCall("client")}, h.backend.takeCalls())
		h.mustFreed("a1")
		h.settle()
		must.SliceEmpty(t, h.backend.takeCalls())
	})

	t.Run("reports a failed step with its code", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.backend.fail(callNode, "", errNodeRestarting, -1)
		h.start()
		h.settle()
		h.backend.takeCalls()

		steps, err := h.detach("client")
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err))
		mustCalls(t, "the detach", []string{failed(nodeCall("a1", "client"))}, h.backend.takeCalls())
		c := h.past("a1")
		must.Eq(t, 2, c.Attempts)
		must.Eq(t, []string{fmt.Sprintf("claim of allocation %q: node detach: node plugin is restarting (attempt 2; next at %s)",
			"a1", time.Unix(0, c.NextAttempt).Format(time.RFC3339))}, steps)
	})

	t.Run("a node down meanwhile: the skipped node step is reported", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.backend.fail(callNode, "", errNodeRestarting, 1)
		h.start()
		h.settle()
		h.backend.takeCalls()
		h.nodeDown("client")

		steps, err := h.detach("client")
		must.NoError(t, err)
		must.Eq(t, []string{
			"node step skipped: node client is down",
			fmt.Sprintf("controller detach of allocation %q from node %q done", "a1", "client"),
			fmt.Sprintf("claim of allocation %q freed", "a1"),
		}, steps)
		mustCalls(t, "the detach", []string{ctrlCall("client")}, h.backend.takeCalls())
		h.mustFreed("a1")
	})

	t.Run("only the claims on the given node", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.addNode("client2", mock.Node("dev"))
		h.reader("a1", "client")
		h.reader("a2", "client2")
		h.complete("a1", "a2")
		h.backend.fail(callNode, "", errNodeRestarting, -1)
		h.start()
		h.settle()
		h.backend.takeCalls()
		h.backend.clearFailures()

		steps, err := h.detach("client2")
		must.NoError(t, err)
		must.Eq(t, releasedSteps("a2", "client2"), steps)
		mustCalls(t, "the detach", []string{nodeCall("a2", "client2"), ctrlCall("client2")}, h.backend.takeCalls())
		h.mustFreed("a2")
		h.settle()
		must.SliceEmpty(t, h.backend.takeCalls())
		h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 1, time.Second, "node detach: node plugin is restarting")
	})

	t.Run("never runs alongside a worker, even when the volume's next attempt comes meanwhile", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.backend.fail(callNode, "", errNodeRestarting, 1)
		h.start()
		h.settle()
		h.backend.takeCalls()
		next := h.nextAttempt("a1")

		inCall, release := make(chan struct{}), make(chan struct{})
		var first sync.Once
		h.backend.setDuring(func(_ context.Context, kind string) {
			// Only the detach's node call blocks: a worker's call running
			// alongside it is recorded as an overlap and fails the test.
			first.Do(func() {
				close(inCall)
				<-release
			})
		})
		type result struct {
			steps []string
			err   error
		}
		done := make(chan result, 1)
		go func() {
			steps, err := h.w.Detach(context.Background(), h.vol.Namespace, h.vol.ID, h.nodes["client"].ID, time.Second)
			done <- result{steps, err}
		}()
		<-inCall
		// The volume's backoff ends while the detach works on it: the
		// workers must leave it alone until the detach is done.
		h.clock.AdvanceTo(next)
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			q := h.w.queue
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.heap.Len() > 0 {
				return false, fmt.Errorf("%d keys in the heap", q.heap.Len())
			}
			return true, nil
		})
		h.backend.setDuring(nil)
		close(release)
		r := <-done
		must.NoError(t, r.err)
		must.Len(t, 3, r.steps)
		h.settle()
		mustCalls(t, "the detach", []string{nodeCall("a1", "client"), ctrlCall("client")}, h.backend.takeCalls())
		must.SliceEmpty(t, h.backend.overlaps())
		h.mustFreed("a1")
	})
}

func TestWatcher_Process(t *testing.T) {
	t.Run("a volume that is gone: nothing to do", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.w = New(Config{Backend: h.backend, Clock: h.clock})
		must.NoError(t, h.store.CSIVolumeDeregister(h.backend.nextIndex(), h.vol.Namespace, []string{h.vol.ID}, false))
		res := h.w.process(context.Background(), h.key(), "", false)
		must.NoError(t, res.err)
		must.True(t, res.next.IsZero())
		must.SliceEmpty(t, h.backend.takeCalls())
	})

	t.Run("a volume deregistered during a plugin call: no error, no retry", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.w = New(Config{Backend: h.backend, Clock: h.clock})
		h.backend.setDuring(func(_ context.Context, kind string) {
			if err := h.store.CSIVolumeDeregister(h.backend.nextIndex(), h.vol.Namespace, []string{h.vol.ID}, true); err != nil {
				t.Errorf("force-deregistering during the %s: %v", kind, err)
			}
		})
		res := h.w.process(context.Background(), h.key(), "", false)
		must.NoError(t, res.err)
		must.True(t, res.next.IsZero(), must.Sprintf("retry at %s", res.next))
		mustCalls(t, "the release", []string{nodeCall("a1", "client")}, h.backend.takeCalls())
	})

	t.Run("a claim backing off is left alone and its time returned", func(t *testing.T) {
		h := newHarness(t)
		withController(h)
		h.writer("a1", "client")
		h.complete("a1")
		h.w = New(Config{Backend: h.backend, Clock: h.clock})
		c := h.past("a1")
		at := h.clock.Now().Add(time.Minute)
		c.Attempts, c.LastError, c.NextAttempt = 3, "earlier failure", at.UnixNano()
		must.NoError(t, h.backend.Checkpoint(h.vol.Namespace, h.vol.ID, c, h.clock.Now()))
		res := h.w.process(context.Background(), h.key(), "", false)
		must.NoError(t, res.err)
		must.Eq(t, at, res.next)
		must.SliceEmpty(t, h.backend.takeCalls())
	})
}

func TestWatcher_Backoff(t *testing.T) {
	w := New(Config{BaseDelay: time.Second, MaxDelay: 5 * time.Minute})
	for _, tc := range []struct {
		attempts int
		want     time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {9, 256 * time.Second},
		{10, 5 * time.Minute}, {40, 5 * time.Minute},
	} {
		t.Run(fmt.Sprintf("attempt %d", tc.attempts), func(t *testing.T) {
			for range 100 {
				must.Between(t, tc.want-tc.want/5, w.backoff(tc.attempts), tc.want+tc.want/5)
			}
		})
	}
}
