package server

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// stoppedFutureGrace is how long after Raft has shut down the waits for its
// futures end, all at once (a caller that waits on many in turn does not
// wait for each): a future Raft answered is answered by then, and only the
// goroutine that reads it has to run.
const stoppedFutureGrace = time.Second

// stoppedFutureMin is the least a wait that begins after that grace gives
// the goroutine that reads an answered future.
const stoppedFutureMin = 20 * time.Millisecond

// errRaftStopped answers a future that Raft left unanswered when it shut
// down.
var errRaftStopped = errors.New("raft shut down before answering")

// waitFuture returns f's answer, or errRaftStopped when Raft shut down
// without answering it.
//
// hashicorp/raft does not answer every future on shutdown: entries already
// committed and queued for its state machine (applies, barriers,
// configuration changes) and leadership checks queued for its main loop
// are dropped with their queues when it stops, and f.Error() then waits
// forever. A write endpoint, a release or a new leader's barrier waiting
// so would hold the server's shutdown until the process is killed. The
// goroutine that reads such a future stays blocked; the server is going
// away.
func (s *Server) waitFuture(f raft.Future) error {
	answer := make(chan error, 1)
	go func() { answer <- f.Error() }()
	select {
	case err := <-answer:
		return err
	case <-s.raftStopped:
	}
	t := time.NewTimer(max(time.Until(s.raftStoppedAt.Add(stoppedFutureGrace)), stoppedFutureMin))
	defer t.Stop()
	select {
	case err := <-answer:
		return err
	case <-t.C:
		s.logger.Debug("raft shut down without answering a future")
		return errRaftStopped
	}
}

// waitIndexed waits for a future of a log entry (an apply, a configuration
// change) and returns its error as raftError maps it, except that "raft is
// shut down" for an entry Raft had given an index is errRaftStopped's: Raft
// gives an entry its index as it writes it to its log, so this one was
// written, perhaps committed, and only its answer was lost to the shutdown
// (an entry refused before that has none). Another leader may apply it, so
// it must not be taken as "no leader", which a forwarder sends again.
func (s *Server) waitIndexed(f raft.IndexFuture) error {
	err := s.waitFuture(f)
	if err == nil {
		return nil
	}
	if errors.Is(err, raft.ErrRaftShutdown) && f.Index() != 0 {
		err = errRaftStopped
	}
	return raftError(err)
}

// applyResult waits for an apply and returns its FSM response and index,
// a response that is an error as the error.
func (s *Server) applyResult(f raft.ApplyFuture) (any, uint64, error) {
	if err := s.waitIndexed(f); err != nil {
		return nil, 0, err
	}
	if lf, ok := f.(leaseFuture); ok && lf.term != nil {
		s.leaderCheck.extend(lf.term, lf.start, s.readLease())
	}
	if e, ok := f.Response().(error); ok && e != nil {
		return nil, f.Index(), e
	}
	return f.Response(), f.Index(), nil
}

// raftError maps raft's errors to typed ones. Only "not leader" guarantees
// nothing was committed; after "leadership lost" the write may or may not
// have been applied, and the caller must not blindly retry.
func raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrRaftShutdown):
		return structs.ErrNoLeader
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return structs.NewError(structs.ErrCodeInternal, "leadership lost while committing: the write may or may not have been applied")
	case errors.Is(err, errRaftStopped):
		return structs.NewError(structs.ErrCodeInternal, "the server shut down while committing: the write may or may not have been applied")
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return structs.NewError(structs.ErrCodeRetryable, "raft is overloaded: %v", err)
	}
	return structs.NewError(structs.ErrCodeInternal, "raft: %v", err)
}
