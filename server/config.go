package server

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/scheduler"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/tlsutil"
)

// Config is everything a server agent needs to start. The agent command
// fills it from flags and the HCL config file.
type Config struct {
	// NodeName is the server's human name; defaults to the host name.
	NodeName string
	// DataDir holds the node ID, the Raft log and stable store, and the
	// snapshots. Empty with DevMode means everything is kept in memory.
	DataDir string
	// DevMode keeps Raft in memory and bootstraps a single server.
	DevMode bool
	// EnableDebug turns on the profiling routes (GET /v1/agent/pprof/...)
	// while ACLs are off, as Nomad's enable_debug; with ACLs on they take a
	// token with agent write instead.
	EnableDebug bool

	// RPCAddr is where the multiplexed RPC/Raft listener binds ("ip:port",
	// port 0 picks a free one). RPCAdvertise is the address other servers
	// and clients dial; it defaults to the bound address.
	RPCAddr      string
	RPCAdvertise string
	// HTTPAddr is where the HTTP API binds; empty disables it.
	HTTPAddr string
	// HTTPWritesReady, when set, holds the HTTP API's writes until it is
	// closed, for a bounded time (see httpapi.Config.WritesReady); the dev
	// agent closes it once its own client has registered.
	HTTPWritesReady <-chan struct{}

	// BootstrapExpect is the number of servers to wait for before forming a
	// cluster; 1 bootstraps alone. 0 means join an existing cluster only.
	BootstrapExpect int
	// RetryJoin are RPC addresses of other servers to join, tried until one
	// answers.
	RetryJoin []string
	// RetryJoinInterval is the pause between join rounds.
	RetryJoinInterval time.Duration

	// RaftConfig lets tests lower timeouts and the snapshot threshold.
	RaftConfig *raft.Config
	// RaftTimeout bounds Raft transport operations.
	RaftTimeout time.Duration
	// RaftLogStore is the backend of the Raft log on disk (LogStoreBoltDB
	// or LogStoreWAL, as Consul's raft_logstore.backend); empty keeps the
	// one the data dir holds, or DefaultLogStore for a new server.
	RaftLogStore string

	// RPCHoldTimeout is how long a request waits for a leader to appear
	// before it fails with the no-leader error.
	RPCHoldTimeout time.Duration

	// MaxRequestBytes bounds one RPC request and one HTTP body.
	MaxRequestBytes int64

	// HeartbeatTTL is handed to clients; a node missing heartbeats for longer
	// than the TTL plus NodeGracePeriod is marked down.
	HeartbeatTTL    time.Duration
	NodeGracePeriod time.Duration
	// NodeGCThreshold is how long a node stays down before the node GC
	// removes it, with its plugin instances (default 24h, Nomad's
	// node_gc_threshold).
	NodeGCThreshold time.Duration

	// ServerRPCTimeout bounds a call to another server (a forwarded request,
	// a join); blocking queries get their wait on top. Without it a frozen
	// leader would hold forwarded writes until yamux's keepalive gives up.
	ServerRPCTimeout time.Duration

	// ReleaseBaseDelay and ReleaseMaxDelay bound the backoff of a failed
	// release step (defaults 1 s and 5 min).
	ReleaseBaseDelay, ReleaseMaxDelay time.Duration

	// ReschedulePolicy is how long a failed allocation's replacement waits
	// (zero: scheduler.DefaultReschedulePolicy, 30 s doubling to an hour).
	ReschedulePolicy scheduler.ReschedulePolicy

	// ClientRPCTimeout bounds a call to a client agent (a CSI plugin call
	// with its retries).
	ClientRPCTimeout time.Duration

	// Region is the server's region (default "global"): certificate role
	// names are checked in it.
	Region string
	// TLS is the agent's TLS configuration. Nil, or one with TLS off, keeps
	// the cluster open: anything that reaches the RPC port may act as a
	// server or a node, as in Nomad without TLS.
	TLS *tlsutil.Configurator

	// NodeIntroRequired makes a node that registers for the first time
	// present a node introduction token: one of NodeIntroTokens, or one
	// created with `volplane operator node-intro create`.
	NodeIntroRequired bool
	// NodeIntroTokens are introduction secrets from the configuration
	// file: reusable, without expiry, never stored in Raft.
	NodeIntroTokens []string

	// ACLEnabled turns on ACL enforcement: every HTTP route and RPC
	// endpoint then checks the caller's token (acl { enabled = true }).
	ACLEnabled bool
	// ACLTokenTTL and ACLPolicyTTL bound how long a resolved token and a
	// compiled set of policies are cached (acl { token_ttl, policy_ttl };
	// default 30s). A change to the tokens or policies in the state ends
	// every cached entry at once, whatever its age.
	ACLTokenTTL, ACLPolicyTTL time.Duration

	// MaxGroupCount bounds a task group's count at registration (default
	// structs.DefaultMaxGroupCount, at most structs.MaxGroupCountCeiling).
	MaxGroupCount int

	// Limits on what one caller may hold. For the two per-client limits, 0
	// means the default (100, as Nomad's) and a negative value no limit.
	RPCMaxConnsPerClient  int
	HTTPMaxConnsPerClient int
	// RPCHandshakeTimeout bounds a new connection's first byte and TLS
	// handshake (default 5s).
	RPCHandshakeTimeout time.Duration
	// RPCMaxStreamsPerSession bounds the streams of one yamux session
	// served at once (default rpc.DefaultMaxStreamsPerSession).
	RPCMaxStreamsPerSession int
	// HTTPBodyTimeout bounds the reading of one request body (default 30s).
	HTTPBodyTimeout time.Duration

	// CSICallTimeout bounds, much more tightly, the calls to client agents
	// made while claiming and releasing volumes (a claim's controller
	// publish, a release's node and controller detach, an operator's
	// detach): the agent ends the plugin call when it passes, so a hung
	// plugin holds a claim no longer than that (default 30 s).
	CSICallTimeout time.Duration

	Logger hclog.Logger

	// pausable (tests) lets the server pause its connections as a
	// stopped process would (Server.pause).
	pausable bool
	// maxMessageType, when set (tests), is the highest entry type the
	// server announces it applies, as a server of an older build would.
	maxMessageType structs.MessageType
	// followerReadWait, when set (tests), replaces the wait of a follower
	// for the leader's read index before it forwards a read (see
	// Server.followerReadWait).
	followerReadWait time.Duration
	// leaderSetupHook, when set (tests), runs after the barrier of each
	// attempt to set up leadership, numbered from 1; an error fails the
	// attempt as a failed barrier does.
	leaderSetupHook func(attempt int) error
	// wrapFSM, when set (tests), wraps the state machine Raft applies to.
	wrapFSM func(raft.BatchingFSM) raft.BatchingFSM
	// walSegmentSize, when set (tests), is the wal backend's segment size
	// in bytes instead of its 64 MiB: a log truncated after a snapshot then
	// loses whole segments, and what they held can only be sent as a
	// snapshot.
	walSegmentSize int
	// leaderSetupRetryMin, leaderSetupRetryMax and leaderSetupMaxAttempts,
	// when set (tests), replace the constants of the same names.
	leaderSetupRetryMin, leaderSetupRetryMax time.Duration
	leaderSetupMaxAttempts                   int
}

// DefaultConfig returns the production defaults.
func DefaultConfig() *Config {
	rc := raft.DefaultConfig()
	rc.SnapshotThreshold = 8192
	rc.TrailingLogs = 10240
	// Replication figures carry the follower as a peer_id label only, not
	// also in the metric's name (a series per server ever known); the
	// bench's bare raft side, which takes this configuration, likewise.
	rc.NoLegacyTelemetry = true
	if err := SetRaftMultiplier(rc, MinRaftMultiplier); err != nil {
		panic(err) // the base timings are constants
	}
	return &Config{
		RPCAddr:           "127.0.0.1:4647",
		HTTPAddr:          "127.0.0.1:4646",
		RetryJoinInterval: 2 * time.Second,
		RaftConfig:        rc,
		RaftTimeout:       10 * time.Second,
		RPCHoldTimeout:    5 * time.Second,
		MaxRequestBytes:   4 << 20,
		HeartbeatTTL:      10 * time.Second,
		NodeGracePeriod:   10 * time.Second,
		NodeGCThreshold:   structs.DefaultNodeGCThreshold,
		ClientRPCTimeout:  2 * time.Minute,
		CSICallTimeout:    30 * time.Second,
		ServerRPCTimeout:  10 * time.Second,
		Region:            tlsutil.DefaultRegion,

		RPCMaxConnsPerClient:  DefaultMaxConnsPerClient,
		HTTPMaxConnsPerClient: DefaultMaxConnsPerClient,
		RPCHandshakeTimeout:   rpc.DefaultHandshakeTimeout,
		HTTPBodyTimeout:       30 * time.Second,
	}
}

// DefaultMaxConnsPerClient is the default limit of connections from one IP
// address to the RPC port and to the HTTP port, as Nomad's.
const DefaultMaxConnsPerClient = 100

// connLimit turns a per-client limit setting into the listener's: 0 is
// the default, negative no limit.
func connLimit(v int) int {
	switch {
	case v == 0:
		return DefaultMaxConnsPerClient
	case v < 0:
		return 0
	}
	return v
}

// normalize fills defaults and rejects a configuration that cannot work,
// naming the setting at fault.
func (c *Config) normalize() error {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "volplane", Level: hclog.Info})
	}
	if c.RaftConfig == nil {
		c.RaftConfig = d.RaftConfig
	}
	if c.RaftTimeout == 0 {
		c.RaftTimeout = d.RaftTimeout
	}
	if c.RPCHoldTimeout == 0 {
		c.RPCHoldTimeout = d.RPCHoldTimeout
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = d.MaxRequestBytes
	}
	if c.RetryJoinInterval == 0 {
		c.RetryJoinInterval = d.RetryJoinInterval
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = d.HeartbeatTTL
	}
	if c.NodeGracePeriod == 0 {
		c.NodeGracePeriod = d.NodeGracePeriod
	}
	if c.NodeGCThreshold == 0 {
		c.NodeGCThreshold = d.NodeGCThreshold
	}
	if c.NodeGCThreshold < 0 {
		return fmt.Errorf("node_gc_threshold must be positive (got %s)", c.NodeGCThreshold)
	}
	if c.ServerRPCTimeout == 0 {
		c.ServerRPCTimeout = d.ServerRPCTimeout
	}
	if c.ReschedulePolicy == (scheduler.ReschedulePolicy{}) {
		c.ReschedulePolicy = scheduler.DefaultReschedulePolicy
	}
	if c.ClientRPCTimeout == 0 {
		c.ClientRPCTimeout = d.ClientRPCTimeout
	}
	if c.CSICallTimeout == 0 {
		c.CSICallTimeout = d.CSICallTimeout
	}
	if c.RPCAddr == "" {
		c.RPCAddr = d.RPCAddr
	}
	if c.Region == "" {
		c.Region = d.Region
	}
	if c.MaxGroupCount == 0 {
		c.MaxGroupCount = structs.DefaultMaxGroupCount
	}
	if c.MaxGroupCount < 0 || c.MaxGroupCount > structs.MaxGroupCountCeiling {
		return fmt.Errorf("job_max_group_count must be between 1 and %d (got %d)", structs.MaxGroupCountCeiling, c.MaxGroupCount)
	}
	if c.RPCHandshakeTimeout <= 0 {
		c.RPCHandshakeTimeout = d.RPCHandshakeTimeout
	}
	if c.HTTPBodyTimeout <= 0 {
		c.HTTPBodyTimeout = d.HTTPBodyTimeout
	}
	if c.TLS == nil {
		var err error
		if c.TLS, err = tlsutil.NewConfigurator(tlsutil.Config{Region: c.Region}); err != nil {
			return err
		}
	}
	if r := c.TLS.Region(); r != c.Region {
		return fmt.Errorf("the TLS configuration's region %q is not the server's region %q", r, c.Region)
	}
	if c.DevMode {
		c.BootstrapExpect = 1
	}
	if c.NodeName == "" {
		c.NodeName = hostname()
	}
	switch {
	case c.BootstrapExpect < 0:
		return fmt.Errorf("bootstrap_expect must not be negative (got %d)", c.BootstrapExpect)
	case c.BootstrapExpect == 0 && len(c.RetryJoin) == 0:
		return errors.New("a server needs bootstrap_expect or retry_join addresses to form or join a cluster")
	case !c.DevMode && c.DataDir == "":
		return errors.New("a server needs a data_dir (or -dev)")
	}
	if err := ValidLogStoreBackend(c.RaftLogStore); err != nil {
		return err
	}
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "volplane-server"
	}
	return h
}
