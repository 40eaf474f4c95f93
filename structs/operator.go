package structs

// RaftServer is one server in the Raft configuration.
type RaftServer struct {
	ID           string
	Node         string
	Address      string
	Leader       bool
	Voter        bool
	RaftProtocol string
}

// RaftConfigurationResponse is the Raft configuration as the leader sees it.
type RaftConfigurationResponse struct {
	Servers []*RaftServer
	Index   uint64
}

// RaftPeerRequest names a peer to remove, by ID or by address.
type RaftPeerRequest struct {
	ID      string
	Address string
	WriteRequest
}

// ServerMember is how a server introduces itself to another at join time.
type ServerMember struct {
	ID              string
	Name            string
	RPCAddr         string
	BootstrapExpect int
	// Bootstrapped is true once the server has Raft state of its own.
	Bootstrapped bool
	// MaxMessageType is the highest Raft entry type the server's build
	// applies (message types are append-only); 0 from builds that came
	// before it was announced. A leader writes an entry of a newer type
	// only once every server in the configuration applies it: an unknown
	// type stops a server's FSM.
	MaxMessageType MessageType
}

// StatusJoinRequest is sent by a server to the addresses it was told to
// join; StatusJoinResponse returns the receiver's own view.
type StatusJoinRequest struct {
	Member ServerMember
	QueryOptions
}

// StatusJoinResponse returns the receiver's identity and the Raft peers it
// knows, so the caller can bootstrap or wait to be added.
type StatusJoinResponse struct {
	Member ServerMember
	// Peers is the receiver's Raft configuration, empty before bootstrap.
	Peers []string
	// Known are the members the receiver has heard of, itself included.
	Known []ServerMember
	QueryMeta
}
