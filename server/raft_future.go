package server

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// stoppedFutureGrace is how long a wait for a Raft future goes on once Raft
// has shut down: a future Raft answered is answered by then, and only the
// goroutine that reads it has to run.
const stoppedFutureGrace = time.Second

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
	t := time.NewTimer(stoppedFutureGrace)
	defer t.Stop()
	select {
	case err := <-answer:
		return err
	case <-t.C:
		s.logger.Debug("raft shut down without answering a future")
		return errRaftStopped
	}
}

// applyResult waits for an apply and returns its FSM response and index,
// a response that is an error as the error.
func (s *Server) applyResult(f raft.ApplyFuture) (any, uint64, error) {
	if err := s.waitFuture(f); err != nil {
		if errors.Is(err, raft.ErrRaftShutdown) && f.Index() != 0 {
			// Raft gives an entry its index as it writes it to its log:
			// this one was written, perhaps committed, and only its
			// answer was lost to the shutdown (an entry refused before
			// that has none). Another leader may apply it, so it must not
			// be taken as "no leader", which a forwarder sends again.
			err = errRaftStopped
		}
		return nil, 0, raftError(err)
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
