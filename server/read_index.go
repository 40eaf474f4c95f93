package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// localReads are the reads a follower answers from its own state after a
// read-index check with the leader (readLocally) instead of forwarding
// them: their answers come from the replicated state alone. Reads that use
// what only the leader holds in memory (node heartbeats, the Raft
// configuration as the leader sees it) or that call plugins stay
// forwarded.
var localReads = map[string]bool{
	"CSIVolume.List":           true,
	"CSIVolume.Get":            true,
	"CSIPlugin.List":           true,
	"CSIPlugin.Get":            true,
	"Job.GetJob":               true,
	"Job.List":                 true,
	"Job.Allocations":          true,
	"Alloc.GetAlloc":           true,
	"Alloc.List":               true,
	"Node.GetAllocs":           true,
	"Namespace.ListNamespaces": true,
	"Namespace.GetNamespace":   true,
	"ACL.ListPolicies":         true,
	"ACL.GetPolicy":            true,
	"ACL.ListTokens":           true,
	"ACL.GetToken":             true,
}

// readLocally decides where a default-consistency read of a localReads
// method is served, as forward does for the others. On the leader (once its
// barrier is applied, and once a quorum has confirmed its leadership, or
// while the lease of a recent confirmation holds: confirmLeadership) it is
// served here. On a follower it asks the leader for its read index
// (Status.ReadIndex: the leader confirms with a quorum that it still leads
// and answers the index its state has reached), waits until this server's
// state has reached that index, and serves it here: the answer then reflects
// every write acknowledged before the read began, as a forwarded read would,
// without the answer's trip back. A follower whose state does not reach that
// index within followerReadWait forwards the read after all
// (errBehindLeader), to the leader, which confirms its leadership before it
// answers. Without a leader that confirms, it retries until RPCHoldTimeout
// and answers ErrNoLeader: a follower cut off from the leader never answers
// a default read from its possibly stale state.
//
// The token is checked after the wait, against state that has caught up
// with the leader, so a token created just before the read is known.
func (s *Server) readLocally(method string, info structs.RPCInfo, args any) (bool, error) {
	deadline := time.Now().Add(s.config.RPCHoldTimeout)
	ctx, cancel := context.WithDeadline(s.shutdownCtx, deadline)
	defer cancel()
	for attempt := 0; ; attempt++ {
		// Taken before the leader is read, as forward does, so a change in
		// between is not missed by holdWait.
		changed := s.leaders.changes()
		addr, id := s.raft.LeaderWithID()
		switch {
		case id == raft.ServerID(s.nodeID):
			if s.isLeaderReady() {
				// As for a follower's read index: a leader that was paused
				// or cut off, and deposed meanwhile without knowing it yet,
				// must not answer from its state, which the new leader's
				// writes have passed.
				err := s.confirmLeadership()
				if err == nil {
					return s.authorizeLocal(method, args)
				}
				s.logger.Debug("leadership not confirmed for a read; retrying", "method", method, "error", err)
			}
		case addr != "":
			var reply structs.ReadIndexResponse
			// Through forwardTo, so a leader that stops answering is left
			// as soon as another is known (errLeaderMoved: asked again).
			err := s.forwardTo(string(addr), "Status.ReadIndex", &structs.GenericRequest{}, &reply)
			if err == nil {
				caughtUp, err := s.catchUp(ctx, reply.Index)
				switch {
				case err != nil:
					return true, err
				case !caughtUp:
					return true, errBehindLeader
				}
				return s.authorizeLocal(method, args)
			}
			if !errors.Is(err, errLeaderMoved) && !s.canRetryForward("Status.ReadIndex", info, err) {
				return true, err
			}
			s.logger.Debug("read index from the leader failed; retrying", "method", method, "leader", addr, "error", err)
		}
		if time.Now().After(deadline) || !s.holdWait(attempt, changed) {
			return true, structs.ErrNoLeader
		}
	}
}

// authorizeLocal checks the request's token against this server's state
// alone (no leader will see the request) and reports the request as served
// here when it passes.
func (s *Server) authorizeLocal(method string, args any) (bool, error) {
	if err := s.authorizeWith(method, args, false); err != nil {
		return true, err
	}
	return false, nil
}

// errBehindLeader is readLocally's answer when this server did not reach
// the leader's read index within followerReadWait: forward then sends the
// read to the leader, as it does every other read.
var errBehindLeader = errors.New("this server's state is behind the leader's read index")

// followerReadWait is how long a follower waits for its state to reach the
// leader's read index before it forwards the read instead: two and a half
// commit timeouts. A follower learns that entries it already holds are
// committed only from the leader's next append, which an idle leader
// sends once per commit timeout, staggered up to twice that (10 to 20 ms
// at raft_multiplier 1), so the first read after a lone write waits for
// it and the reads after it find the follower caught up. Forwarding
// sooner would send every read of those 10-20 ms to the leader; under
// writes, appends come far more often and reads stay local. A follower
// that is behind for another reason (a slow disk, a partition) forwards.
func (s *Server) followerReadWait() time.Duration {
	if s.config.followerReadWait > 0 {
		return s.config.followerReadWait
	}
	return s.config.RaftConfig.CommitTimeout*5/2 + time.Millisecond
}

// catchUp waits, at most followerReadWait and within ctx, until this
// server's state has reached index, and reports whether it has.
func (s *Server) catchUp(ctx context.Context, index uint64) (bool, error) {
	wait, cancel := context.WithTimeout(ctx, s.followerReadWait())
	defer cancel()
	err := s.waitForIndex(wait, index)
	if err != nil && ctx.Err() == nil && wait.Err() != nil {
		return false, nil
	}
	return err == nil, err
}

// waitForIndex waits until this server's state has reached index, or ctx
// ends (then ErrNoLeader: the leader's index was not reached in time, and
// the caller may try again).
func (s *Server) waitForIndex(ctx context.Context, index uint64) error {
	for {
		st := s.fsm.State()
		ws := memdb.NewWatchSet()
		// A snapshot restore replaces the store; the new one is read then.
		ws.Add(st.AbandonCh())
		latest, err := st.LatestIndexWatch(ws)
		if err != nil {
			return err
		}
		if latest >= index {
			return nil
		}
		if err := ws.WatchCtx(ctx); err != nil {
			if s.shutdownCtx.Err() != nil {
				return structs.ErrNoLeader
			}
			return structs.NewError(structs.ErrCodeNoLeader,
				"this server did not reach the leader's index %d in time (at %d)", index, latest)
		}
	}
}

// ReadIndex is asked by a follower before it answers a default read
// itself: this server confirms with a quorum that it is still the leader
// (a heartbeat round, or the lease of a recent one: readLease) and answers
// the index its state has reached, which covers every write it has
// acknowledged (a write is acknowledged after it is applied here). It
// is answered only by a leader whose barrier is applied, and only to
// servers (certificate role server when tls.rpc is on); it is never
// forwarded.
func (e *Status) ReadIndex(args *structs.GenericRequest, reply *structs.ReadIndexResponse) error {
	s := e.srv
	if err := s.confirmLeadership(); err != nil {
		return err
	}
	index, err := s.fsm.State().LatestIndex()
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// confirmLeadership returns nil when this server leads, its barrier is
// applied, and a quorum has confirmed its leadership: a heartbeat round that
// began after the call, or the lease of an earlier one of the same
// leadership (readLease). ErrNoLeader otherwise.
func (s *Server) confirmLeadership() error {
	s.leaderMu.Lock()
	ready, term := s.leaderReady, s.leaderDone
	s.leaderMu.Unlock()
	if _, id := s.raft.LeaderWithID(); id != raft.ServerID(s.nodeID) || !ready {
		return structs.ErrNoLeader
	}
	return s.leaderCheck.verify(s.shutdownCtx, s.raft, term, s.readLease())
}

// readLease is how long a confirmed leadership answers read-index requests
// without another heartbeat round: half the Raft heartbeat timeout. A
// follower that acknowledged the round refuses to vote for another
// candidate while it still has this leader, at least a heartbeat timeout
// after that contact (raft's leader stickiness), so no other leader can
// commit anything within the lease; the half leaves room for clocks that
// run at different rates and for scheduling delays. Raft's
// LeaderLeaseTimeout is not that bound: it only says when a leader that
// lost its quorum steps down.
func (s *Server) readLease() time.Duration {
	if s.config.RaftConfig == nil {
		return 0
	}
	return s.config.RaftConfig.HeartbeatTimeout / 2
}

// leaderVerifier confirms leadership for read-index requests, sharing one
// Raft heartbeat round (raft.VerifyLeader) among the requests that arrive
// while another round is under way: a request joins the next round, which
// starts after the current one, so the round that answers it began after
// it arrived. Without sharing, each of many concurrent reads would cost the
// followers a heartbeat of its own. No goroutine of its own: the first
// waiter of a round runs it.
type leaderVerifier struct {
	mu      sync.Mutex
	running *verifyRound // the round under way, nil when none
	next    *verifyRound // the round new requests join, nil when none
	// leaseTerm and leaseUntil are the lease the latest successful round
	// gave: until leaseUntil, within the leadership leaseTerm identifies,
	// leadership needs no new round.
	leaseTerm  any
	leaseUntil time.Time
	// wait waits for a round's future (Server.waitFuture); nil: its
	// Error method.
	wait func(raft.Future) error
}

// extend records that a quorum acknowledged this leadership after start:
// a write committed in the leadership term identifies proves it as a
// heartbeat round does (the followers that took the entry took it after
// it was written, and keep to this leader for a heartbeat timeout since),
// so under writes leadership is confirmed without rounds of its own.
func (v *leaderVerifier) extend(term any, start time.Time, lease time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.extendLocked(term, start, lease)
}

func (v *leaderVerifier) extendLocked(term any, start time.Time, lease time.Duration) {
	if lease > 0 && (v.leaseTerm != term || start.Add(lease).After(v.leaseUntil)) {
		v.leaseTerm, v.leaseUntil = term, start.Add(lease)
	}
}

type verifyRound struct {
	done chan struct{}
	err  error
}

// verify returns nil once a heartbeat round that began after the call has
// confirmed that r still leads, or at once while the lease of an earlier
// round of the same leadership term (any value that identifies it) holds;
// ErrNoLeader when r no longer leads.
func (v *leaderVerifier) verify(ctx context.Context, r *raft.Raft, term any, lease time.Duration) error {
	v.mu.Lock()
	if v.leaseTerm == term && time.Now().Before(v.leaseUntil) {
		v.mu.Unlock()
		return nil
	}
	if v.next == nil {
		v.next = &verifyRound{done: make(chan struct{})}
	}
	mine := v.next
	for {
		switch {
		case v.running == nil:
			// Rounds start in order, so mine is the next one: run it.
			v.running, v.next = mine, nil
			v.mu.Unlock()
			start := time.Now()
			var err error
			if f := r.VerifyLeader(); v.wait != nil {
				err = v.wait(f)
			} else {
				err = f.Error()
			}
			if errors.Is(err, errRaftStopped) {
				// Shut down before it answered: this server leads no more.
				err = raft.ErrRaftShutdown
			}
			if err != nil {
				err = raftError(err)
				if !errors.Is(err, structs.ErrNoLeader) {
					err = structs.NewError(structs.ErrCodeNoLeader, "confirming leadership: %s", structs.MessageOf(err))
				}
			}
			v.mu.Lock()
			if err == nil {
				v.extendLocked(term, start, lease)
			}
			mine.err = err
			close(mine.done)
			v.running = nil
			v.mu.Unlock()
			return err
		case v.running == mine:
			v.mu.Unlock()
			select {
			case <-mine.done:
				return mine.err
			case <-ctx.Done():
				return structs.ErrNoLeader
			}
		default:
			// Another round is under way; mine starts when it ends.
			wait := v.running.done
			v.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return structs.ErrNoLeader
			}
			v.mu.Lock()
			select {
			case <-mine.done:
				v.mu.Unlock()
				return mine.err
			default:
			}
		}
	}
}
