package server

import (
	"sync"
	"time"

	"github.com/volplane/volplane/structs"
)

// heartbeats is the leader's record of when each node must next be heard
// from. It lives only on the leader: a new leader starts every known node's
// clock afresh, which errs on the side of not marking nodes down because of
// an election.
type heartbeats struct {
	srv    *Server
	mu     sync.Mutex
	timers map[string]*time.Timer
	// last is when each node was last heard from while we were leader.
	last map[string]time.Time
}

// newHeartbeats returns the tracker of a server that is not leader yet: its
// clocks are armed by start. A heartbeat served before then (raft has made
// this server leader, start waits for the barrier) must not arm a timer of
// its own, which start would orphan and which would later mark the node
// down however often it heartbeats.
func newHeartbeats(s *Server) *heartbeats {
	return &heartbeats{srv: s, last: map[string]time.Time{}}
}

// lastHeartbeat returns when the node was last heard from, if this server
// has heard from it while leader.
func (h *heartbeats) lastHeartbeat(nodeID string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.last[nodeID]
	return t, ok
}

// deadline is how long a node may stay silent before it is marked down.
func (h *heartbeats) deadline() time.Duration {
	return h.srv.config.HeartbeatTTL + h.srv.config.NodeGracePeriod
}

// reset restarts a node's clock; called on every register and heartbeat
// served by the leader.
func (h *heartbeats) reset(nodeID string) {
	if !h.resetTimer(nodeID) {
		return // not leader
	}
	// Release steps held back because no server reached the node's
	// agent are checked again now that it is heard from.
	h.srv.volumeWatcher.NodeHeartbeat(nodeID)
}

// resetTimer restarts the node's clock; false when this server is not
// the leader.
func (h *heartbeats) resetTimer(nodeID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timers == nil {
		return false
	}
	h.last[nodeID] = time.Now()
	if t, ok := h.timers[nodeID]; ok {
		t.Reset(h.deadline())
		return true
	}
	h.timers[nodeID] = time.AfterFunc(h.deadline(), func() { h.expire(nodeID) })
	return true
}

// forget drops what is known of a node the GC removed.
func (h *heartbeats) forget(nodeID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.last, nodeID)
	if t, ok := h.timers[nodeID]; ok {
		t.Stop()
		delete(h.timers, nodeID)
	}
}

// start arms a clock for every node that is not down; called when this
// server becomes leader.
func (h *heartbeats) start() {
	h.mu.Lock()
	for _, t := range h.timers {
		t.Stop()
	}
	h.timers = map[string]*time.Timer{}
	h.last = map[string]time.Time{}
	h.mu.Unlock()
	iter, err := h.srv.State().Nodes(nil)
	if err != nil {
		h.srv.logger.Error("listing nodes to track heartbeats", "error", err)
		return
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		if n := raw.(*structs.Node); n.Status != structs.NodeStatusDown {
			h.reset(n.ID)
		}
	}
}

// stop disarms every clock; called when leadership is lost.
func (h *heartbeats) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.timers {
		t.Stop()
	}
	h.timers = nil
}

// expire marks a silent node down through Raft.
func (h *heartbeats) expire(nodeID string) {
	h.mu.Lock()
	if h.timers == nil {
		h.mu.Unlock()
		return
	}
	delete(h.timers, nodeID)
	h.mu.Unlock()

	node, err := h.srv.State().NodeByID(nil, nodeID)
	if err != nil || node == nil || node.Status == structs.NodeStatusDown {
		return
	}
	h.srv.logger.Warn("node missed its heartbeats; marking it down", "node_id", nodeID, "name", node.Name,
		"deadline", h.deadline())
	req := &structs.NodeUpdateStatusRequest{
		NodeID:    nodeID,
		Status:    structs.NodeStatusDown,
		UpdatedAt: structs.NowNano(),
	}
	if _, _, err := h.srv.raftApply(structs.NodeUpdateStatusRequestType, req); err != nil {
		h.srv.logger.Error("marking node down failed; will retry", "node_id", nodeID, "error", err)
		// Try again after another grace period unless leadership moved.
		h.mu.Lock()
		if h.timers != nil {
			h.timers[nodeID] = time.AfterFunc(h.srv.config.NodeGracePeriod, func() { h.expire(nodeID) })
		}
		h.mu.Unlock()
	}
}
