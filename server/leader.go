package server

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// barrierTimeout bounds the barrier a new leader applies before it serves
// consistent reads.
const barrierTimeout = 30 * time.Second

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
// is applied here, then starts the leader-only loops.
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
		if err := s.raft.Barrier(barrierTimeout).Error(); err != nil {
			s.logger.Error("barrier after acquiring leadership failed; stepping back", "error", err)
			return
		}
		select {
		case <-done:
			return
		default:
		}
		s.leaderMu.Lock()
		s.leaderReady = true
		s.leaderMu.Unlock()
		s.heartbeats.start()
		defer s.heartbeats.stop()
		s.leaderWG.Add(2)
		go func() {
			defer s.leaderWG.Done()
			s.runPlacer(done)
		}()
		go func() {
			defer s.leaderWG.Done()
			s.runVolumeWatcher(done)
		}()
		s.leaderLoop(done)
	}()
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
	for {
		s.reconcileMembers()
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

// reconcileMembers adds every server that recently asked to join and is
// not yet in the Raft configuration as a voter.
func (s *Server) reconcileMembers() {
	future := s.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		s.logger.Warn("reading the raft configuration", "error", err)
		return
	}
	known := make(map[raft.ServerID]raft.ServerAddress)
	for _, srv := range future.Configuration().Servers {
		known[srv.ID] = srv.Address
	}
	for _, m := range s.members.recent(joinMemberTTL) {
		addr, ok := known[raft.ServerID(m.ID)]
		if ok && addr == raft.ServerAddress(m.RPCAddr) {
			continue
		}
		// A known ID at a new address is re-added at the new address.
		s.logger.Info("adding server to the raft configuration", "id", m.ID, "name", m.Name, "address", m.RPCAddr)
		f := s.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RPCAddr), 0, s.config.RaftTimeout)
		if err := f.Error(); err != nil {
			s.logger.Warn("adding server failed", "id", m.ID, "error", err)
		}
	}
}
