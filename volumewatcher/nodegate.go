package volumewatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// A node gate holds back the node steps of a node whose agent no server
// holds a connection with. Calling the agent once per claim and backoff
// period would fail every time, each failure costing a call and a Raft
// write, for hundreds of claims at once when a node with many volumes
// loses its agent. Instead one check per node (Backend.NodeConnected)
// comes before its node calls; once it fails, the node's claims wait
// together, parked on the gate without a timer or a write of their own,
// and the gate alone is checked again with backoff. Its claims go on when
// the check succeeds, or when a write to the node (its agent registering
// again, its status turning down) wakes the gate. The gate never releases
// a claim: a parked claim goes through advance like any other, whose node
// step runs on the node or is skipped only when the node is down or gone.
type nodeGate struct {
	// err is why the node cannot be reached, nil while the first check
	// runs.
	err error
	// attempts counts the failed checks, for the backoff; nodeIndex is
	// the node's ModifyIndex at the last check, so a write to the node
	// wakes the gate.
	attempts  int
	nodeIndex uint64
	// checking is closed when the check under way ends.
	checking chan struct{}
	// parked are the volume keys whose claims wait for the node.
	parked map[string]bool
}

// errNodeUnreachable is the error of a node step held back by its node's
// gate: the node's agent has no connection with any server.
type errNodeUnreachable struct {
	nodeID string
	cause  error
}

func (e *errNodeUnreachable) Error() string {
	return fmt.Sprintf("%s; its claims wait for the agent to connect again or the node to be marked down", structs.MessageOf(e.cause))
}

func (e *errNodeUnreachable) Unwrap() error { return e.cause }

// nodeNote is the note of a claim parked on its node's gate.
func nodeNote(nodeID string) string {
	return fmt.Sprintf("node step waiting: the agent of node %s is not connected to any server", nodeID)
}

// gateKeyPrefix starts the queue keys of node gates; a volume key starts
// with its namespace, which cannot start with it.
const gateKeyPrefix = "\x00node/"

func gateKey(nodeID string) string { return gateKeyPrefix + nodeID }

func gateNode(k string) (string, bool) { return strings.CutPrefix(k, gateKeyPrefix) }

// closedGate returns the error of the node's gate when it is closed:
// its claims wait, with no call and no check.
func (w *Watcher) closedGate(nodeID string) error {
	w.gmu.Lock()
	defer w.gmu.Unlock()
	if g := w.gates[nodeID]; g != nil && g.err != nil {
		return g.err
	}
	return nil
}

// nodeReachable checks whether a server holds a connection with the
// node's agent, after a node call failed to reach it: nil if so,
// otherwise an *errNodeUnreachable, and the node's gate is closed. A node
// whose gate is closed is not checked again before its gate's time
// unless fresh is set (an operator's detach, or the gate's own retry);
// concurrent checks of one node are one check.
func (w *Watcher) nodeReachable(ctx context.Context, nodeID string, fresh bool) error {
	for {
		w.gmu.Lock()
		g := w.gates[nodeID]
		if g != nil && g.checking != nil {
			ch := g.checking
			w.gmu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if g != nil && g.err != nil && !fresh {
			err := g.err
			w.gmu.Unlock()
			return err
		}
		if g == nil {
			g = &nodeGate{parked: map[string]bool{}}
			w.gates[nodeID] = g
		}
		done := make(chan struct{})
		g.checking = done
		w.gmu.Unlock()

		var index uint64
		if node, err := w.cfg.Backend.State().NodeByID(nil, nodeID); err == nil && node != nil {
			index = node.ModifyIndex
		}
		err := w.cfg.Backend.NodeConnected(ctx, nodeID)

		w.gmu.Lock()
		g.checking = nil
		close(done)
		switch {
		case err == nil:
			w.openGateLocked(nodeID, g)
			w.gmu.Unlock()
			return nil
		case ctx.Err() != nil:
			if g.err == nil {
				// Nothing was learned: no gate.
				w.openGateLocked(nodeID, g)
			}
			w.gmu.Unlock()
			return ctx.Err()
		}
		g.err = &errNodeUnreachable{nodeID: nodeID, cause: err}
		g.attempts++
		g.nodeIndex = index
		checks := g.attempts
		next := w.clock.Now().Add(w.backoff(checks))
		err = g.err
		w.gmu.Unlock()
		w.logger.Debug("node unreachable: its release steps wait", "node", nodeID, "checks", checks, "next_check", next, "error", err)
		if q := w.currentQueue(); q != nil {
			q.AddAt(gateKey(nodeID), next)
		}
		return err
	}
}

// heartbeatCheckDelay is how long after hearing from a node's agent its
// gate is checked: a server that forwarded the agent's heartbeat records
// the agent's session once the leader has answered it, a round trip
// later.
const heartbeatCheckDelay = 200 * time.Millisecond

// NodeChecks returns how many checks found the node's agent unreachable
// since its gate closed, 0 while no gate is closed on it.
func (w *Watcher) NodeChecks(nodeID string) int {
	w.gmu.Lock()
	defer w.gmu.Unlock()
	if g := w.gates[nodeID]; g != nil && g.err != nil {
		return g.attempts
	}
	return 0
}

// NodeHeartbeat tells the watcher that this leader just heard from the
// node's agent (a registration or a heartbeat, which cost no Raft write
// when nothing changed): a gate closed on the node is checked shortly
// (heartbeatCheckDelay) rather than at its backoff. A check that still
// fails waits for the next heartbeat or the gate's backoff.
func (w *Watcher) NodeHeartbeat(nodeID string) {
	w.gmu.Lock()
	g := w.gates[nodeID]
	closed := g != nil && g.err != nil
	w.gmu.Unlock()
	if !closed {
		return
	}
	if q := w.currentQueue(); q != nil {
		q.AddAt(gateKey(nodeID), w.clock.Now().Add(heartbeatCheckDelay))
	}
}

// openGateLocked removes a node's gate and hands its parked volumes back
// to the queue. The caller holds gmu.
func (w *Watcher) openGateLocked(nodeID string, g *nodeGate) {
	if w.gates[nodeID] == g {
		delete(w.gates, nodeID)
	}
	if len(g.parked) == 0 {
		return
	}
	if q := w.currentQueue(); q != nil {
		for k := range g.parked {
			q.Add(k)
		}
	}
	g.parked = nil
}

// park leaves a volume waiting on its node's gate. A gate that opened
// meanwhile hands the volume back at once.
func (w *Watcher) park(nodeID, k string, q *queue) {
	w.gmu.Lock()
	defer w.gmu.Unlock()
	g := w.gates[nodeID]
	if g == nil || g.err == nil {
		q.Add(k)
		return
	}
	g.parked[k] = true
}

// recheckNode is a gate's turn in the queue: the node is checked again,
// and its parked volumes go on if it is reachable, down or gone. A gate
// still closed is queued again by the check, at its next backoff.
func (w *Watcher) recheckNode(ctx context.Context, nodeID string) {
	w.gmu.Lock()
	g := w.gates[nodeID]
	if g != nil && g.err != nil && len(g.parked) == 0 {
		// Nothing waits for the node any more (its claims were freed
		// otherwise): the gate goes; a claim that parks meanwhile is
		// handed back and checks the node afresh.
		delete(w.gates, nodeID)
		g = nil
	}
	w.gmu.Unlock()
	if g == nil {
		return
	}
	node, err := w.cfg.Backend.State().NodeByID(nil, nodeID)
	if err == nil && structs.NodeDownOrGone(node) {
		// The node steps are skipped now: the claims go on.
		w.gmu.Lock()
		w.openGateLocked(nodeID, g)
		w.gmu.Unlock()
		return
	}
	if err := w.nodeReachable(ctx, nodeID, true); err != nil && ctx.Err() == nil {
		w.logger.Debug("node still unreachable", "node", nodeID, "error", err)
	}
}

// wakeGatesOnNodeWrites checks the gates of nodes written since their
// last check (an agent that registered again, a status change) now
// rather than at their backoff, and adds each gated node to ws, so a write
// to it wakes the watch.
func (w *Watcher) wakeGatesOnNodeWrites(st State, ws memdb.WatchSet, q *queue) {
	w.gmu.Lock()
	type gated struct {
		id    string
		index uint64
	}
	var nodes []gated
	for id, g := range w.gates {
		if g.err != nil {
			nodes = append(nodes, gated{id, g.nodeIndex})
		}
	}
	w.gmu.Unlock()
	for _, n := range nodes {
		node, err := st.NodeByID(ws, n.id)
		if err != nil {
			continue
		}
		if node == nil || node.ModifyIndex != n.index {
			q.Add(gateKey(n.id))
		}
	}
}

// asUnreachable reports whether err is a node gate's.
func asUnreachable(err error) (*errNodeUnreachable, bool) {
	var u *errNodeUnreachable
	ok := errors.As(err, &u)
	return u, ok
}
