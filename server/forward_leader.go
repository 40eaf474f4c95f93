package server

import (
	"context"
	"errors"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// A follower forwards writes (and consistent reads) to the leader. When the
// leader stops answering without closing its connections (a paused
// process, a machine that hangs), a forwarded call would wait out the whole
// call timeout, long after the other servers elected a new leader. The
// server therefore watches Raft's leader, and the moment another leader is
// known it gives up the calls in flight to the old one; holdWait wakes too,
// so requests waiting for a leader go on at once.
//
// Giving up is safe; sending again is not always. The old leader may have
// appended the write and replicated it before it stopped, and the new
// leader then commits it: a write sent again would be applied twice. So a
// call given up is sent again to the new leader only when that cannot
// matter:
//   - a read;
//   - a write in idempotentWrites, whose second apply changes nothing and
//     answers as the first did (a client retrying does the same);
//   - any write whose call was given up before any of its request was
//     written (rpc.NotSent), which the old leader never saw;
//
// and any other write is answered at once with an error that says it may or
// may not have been applied, as a leader that loses its leadership while
// committing does: the caller decides (it knows what it asked for), instead
// of waiting out the timeout for the same uncertainty.
//
// The same rule widens canRetryForward: an idempotent write whose
// connection to the leader broke (a leader killed mid-call) is sent again.

// idempotentWrites are the forwarded writes that may be applied twice: the
// client agents' registrations, heartbeats, allocation reports and volume
// claims (a repeat is a no-op by the claim rules), and volume
// registrations (an upsert of the same volume changes nothing).
var idempotentWrites = map[string]bool{
	"Node.Register":      true,
	"Node.UpdateStatus":  true,
	"Node.UpdateAlloc":   true,
	"CSIVolume.Register": true,
	"CSIVolume.Claim":    true,
}

// errLeaderMoved marks a forwarded call given up because another leader
// became known while it was in flight.
var errLeaderMoved = errors.New("another leader was elected while the request was forwarded")

// leaderWatch tracks Raft's leader for the forwarding path: a channel
// closed at every change, and the forwarded calls in flight.
type leaderWatch struct {
	mu       sync.Mutex
	changed  chan struct{}
	inflight map[*forwardCall]struct{}
}

// forwardCall is one call in flight to the leader at addr.
type forwardCall struct {
	addr      string
	cancel    context.CancelFunc
	abandoned bool // under leaderWatch.mu
}

func newLeaderWatch() *leaderWatch {
	return &leaderWatch{changed: make(chan struct{}), inflight: map[*forwardCall]struct{}{}}
}

// changes returns a channel closed at the next change of leader.
func (w *leaderWatch) changes() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// leaderIs records a new leader (empty: none known), waking waiters, and,
// once a leader is known, gives up the calls in flight to any other.
func (w *leaderWatch) leaderIs(addr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	if addr == "" {
		// An election is under way: the old leader may yet answer.
		return
	}
	for c := range w.inflight {
		if c.addr != addr && !c.abandoned {
			c.abandoned = true
			c.cancel()
		}
	}
}

// readyAt wakes the requests waiting for a leader, once the leader at addr
// (this server) is ready to serve them.
func (w *leaderWatch) readyAt(addr string) { w.leaderIs(addr) }

func (w *leaderWatch) add(c *forwardCall) {
	w.mu.Lock()
	w.inflight[c] = struct{}{}
	w.mu.Unlock()
}

// remove forgets c and reports whether it was given up.
func (w *leaderWatch) remove(c *forwardCall) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inflight, c)
	return c.abandoned
}

// watchLeader feeds Raft's leader observations to s.leaders until
// shutdown.
func (s *Server) watchLeader() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(obs)
	defer s.raft.DeregisterObserver(obs)
	for {
		select {
		case <-s.shutdownCtx.Done():
			return
		case <-ch:
			// The observation may be stale by now (a dropped one is
			// not resent): what counts is the leader now.
			addr, _ := s.raft.LeaderWithID()
			s.leaders.leaderIs(string(addr))
		}
	}
}

// forwardTo makes a forwarded call to the leader at addr, given up (with
// errLeaderMoved in the chain) if another leader becomes known first.
func (s *Server) forwardTo(addr, method string, args, reply any) error {
	ctx, cancel := context.WithCancel(s.shutdownCtx)
	defer cancel()
	c := &forwardCall{addr: addr, cancel: cancel}
	s.leaders.add(c)
	err := s.pool.RPCContext(ctx, addr, method, args, reply)
	if s.leaders.remove(c) && err != nil {
		return errors.Join(errLeaderMoved, err)
	}
	return err
}

// leaderMovedAnswer is what a forwarded call given up comes to: nil to
// send it again to the new leader (a read, an idempotent write, or any
// write given up before its request was written), or the error for the
// caller.
func leaderMovedAnswer(method string, info structs.RPCInfo, err error) error {
	if info.IsRead() || idempotentWrites[method] || rpc.NotSent(err) {
		return nil
	}
	return &structs.Error{Code: structs.ErrCodeInternal, Cause: err,
		Message: "the leader changed while the request was forwarded to it: the write may or may not have been applied"}
}
