package server

import (
	"sync"
	"time"

	"github.com/volplane/volplane/structs"
)

// entryTypeCheckTTL is how long the leader keeps its answer to which
// entry types every server applies: servers announce their builds in the
// join protocol's calls, every few seconds.
const entryTypeCheckTTL = time.Second

// entryTypeGate keeps the highest Raft entry type that every server in the
// configuration announces it applies.
type entryTypeGate struct {
	mu      sync.Mutex
	checked time.Time
	top     structs.MessageType
}

// clusterMaxMessageType returns the highest entry type every server in the
// Raft configuration applies, as they announced it (structs.ServerMember).
// A server not heard from yet, or of a build that announces nothing,
// counts as 0, and so does a configuration that cannot be read: only types
// every build has are then written. A leader that wrote a newer type than
// this would stop the FSM of a server that does not know it.
func (s *Server) clusterMaxMessageType() structs.MessageType {
	g := &s.entryTypes
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.checked.IsZero() && time.Since(g.checked) < entryTypeCheckTTL {
		return g.top
	}
	top := s.members.maxMessageType(s.nodeID)
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		top = 0
	} else {
		for _, srv := range f.Configuration().Servers {
			top = min(top, s.members.maxMessageType(string(srv.ID)))
		}
	}
	g.checked, g.top = time.Now(), top
	return top
}

// entryTypeApplied says whether every server in the configuration
// applies entries of type t.
func (s *Server) entryTypeApplied(t structs.MessageType) bool {
	return s.clusterMaxMessageType() >= t
}

// maxMessageType is the highest entry type a server announced it applies:
// 0 for one not heard from.
func (m *memberList) maxMessageType(id string) structs.MessageType {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == m.self.ID {
		return m.self.MaxMessageType
	}
	return m.members[id].MaxMessageType
}
