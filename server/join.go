package server

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// joinMemberTTL is how long after its last join request a server is still
// added to the configuration by the leader. A server that stopped asking is
// either in already or gone, and a gone server must not become a voter.
const joinMemberTTL = 30 * time.Second

// memberList is what this server knows of the other servers from the join
// protocol. Cluster formation needs no gossip: each server calls Status.Join
// on the addresses it was given and on every server it hears of, until it is
// part of a configuration with a leader.
type memberList struct {
	mu           sync.Mutex
	self         structs.ServerMember
	members      map[string]structs.ServerMember // by ID, without self
	lastSeen     map[string]time.Time
	bootstrapped bool
	notify       chan struct{}
}

func newMemberList(self structs.ServerMember) *memberList {
	return &memberList{
		self:     self,
		members:  map[string]structs.ServerMember{},
		lastSeen: map[string]time.Time{},
		notify:   make(chan struct{}, 1),
	}
}

func (s *Server) selfMember() structs.ServerMember {
	top := structs.MaxMessageType()
	if s.config.maxMessageType != 0 {
		top = s.config.maxMessageType
	}
	return structs.ServerMember{
		ID:              s.nodeID,
		Name:            s.config.NodeName,
		RPCAddr:         s.rpcAddr,
		BootstrapExpect: s.config.BootstrapExpect,
		MaxMessageType:  top,
	}
}

func (m *memberList) setBootstrapped(b bool) {
	m.mu.Lock()
	m.bootstrapped = b
	m.mu.Unlock()
}

func (m *memberList) isBootstrapped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bootstrapped
}

// observe records a member. direct is true when the member itself called us,
// which is what makes it eligible to be added by the leader.
func (m *memberList) observe(mem structs.ServerMember, direct bool) {
	if mem.ID == "" || mem.RPCAddr == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mem.ID == m.self.ID {
		return
	}
	old, existed := m.members[mem.ID]
	if !existed || direct {
		m.members[mem.ID] = mem
	}
	if direct {
		m.lastSeen[mem.ID] = time.Now()
	}
	if !existed || old.RPCAddr != mem.RPCAddr {
		select {
		case m.notify <- struct{}{}:
		default:
		}
	}
}

func (m *memberList) changed() <-chan struct{} { return m.notify }

// forget drops a member, so the leader does not add a server an operator
// just removed until that server asks to join again.
func (m *memberList) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.members, id)
	delete(m.lastSeen, id)
}

// all returns every known member, self included, sorted by ID.
func (m *memberList) all() []structs.ServerMember {
	m.mu.Lock()
	defer m.mu.Unlock()
	self := m.self
	self.Bootstrapped = m.bootstrapped
	out := []structs.ServerMember{self}
	for _, mem := range m.members {
		out = append(out, mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// recent returns the members that called us within ttl and after since.
func (m *memberList) recent(ttl time.Duration, since time.Time) []structs.ServerMember {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []structs.ServerMember
	for id, mem := range m.members {
		if seen := m.lastSeen[id]; time.Since(seen) <= ttl && seen.After(since) {
			out = append(out, mem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// joinLoop keeps calling Status.Join on the configured and discovered
// servers until this server is in a Raft configuration that has a leader,
// bootstrapping the cluster when bootstrap_expect servers have met and none
// of them has state yet. It keeps running at a slower pace afterwards so a
// server removed by mistake, or a leader that lost our request, still hears
// from us.
func (s *Server) joinLoop() {
	interval := s.config.RetryJoinInterval
	for {
		joined := s.joinRound()
		wait := interval
		if joined {
			wait = 5 * interval
		}
		select {
		case <-s.shutdownCtx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// joinRound is one round of the join protocol; it reports whether this
// server is a member of a configuration with a leader.
func (s *Server) joinRound() bool {
	self := s.members.all()
	selfMember := self[slices.IndexFunc(self, func(m structs.ServerMember) bool { return m.ID == s.nodeID })]

	targets := map[string]bool{}
	for _, a := range s.config.RetryJoin {
		if a != s.rpcAddr {
			targets[a] = true
		}
	}
	for _, m := range self {
		if m.ID != s.nodeID {
			targets[m.RPCAddr] = true
		}
	}

	reached := map[string]structs.StatusJoinResponse{}
	for addr := range targets {
		var resp structs.StatusJoinResponse
		req := structs.StatusJoinRequest{Member: selfMember}
		if err := s.pool.RPC(addr, "Status.Join", &req, &resp); err != nil {
			s.logger.Debug("join attempt failed", "address", addr, "error", err)
			continue
		}
		s.members.observe(resp.Member, false)
		for _, k := range resp.Known {
			s.members.observe(k, false)
		}
		reached[resp.Member.ID] = resp
	}

	if s.inConfigurationWithLeader() {
		return true
	}
	if !s.members.isBootstrapped() && s.config.BootstrapExpect > 1 {
		s.maybeBootstrap(reached)
	}
	return false
}

// maybeBootstrap forms the cluster once bootstrap_expect servers, none with
// Raft state, have found each other. Every server that gets here computes the
// same configuration (the same members sorted by ID), so several of them
// bootstrapping at once agree.
func (s *Server) maybeBootstrap(reached map[string]structs.StatusJoinResponse) {
	expect := s.config.BootstrapExpect
	var servers []structs.ServerMember
	for _, m := range s.members.all() {
		if m.BootstrapExpect == 0 {
			continue
		}
		if m.BootstrapExpect != expect {
			s.logger.Error("servers disagree on bootstrap_expect; not bootstrapping",
				"ours", expect, "server", m.Name, "theirs", m.BootstrapExpect)
			return
		}
		servers = append(servers, m)
	}
	if len(servers) < expect {
		s.logger.Info("waiting for servers to bootstrap", "known", len(servers), "expect", expect)
		return
	}
	for _, m := range servers {
		if m.ID == s.nodeID {
			continue
		}
		resp, ok := reached[m.ID]
		if !ok {
			s.logger.Info("waiting to reach every server before bootstrapping", "unreached", m.Name)
			return
		}
		if len(resp.Peers) > 0 || resp.Member.Bootstrapped {
			// A cluster exists already; its leader will add us.
			s.logger.Info("found an existing cluster; waiting to be added", "server", m.Name)
			return
		}
	}
	cfg := raft.Configuration{}
	for _, m := range servers {
		cfg.Servers = append(cfg.Servers, raft.Server{
			ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RPCAddr), Suffrage: raft.Voter,
		})
	}
	s.logger.Info("bootstrapping the cluster", "servers", len(cfg.Servers))
	if err := s.waitFuture(s.raft.BootstrapCluster(cfg)); err != nil && err != raft.ErrCantBootstrap {
		s.logger.Error("bootstrap failed", "error", err)
		return
	}
	s.members.setBootstrapped(true)
}

// inConfigurationWithLeader reports whether this server is a voter in a
// configuration that currently has a leader.
func (s *Server) inConfigurationWithLeader() bool {
	if addr, _ := s.raft.LeaderWithID(); addr == "" {
		return false
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(s.nodeID) {
			s.members.setBootstrapped(true)
			return true
		}
	}
	return false
}
