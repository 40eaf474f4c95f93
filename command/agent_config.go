package command

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
)

// AgentConfig is the agent's configuration file (HCL), and what the flags
// are merged into.
type AgentConfig struct {
	NodeName string        `hcl:"node_name,optional"`
	Region   string        `hcl:"region,optional"`
	DataDir  string        `hcl:"data_dir,optional"`
	BindAddr string        `hcl:"bind_addr,optional"`
	LogLevel string        `hcl:"log_level,optional"`
	LogJSON  bool          `hcl:"log_json,optional"`
	Ports    *PortsConfig  `hcl:"ports,block"`
	Advert   *AdvertConfig `hcl:"advertise,block"`
	Server   *ServerBlock  `hcl:"server,block"`
	Client   *ClientBlock  `hcl:"client,block"`
	TLS      *TLSBlock     `hcl:"tls,block"`
	Limits   *LimitsBlock  `hcl:"limits,block"`
	ACL      *ACLBlock     `hcl:"acl,block"`
	// EnableDebug turns on the profiling routes (GET /v1/agent/pprof/...)
	// while ACLs are off, as Nomad's enable_debug (-dev turns it on).
	EnableDebug bool `hcl:"enable_debug,optional"`
}

// PortsConfig are the agent's ports. Nil is unset (the default port);
// 0 asks for any free port, which the agent prints once bound.
type PortsConfig struct {
	HTTP *int `hcl:"http,optional"`
	RPC  *int `hcl:"rpc,optional"`
}

// AdvertConfig is the address other agents reach this one at.
type AdvertConfig struct {
	RPC string `hcl:"rpc,optional"`
}

// ServerBlock configures the server role.
type ServerBlock struct {
	Enabled         bool     `hcl:"enabled,optional"`
	BootstrapExpect int      `hcl:"bootstrap_expect,optional"`
	RetryJoin       []string `hcl:"retry_join,optional"`
	RetryInterval   string   `hcl:"retry_interval,optional"`
	// RaftSnapshotThreshold overrides the number of log entries between
	// snapshots.
	RaftSnapshotThreshold int `hcl:"raft_snapshot_threshold,optional"`
	// RaftMultiplier scales Raft's heartbeat, election, leader-lease and
	// commit timeouts, as Nomad's: 1 (the default) is tuned for a LAN;
	// raise it, up to 10, across a WAN or on machines that stall.
	RaftMultiplier *int `hcl:"raft_multiplier,optional"`
	// RaftLogStore picks the Raft log's backend on disk, as Consul's
	// raft_logstore block.
	RaftLogStore *RaftLogStoreBlock `hcl:"raft_logstore,block"`
	// HeartbeatTTL is how often client nodes must heartbeat, and
	// NodeGracePeriod how long past that TTL a silent node is marked down
	// (durations such as "10s"; both default to the server's, 10s).
	HeartbeatTTL    string `hcl:"heartbeat_ttl,optional"`
	NodeGracePeriod string `hcl:"node_grace_period,optional"`
	// NodeGCThreshold is how long a node stays down before the servers
	// remove it and its plugin instances (default "24h", as Nomad's).
	NodeGCThreshold string `hcl:"node_gc_threshold,optional"`
	// NodeIntroRequired makes new nodes present an introduction token:
	// one of NodeIntroTokens, or one from `volplane operator node-intro
	// create`.
	NodeIntroRequired bool     `hcl:"node_intro_required,optional"`
	NodeIntroTokens   []string `hcl:"node_intro_tokens,optional"`
	// JobMaxGroupCount bounds a task group's count (default 10000).
	JobMaxGroupCount int `hcl:"job_max_group_count,optional"`
	// CSIReleaseMaxDelay caps the wait between attempts of a failing
	// release step (a duration; default 5m). The backoff starts at 1s and
	// doubles up to it.
	CSIReleaseMaxDelay string `hcl:"csi_release_max_delay,optional"`
	// CSICallTimeout bounds each call of a release or publish step to a
	// client agent (a duration; default 30s).
	CSICallTimeout string `hcl:"csi_call_timeout,optional"`
	// GCHeapBudget is the heap the Go garbage collector lets the server's
	// process grow to between collections (a size: "2GiB", "512MB"); "0"
	// leaves GOGC at Go's default. Unset is a quarter of the memory the
	// process may use. See package gctune.
	GCHeapBudget string `hcl:"gc_heap_budget,optional"`
}

// RaftLogStoreBlock is the server's raft_logstore block.
type RaftLogStoreBlock struct {
	// Backend is "wal" or "boltdb"; unset keeps the one the data dir
	// holds, and a new server starts on "wal".
	Backend string `hcl:"backend,optional"`
}

// Default ports, as Nomad's.
const (
	defaultHTTPPort = 4646
	defaultRPCPort  = 4647
)

// LoadAgentConfig parses an agent configuration file. Unknown attributes
// and blocks are errors that name the file and line.
func LoadAgentConfig(path string) (*AgentConfig, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config file: %w", err)
	}
	return ParseAgentConfig(path, src)
}

// ParseAgentConfig parses the configuration in src; filename is used in
// error messages.
func ParseAgentConfig(filename string, src []byte) (*AgentConfig, error) {
	var cfg AgentConfig
	name := filename
	if !strings.HasSuffix(name, ".hcl") && !strings.HasSuffix(name, ".json") {
		// hclsimple picks the syntax by extension; anything else is HCL.
		name += ".hcl"
	}
	if err := hclsimple.Decode(name, src, nil, &cfg); err != nil {
		if diags, ok := err.(hcl.Diagnostics); ok {
			return nil, fmt.Errorf("config file %s", diagString(diags, src))
		}
		return nil, fmt.Errorf("config file %s: %w", filename, err)
	}
	return &cfg, cfg.validate()
}

// diagString renders the first diagnostic with its file, line and the
// offending source line, so "a number is required" says which setting.
func diagString(diags hcl.Diagnostics, src []byte) string {
	d := diags[0]
	where := ""
	if d.Subject != nil {
		where = fmt.Sprintf("%s:%d: ", d.Subject.Filename, d.Subject.Start.Line)
	}
	msg := where + d.Summary
	if d.Detail != "" {
		msg += ": " + d.Detail
	}
	if d.Subject != nil {
		lines := strings.Split(string(src), "\n")
		if n := d.Subject.Start.Line; n >= 1 && n <= len(lines) {
			if line := strings.TrimSpace(lines[n-1]); line != "" {
				msg += fmt.Sprintf(" (in %q)", line)
			}
		}
	}
	if len(diags) > 1 {
		msg += fmt.Sprintf(" (and %d more problems)", len(diags)-1)
	}
	return msg
}

func (c *AgentConfig) validate() error {
	if c.Ports != nil {
		for name, p := range map[string]*int{"http": c.Ports.HTTP, "rpc": c.Ports.RPC} {
			if p != nil && (*p < 0 || *p > 65535) {
				return fmt.Errorf("ports.%s = %d is not a port number", name, *p)
			}
		}
	}
	if c.BindAddr != "" && net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("bind_addr %q is not an IP address", c.BindAddr)
	}
	if s := c.Server; s != nil {
		if s.BootstrapExpect < 0 {
			return fmt.Errorf("server.bootstrap_expect must not be negative (got %d)", s.BootstrapExpect)
		}
		for _, a := range s.RetryJoin {
			if _, _, err := net.SplitHostPort(withDefaultPort(a)); err != nil {
				return fmt.Errorf("server.retry_join address %q: %v", a, err)
			}
		}
		if s.RetryInterval != "" {
			if _, err := time.ParseDuration(s.RetryInterval); err != nil {
				return fmt.Errorf("server.retry_interval %q: %v", s.RetryInterval, err)
			}
		}
		if s.RaftMultiplier != nil {
			if err := server.ValidRaftMultiplier(*s.RaftMultiplier); err != nil {
				return err
			}
		}
		if s.RaftLogStore != nil {
			if err := server.ValidLogStoreBackend(s.RaftLogStore.Backend); err != nil {
				return fmt.Errorf("server.%v", err)
			}
		}
		if s.JobMaxGroupCount < 0 || s.JobMaxGroupCount > structs.MaxGroupCountCeiling {
			return fmt.Errorf("server.job_max_group_count must be between 1 and %d (got %d)", structs.MaxGroupCountCeiling, s.JobMaxGroupCount)
		}
		if _, _, err := gcHeapBudget(s.GCHeapBudget); err != nil {
			return err
		}
		for i, t := range s.NodeIntroTokens {
			if len(t) < 16 {
				return fmt.Errorf("server.node_intro_tokens[%d] is shorter than 16 characters: too easy to guess", i)
			}
		}
		for _, d := range [][2]string{{"heartbeat_ttl", s.HeartbeatTTL}, {"node_grace_period", s.NodeGracePeriod},
			{"csi_release_max_delay", s.CSIReleaseMaxDelay}, {"csi_call_timeout", s.CSICallTimeout},
			{"node_gc_threshold", s.NodeGCThreshold}} {
			if _, err := positiveDuration(d[1]); err != nil {
				return fmt.Errorf("server.%s %q: %v", d[0], d[1], err)
			}
		}
	}
	if err := c.Client.validate(); err != nil {
		return err
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if err := c.ACL.validate(); err != nil {
		return err
	}
	if c.Region != "" && !validRegion(c.Region) {
		return fmt.Errorf("region %q must be letters, digits and dashes", c.Region)
	}
	if err := c.tlsConfig().Validate(); err != nil {
		return err
	}
	switch c.LogLevel {
	case "", "trace", "debug", "info", "warn", "error", "TRACE", "DEBUG", "INFO", "WARN", "ERROR":
	default:
		return fmt.Errorf("log_level %q is not one of trace, debug, info, warn, error", c.LogLevel)
	}
	return nil
}

// positiveDuration parses a duration setting; "" is 0 (the default), and
// anything else must be a duration above zero, since a zero or negative
// heartbeat TTL would mark every node down at once.
func positiveDuration(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be a positive duration such as \"10s\"")
	}
	return d, nil
}

// withDefaultPort adds the RPC port to an address given without one.
func withDefaultPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(defaultRPCPort))
}

// validRegion reports whether a region can be a DNS label of a certificate
// role name (server.<region>.volplane).
func validRegion(r string) bool {
	if len(r) > 63 || r[0] == '-' || r[len(r)-1] == '-' {
		return false
	}
	for _, c := range r {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
