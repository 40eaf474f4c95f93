package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

const (
	// raftApplyTimeout bounds how long a write waits to be enqueued.
	raftApplyTimeout = 30 * time.Second
	// raftWarnSize is the entry size above which a write is logged.
	raftWarnSize = 1 << 20
)

// forward decides where a request is served. It returns handled=true when
// the request was sent to the leader (reply filled, err its outcome), and
// handled=false when this server must serve it: a stale read, or this server
// is the leader. While there is no leader it waits up to RPCHoldTimeout.
// First it checks the request's ACL token (authorize): a refused request
// is handled, with the refusal as its error. Default reads of the
// localReads methods are served where they arrive, after a read-index
// check with the leader (readLocally).
func (s *Server) forward(method string, info structs.RPCInfo, args, reply any) (bool, error) {
	if info.IsRead() && !info.AllowStaleRead() && localReads[method] {
		done, err := s.readLocally(method, info, args)
		if !errors.Is(err, errBehindLeader) {
			return done, err
		}
		// Forwarded after all, as every other read is.
	}
	// Every server a request passes through checks its token.
	if err := s.authorize(method, info, args); err != nil {
		return true, err
	}
	if info.IsRead() && info.AllowStaleRead() {
		return false, nil
	}
	deadline := time.Now().Add(s.config.RPCHoldTimeout)
	// unsettled is the failure of an attempt of a write that may have been
	// applied (an idempotent write, sent again): if no leader answers
	// after it, the write's outcome is unknown, not "no leader".
	var unsettled error
	// lastErr is the last attempt's failure, logged if no leader answers:
	// the caller hears only "no leader", and a leader that cannot be
	// reached at all (a certificate it refuses) must still be told apart.
	var lastErr error
	// The term this request was forwarded here for, if it was; the loop
	// stamps the request with its own leader's term when it forwards it.
	received := info.LeaderTermOf()
	for attempt := 0; ; attempt++ {
		// Taken before the leader is read, so a change in between is not
		// missed by holdWait.
		changed := s.leaders.changes()
		addr, id := s.raft.LeaderWithID()
		if err := s.checkForwardedTerm(method, info, received, id); err != nil {
			return true, err
		}
		switch {
		case id == raft.ServerID(s.nodeID):
			// Consistent reads and writes alike wait for the barrier: an
			// endpoint checks a write against this server's state before
			// the Raft apply, and until every entry of the earlier leaders
			// is applied here that state can lack a job, an allocation or
			// a claim freed since, and the check would refuse the write
			// wrongly ("job not found") as a definite answer.
			//
			// And, as a read served here, they wait until a quorum has
			// confirmed this leadership (or the lease of a recent
			// confirmation holds): a leader that was frozen or cut off
			// while another was elected still believes it leads until its
			// next lease check, and its state lacks the new leader's
			// writes. Its Raft apply would fail, but a refusal from that
			// state (or a repeat found already done) needs no apply and
			// would reach the caller as a definite answer: the fault suite
			// saw a job stopped through a leader just thawed from a 3 s
			// freeze answered "job not found", and its claim never freed.
			if s.isLeaderReady() {
				err := s.confirmLeadership()
				if err == nil {
					return false, nil
				}
				lastErr = err
				s.logger.Debug("leadership not confirmed; retrying", "method", method, "error", err)
			}
		case addr != "":
			info.SetForwarded()
			// The term read after the leader: if an election began in
			// between, the leader refuses the request and it is sent again.
			info.SetLeaderTerm(s.raft.CurrentTerm())
			err := s.forwardTo(string(addr), method, args, reply)
			switch {
			case errors.Is(err, errLeaderMoved):
				if err := leaderMovedAnswer(method, info, err); err != nil {
					return true, err
				}
				if !info.IsRead() && !rpc.NotSent(err) {
					unsettled = err
				}
				// changed is closed by now: holdWait does not wait.
				s.logger.Debug("leader changed during a forwarded call; sending it to the new leader", "method", method, "old_leader", addr)
			case err == nil || !s.canRetryForward(method, info, err):
				return true, err
			default:
				if !info.IsRead() && !structs.IsRetryable(err) && !rpc.NotSent(err) {
					unsettled = err
				}
				lastErr = err
				s.logger.Debug("forward to leader failed; retrying", "method", method, "leader", addr, "error", err)
			}
		}
		if time.Now().After(deadline) || !s.holdWait(attempt, changed) {
			if lastErr != nil && s.shutdownCtx.Err() == nil {
				s.logger.Warn("no leader answered a forwarded request", "method", method, "attempts", attempt+1, "last_error", lastErr)
			}
			return true, noLeaderAnswer(unsettled)
		}
	}
}

// checkForwardedTerm refuses a write another server forwarded here for
// the leader of a term this server does not lead (any more): it is a
// request that arrived late, after its forwarder gave it up (a frozen
// leader, thawed) and may have answered its caller from another leader.
// Run now, or forwarded on, it could take effect after that answer: a claim
// refused to its caller, granted later. Refused here, nothing was applied,
// and a forwarder still waiting sends it to the leader it knows now.
func (s *Server) checkForwardedTerm(method string, info structs.RPCInfo, term uint64, leader raft.ServerID) error {
	if term == 0 || info.IsRead() {
		return nil
	}
	if leader == raft.ServerID(s.nodeID) && s.raft.CurrentTerm() == term {
		return nil
	}
	return structs.NewError(structs.ErrCodeRetryable, "%s forwarded to the leader of Raft term %d, which this server is not (term %d): not applied",
		method, term, s.raft.CurrentTerm())
}

// noLeaderAnswer is what a forwarded request that found no leader to
// answer it comes to: "no leader", which says nothing was applied, unless
// an earlier attempt of the write failed in a way that may have left it
// applied (the leader's connection broke, or another leader was elected,
// after the write was sent).
func noLeaderAnswer(unsettled error) error {
	if unsettled == nil {
		return structs.ErrNoLeader
	}
	return &structs.Error{Code: structs.ErrCodeInternal, Cause: unsettled,
		Message: "no cluster leader answered after an attempt of the write failed in flight: the write may or may not have been applied"}
}

// canRetryForward is whether a forwarded request that failed may be sent
// again: when nothing can have been committed (the leader answered "no
// leader", or the call failed before any of the request was written, which
// the pool marks NotSent: a closed pool, a context cancelled first, a
// failed dial, handshake or stream open), or the request is a read or an
// idempotent write (see idempotentWrites) whose connection broke.
func (s *Server) canRetryForward(method string, info structs.RPCInfo, err error) bool {
	if structs.IsRetryable(err) || rpc.NotSent(err) {
		return true
	}
	return (info.IsRead() || idempotentWrites[method]) && rpc.IsConnError(err)
}

// holdWait pauses between attempts to find a leader, with jitter so many
// waiting requests do not move in lockstep, and ends early when the leader
// changes (changed closes). It returns false on shutdown.
func (s *Server) holdWait(attempt int, changed <-chan struct{}) bool {
	base := 10 * time.Millisecond << min(attempt, 4)
	d := base + rand.N(base)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.shutdownCtx.Done():
		return false
	case <-changed:
		return true
	case <-t.C:
		return true
	}
}

// raftApply commits a write and returns the FSM's response and the index.
// A response that is an error is returned as the error.
func (s *Server) raftApply(t structs.MessageType, msg any) (any, uint64, error) {
	buf, err := encodeEntry(t, msg)
	if err != nil {
		return nil, 0, err
	}
	return s.applyResult(s.applyEntry(buf))
}

// encodeEntry encodes a write as a Raft log entry. The caller's ACL token
// never enters the log: it was checked before, and every server's log and
// disk would keep it otherwise.
func encodeEntry(t structs.MessageType, msg any) ([]byte, error) {
	if r, ok := msg.(structs.RequestWithToken); ok && r.RequestToken() != "" {
		token := r.RequestToken()
		r.SetRequestToken("")
		defer r.SetRequestToken(token)
	}
	buf, err := structs.Encode(t, msg)
	if err != nil {
		e := structs.NewError(structs.ErrCodeInternal, "encoding %s request: %v", t, err)
		e.Cause = err
		return nil, e
	}
	return buf, nil
}

// applyEntry starts the apply of an encoded entry.
func (s *Server) applyEntry(buf []byte) raft.ApplyFuture {
	if len(buf) > raftWarnSize {
		s.logger.Warn("large raft entry", "type", structs.MessageType(buf[0]), "bytes", len(buf))
	}
	s.leaderMu.Lock()
	term := s.leaderDone
	s.leaderMu.Unlock()
	start := time.Now()
	return leaseFuture{ApplyFuture: s.raft.Apply(buf, raftApplyTimeout), term: term, start: start}
}

// leaseFuture is a write's future with what its commit proves of the
// leadership it was written in (see leaderVerifier.extend); term is nil
// when this server did not lead when it was written.
type leaseFuture struct {
	raft.ApplyFuture
	term  chan struct{}
	start time.Time
}

// queryFn runs a read against one state store, adding what it read to ws,
// and returns the index that the result reflects.
type queryFn func(ws memdb.WatchSet, st *state.StateStore) (uint64, error)

// blockingQuery runs fn, and, when the caller asked for a MinQueryIndex,
// runs it again each time something it read changes until the result's
// index moves past MinQueryIndex or the wait expires (then it returns the
// current result, as Nomad does).
func (s *Server) blockingQuery(opts *structs.QueryOptions, meta *structs.QueryMeta, fn queryFn) error {
	ctx := s.shutdownCtx
	if opts.MinQueryIndex > 0 {
		wait := opts.MaxQueryTime
		if wait <= 0 {
			wait = structs.DefaultBlockingQueryTime
		}
		wait = min(wait, structs.MaxBlockingQueryTime)
		wait += rand.N(wait/structs.BlockingQueryJitterFrac + 1)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	for {
		st := s.fsm.State()
		ws := memdb.NewWatchSet()
		// A snapshot restore replaces the store; waiters must re-read.
		ws.Add(st.AbandonCh())
		index, err := fn(ws, st)
		if err != nil {
			return err
		}
		// Index 0 would make a client's next blocking call return at once
		// forever; 1 is the lowest index a real write has.
		meta.Index = max(index, 1)
		s.setQueryMeta(meta)
		if opts.MinQueryIndex == 0 || meta.Index > opts.MinQueryIndex {
			return nil
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return nil
		}
	}
}

// setQueryMeta fills the leader-contact fields of a read reply.
func (s *Server) setQueryMeta(m *structs.QueryMeta) {
	addr, id := s.raft.LeaderWithID()
	if id == raft.ServerID(s.nodeID) {
		m.LastContact = 0
		m.KnownLeader = true
		return
	}
	m.KnownLeader = addr != ""
	if last := s.raft.LastContact(); !last.IsZero() {
		m.LastContact = time.Since(last)
	}
}
