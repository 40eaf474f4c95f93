package server

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// barrierTimeout bounds the barrier a new leader applies before it serves
// consistent reads.
const barrierTimeout = 30 * time.Second

// A new leader that cannot set up its leadership (the barrier fails) tries
// again after a pause that starts at leaderSetupRetryMin and doubles up to
// leaderSetupRetryMax. After leaderSetupMaxAttempts failures in a row it
// hands leadership to another server, which may fare better; when no
// other server can take it (a single server), it goes on trying.
const (
	leaderSetupRetryMin    = 250 * time.Millisecond
	leaderSetupRetryMax    = 5 * time.Second
	leaderSetupMaxAttempts = 5
)

// monitorLeadership turns Raft's leadership notifications into starting and
// stopping the leader's own work.
func (s *Server) monitorLeadership() {
	for {
		select {
		case <-s.shutdownCtx.Done():
			s.revokeLeadership()
			return
		case isLeader := <-s.leaderNotify:
			if isLeader {
				s.establishLeadership()
			} else {
				s.revokeLeadership()
			}
		}
	}
}

// establishLeadership waits until every entry committed by earlier leaders
// is applied here, then starts the leader-only loops. Until then the server
// counts as leader for Raft but serves no consistent read and runs none of
// the leader's work, so a setup that fails is retried with backoff and,
// past a bound, leadership is handed over (see setupLeadershipWithRetry):
// a leader that only logged its failure would lead the cluster while doing
// none of its work.
func (s *Server) establishLeadership() {
	s.leaderMu.Lock()
	if s.leaderDone != nil {
		s.leaderMu.Unlock()
		return
	}
	done := make(chan struct{})
	s.leaderDone = done
	s.leaderMu.Unlock()

	s.logger.Info("cluster leadership acquired")
	s.leaderWG.Add(1)
	go func() {
		defer s.leaderWG.Done()
		if !s.setupLeadershipWithRetry(done) {
			return
		}
		s.leaderMu.Lock()
		s.leaderReady = true
		s.leaderMu.Unlock()
		// Requests held until this leader is ready go on now, rather
		// than when their backoff ends.
		s.leaders.readyAt(s.rpcAddr)
		s.heartbeats.start()
		defer s.heartbeats.stop()
		s.leaderWG.Add(4)
		go func() {
			defer s.leaderWG.Done()
			s.runPlacer(done)
		}()
		go func() {
			defer s.leaderWG.Done()
			s.runDrainer(done)
		}()
		go func() {
			defer s.leaderWG.Done()
			s.runGC(done)
		}()
		go func() {
			defer s.leaderWG.Done()
			s.runVolumeWatcher(done)
		}()
		s.leaderLoop(done)
	}()
}

// setupLeadershipWithRetry runs setupLeadership until it succeeds, and
// reports whether it did while this server still leads. Each failure is
// followed by a pause with backoff; from the leaderSetupMaxAttempts-th on,
// it first tries to hand leadership to another server, and stops once one
// took it. It gives up when leadership ends (done) or the server shuts
// down.
func (s *Server) setupLeadershipWithRetry(done <-chan struct{}) bool {
	maxAttempts := cmp.Or(s.config.leaderSetupMaxAttempts, leaderSetupMaxAttempts)
	delay := cmp.Or(s.config.leaderSetupRetryMin, leaderSetupRetryMin)
	maxDelay := max(cmp.Or(s.config.leaderSetupRetryMax, leaderSetupRetryMax), delay)
	for attempt := 1; ; attempt++ {
		err := s.setupLeadership(attempt)
		select {
		case <-done:
			return false
		case <-s.shutdownCtx.Done():
			return false
		default:
		}
		if err == nil {
			if attempt > 1 {
				s.logger.Info("leadership established after failed attempts", "attempts", attempt)
			}
			return true
		}
		if s.raft.State() != raft.Leader {
			// Raft stepped down already: the notification that follows
			// ends this leadership.
			s.logger.Warn("setting up leadership failed after raft stepped down", "error", err)
			return false
		}
		log := s.logger.With("attempt", attempt, "error", err)
		if attempt >= maxAttempts {
			log.Error("setting up leadership keeps failing; transferring leadership to another server")
			terr := s.waitFuture(s.raft.LeadershipTransfer())
			if terr == nil {
				// Raft's notification that this server no longer leads
				// ends this leadership (closes done).
				s.logger.Info("leadership transferred after the setup failed", "attempts", attempt)
				return false
			}
			log.Error("transferring leadership failed; retrying the setup", "transfer_error", terr, "retry_in", delay)
		} else {
			log.Warn("setting up leadership failed; retrying", "retry_in", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-done:
			t.Stop()
			return false
		case <-s.shutdownCtx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		delay = min(delay*2, maxDelay)
	}
}

// setupLeadership is what a new leader must finish before it serves
// consistent reads and runs the leader's loops: a barrier, so that every
// entry committed by earlier leaders is applied here, and a cluster keyring
// to seal secrets with.
func (s *Server) setupLeadership(attempt int) error {
	if err := s.waitFuture(s.raft.Barrier(barrierTimeout)); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if err := s.establishKeyring(); err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	if s.config.leaderSetupHook != nil {
		return s.config.leaderSetupHook(attempt)
	}
	return nil
}

// leaderContext returns a context that ends when leadership ends (done is
// closed) or the server shuts down, for leader-only loops that wait on a
// context. The caller must call cancel when its loop returns, which also
// ends the goroutine that watches done.
func (s *Server) leaderContext(done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(s.shutdownCtx)
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// revokeLeadership stops the leader-only work and waits for it.
func (s *Server) revokeLeadership() {
	s.leaderMu.Lock()
	done := s.leaderDone
	s.leaderDone = nil
	s.leaderReady = false
	s.leaderMu.Unlock()
	if done == nil {
		return
	}
	close(done)
	s.leaderWG.Wait()
	s.logger.Info("cluster leadership lost")
}

// isLeaderReady reports whether this server may serve consistent reads.
func (s *Server) isLeaderReady() bool {
	s.leaderMu.Lock()
	defer s.leaderMu.Unlock()
	return s.leaderReady
}

// leaderLoop is the leader's periodic work: adding servers that asked to
// join to the Raft configuration.
func (s *Server) leaderLoop(done <-chan struct{}) {
	t := time.NewTicker(s.config.RetryJoinInterval / 2)
	defer t.Stop()
	since := time.Now()
	for {
		s.reconcileMembers(since)
		select {
		case <-done:
			return
		case <-s.shutdownCtx.Done():
			return
		case <-s.members.changed():
		case <-t.C:
		}
	}
}

// reconcileMembers adds every server that asked to join since leader (the
// moment this server's leadership began) and within joinMemberTTL, and is
// not yet in the Raft configuration, as a voter. Only a call made to this
// leader counts: an operator's remove-peer forgets the server on the
// leader that removed it, but the other servers still remember its earlier
// calls, and a dead server removed just before a change of leader would
// otherwise come back as a voter that never answers. A live server outside
// the configuration calls every join interval, so it is added within one.
func (s *Server) reconcileMembers(leader time.Time) {
	s.reconciles.Add(1)
	future := s.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		s.logger.Warn("reading the raft configuration", "error", err)
		return
	}
	known := make(map[raft.ServerID]raft.ServerAddress)
	for _, srv := range future.Configuration().Servers {
		known[srv.ID] = srv.Address
	}
	for _, m := range s.members.recent(joinMemberTTL, leader) {
		addr, ok := known[raft.ServerID(m.ID)]
		if ok && addr == raft.ServerAddress(m.RPCAddr) {
			continue
		}
		// A known ID at a new address is re-added at the new address.
		s.logger.Info("adding server to the raft configuration", "id", m.ID, "name", m.Name, "address", m.RPCAddr)
		f := s.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RPCAddr), 0, s.config.RaftTimeout)
		if err := s.waitFuture(f); err != nil {
			s.logger.Warn("adding server failed", "id", m.ID, "error", err)
		}
	}
}
