package volumewatcher

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// parkedOnGate starts a watcher with two claims on the node "client",
// whose agent no server reaches, and releases them: the first claim's
// call fails, one check of the node confirms it, the second claim makes
// no call, and each claim records once that it waits for the node.
func parkedOnGate(t *testing.T) (*harness, string) {
	h := newHarness(t)
	withController(h)
	h.reader("a1", "client")
	h.reader("a2", "client")
	nodeID := h.nodes["client"].ID
	noPath := structs.NewError(structs.ErrCodeNoNodeConn, "no path to node %q: no server holds a connection with its agent", nodeID)
	h.backend.setUnreachable(nodeID, noPath)
	h.backend.fail(callNode, nodeID, noPath, 0)
	h.start()
	h.complete("a1", "a2")
	h.settle()

	must.Eq(t, []string{failed(nodeCall("a1", "client"))}, h.backend.takeCalls(),
		must.Sprint("one call finds the node unreachable; its other claims wait without one"))
	must.Eq(t, 1, h.backend.takeNodeChecks(), must.Sprint("one check for the node's claims"))
	must.Len(t, 2, h.backend.takeCheckpoints(), must.Sprint("each claim records once why it waits"))
	for _, a := range []string{"a1", "a2"} {
		c := h.past(a)
		must.NotNil(t, c, must.Sprintf("the claim of %s is kept: its node step has not run", a))
		must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, c.State)
		must.Eq(t, 1, c.Attempts)
		must.StrContains(t, c.LastError, "node detach: no path to node")
		must.StrContains(t, c.LastError, "no server holds a connection with its agent")
		must.Eq(t, nodeNote(nodeID), c.Note)
		must.Eq(t, 0, c.NextAttempt, must.Sprint("a parked claim has no retry time of its own"))
	}
	return h, nodeID
}

// TestWatcher_UnreachableNodeParksItsClaims: the claims of a node whose
// agent no server reaches share one check with backoff instead of a call
// and a Raft write each per backoff period; they are never released while
// the node is up, and go on once its agent is reached again.
func TestWatcher_UnreachableNodeParksItsClaims(t *testing.T) {
	h, nodeID := parkedOnGate(t)

	// The gate alone waits, at the first backoff; each later check
	// doubles it and writes nothing.
	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		at, ok := h.queued(gateKey(nodeID))
		must.True(t, ok, must.Sprintf("check %d: the node's gate waits in the queue", i+1))
		wait := at.Sub(h.clock.Now())
		must.Between(t, delay-delay/5, wait, delay+delay/5)
		_, volQueued := h.queued(h.key())
		must.False(t, volQueued, must.Sprint("the parked volume has no timer of its own"))

		h.clock.AdvanceTo(at)
		h.settle()
		must.SliceEmpty(t, h.backend.takeCalls())
		must.Eq(t, 1, h.backend.takeNodeChecks())
		must.SliceEmpty(t, h.backend.takeCheckpoints(), must.Sprint("a failed check writes nothing"))
		must.NotNil(t, h.past("a1"))
		must.NotNil(t, h.past("a2"))
	}

	// A registration that changes nothing writes nothing: the node's
	// gate waits on.
	node := h.nodes["client"].Copy()
	must.NoError(t, h.store.UpsertNode(h.backend.nextIndex(), node))
	h.settle()
	must.Eq(t, 0, h.backend.takeNodeChecks())

	// A heartbeat that fails to reach the node (its session is not
	// recorded yet) leaves the claims parked.
	h.w.NodeHeartbeat(nodeID)
	h.settle()
	must.Eq(t, 0, h.backend.takeNodeChecks(), must.Sprint("checked a little later, once the agent's server recorded it"))
	h.clock.Advance(heartbeatCheckDelay)
	h.settle()
	must.Eq(t, 1, h.backend.takeNodeChecks())
	must.SliceEmpty(t, h.backend.takeCalls())
	must.SliceEmpty(t, h.backend.takeCheckpoints())

	// The agent is connected again: its next heartbeat wakes the gate at
	// once, the check succeeds, and the claims are released.
	h.backend.setUnreachable(nodeID, nil)
	h.backend.clearFailures()
	h.w.NodeHeartbeat(nodeID)
	h.clock.Advance(heartbeatCheckDelay)
	h.settle()
	must.Eq(t, 1, h.backend.takeNodeChecks())
	calls := h.backend.takeCalls()
	for _, a := range []string{"a1", "a2"} {
		must.SliceContains(t, calls, nodeCall(a, "client"), must.Sprint("the node step runs on the node"))
		h.mustFreed(a)
	}
	must.False(t, slices.ContainsFunc(calls, func(c string) bool { return strings.HasSuffix(c, "(failed)") }))
	_, ok := h.queued(gateKey(nodeID))
	must.False(t, ok, must.Sprint("the gate is gone"))
}

// TestWatcher_UnreachableNodeWritten: a write to a parked node (a status
// or fingerprint change) checks it at once.
func TestWatcher_UnreachableNodeWritten(t *testing.T) {
	h, nodeID := parkedOnGate(t)
	h.backend.setUnreachable(nodeID, nil)
	h.backend.clearFailures()
	node := h.nodes["client"].Copy()
	node.Name = "client-renamed"
	passes := h.backend.passesStarted.Load()
	must.NoError(t, h.store.UpsertNode(h.backend.nextIndex(), node))
	h.settleAfter(passes)
	must.Eq(t, 1, h.backend.takeNodeChecks())
	h.mustFreed("a1")
	h.mustFreed("a2")
}

// TestWatcher_UnreachableNodeDown: parked claims go on when their node is
// marked down, with the node step skipped as for any down node, and no
// call to it.
func TestWatcher_UnreachableNodeDown(t *testing.T) {
	h, _ := parkedOnGate(t)
	passes := h.backend.passesStarted.Load()
	h.nodeDown("client")
	h.settleAfter(passes)
	for _, c := range h.backend.takeCalls() {
		must.False(t, strings.HasPrefix(c, callNode), must.Sprintf("a node call to a down node: %s", c))
	}
	h.mustFreed("a1")
	h.mustFreed("a2")
}

// TestWatcher_UnreachableNodeOperatorDetach: an operator's detach checks
// the node afresh rather than trusting the gate, and says why the claim
// waits when the node is still unreachable.
func TestWatcher_UnreachableNodeOperatorDetach(t *testing.T) {
	h, nodeID := parkedOnGate(t)
	_, err := h.w.Detach(t.Context(), h.vol.Namespace, h.vol.ID, nodeID, time.Second)
	must.Error(t, err)
	must.StrContains(t, err.Error(), "no server holds a connection with its agent")
	must.Eq(t, 1, h.backend.takeNodeChecks(), must.Sprint("the detach checked the node afresh"))
	must.SliceEmpty(t, h.backend.takeCalls())
	must.NotNil(t, h.past("a1"))

	h.backend.setUnreachable(nodeID, nil)
	h.backend.clearFailures()
	_, err = h.w.Detach(t.Context(), h.vol.Namespace, h.vol.ID, nodeID, time.Second)
	must.NoError(t, err)
	h.mustFreed("a1")
	h.mustFreed("a2")
}
