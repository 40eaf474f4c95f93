package structs

// AgentMember is a server as Nomad's AgentMember encodes it (one Serf
// member; volplane has no Serf, the Raft configuration stands in), in the
// bodies of GET /v1/agent/members and /v1/agent/self.
type AgentMember struct {
	Name        string
	Addr        string
	Port        uint16
	Tags        map[string]string
	Status      string
	ProtocolMin uint8
	ProtocolMax uint8
	ProtocolCur uint8
	DelegateMin uint8
	DelegateMax uint8
	DelegateCur uint8
}

// ServerMembers is the body of GET /v1/agent/members, as Nomad's.
type ServerMembers struct {
	ServerName   string
	ServerRegion string
	ServerDC     string
	Members      []*AgentMember
}

// AgentSelf is the body of GET /v1/agent/self, as Nomad's: the agent's
// configuration (what is not secret), its member entry and its stats.
type AgentSelf struct {
	Config map[string]any
	Member *AgentMember
	Stats  map[string]map[string]string
}
