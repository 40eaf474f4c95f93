package command

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server"
)

func TestAgentConfig_FileAndFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "server.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`
node_name = "s1"
data_dir  = "/var/lib/volplane"
bind_addr = "10.0.0.5"
log_level = "debug"
ports {
  http = 5646
  rpc  = 5647
}
server {
  enabled          = true
  bootstrap_expect = 3
  retry_join       = ["10.0.0.6", "10.0.0.7:5647"]
}
`), 0o600))

	c := &AgentCommand{UI: cli.NewMockUi()}
	cfg, dev, err := c.parse([]string{"-config", file, "-node-name", "override", "-retry-join", "10.0.0.8:4647"})
	must.NoError(t, err)
	must.False(t, dev)
	must.Eq(t, "override", cfg.NodeName, must.Sprint("flags override the file"))
	must.Eq(t, []string{"10.0.0.8:4647"}, cfg.Server.RetryJoin)

	srv, cleanup, err := c.serverConfig(cfg, dev)
	must.NoError(t, err)
	defer cleanup()
	must.Eq(t, "10.0.0.5:5646", srv.HTTPAddr)
	must.Eq(t, "10.0.0.5:5647", srv.RPCAddr)
	must.Eq(t, 3, srv.BootstrapExpect)
	must.Eq(t, "/var/lib/volplane", srv.DataDir)

	cfg, _, err = c.parse([]string{"-config", file})
	must.NoError(t, err)
	srv, _, err = c.serverConfig(cfg, false)
	must.NoError(t, err)
	must.Eq(t, []string{"10.0.0.6:4647", "10.0.0.7:5647"}, srv.RetryJoin, must.Sprint("a join address without a port gets the RPC port"))
}

// Port 0 is "any free port", from a flag or the file; only a port left
// unset gets the default.
func TestAgentConfig_PortZero(t *testing.T) {
	c := &AgentCommand{UI: cli.NewMockUi()}
	addrs := func(args ...string) (string, string) {
		t.Helper()
		cfg, dev, err := c.parse(args)
		must.NoError(t, err)
		srv, cleanup, err := c.serverConfig(cfg, dev)
		must.NoError(t, err)
		cleanup()
		return srv.HTTPAddr, srv.RPCAddr
	}
	http, rpc := addrs("-dev", "-http-port", "0", "-rpc-port", "0")
	must.Eq(t, "127.0.0.1:0", http)
	must.Eq(t, "127.0.0.1:0", rpc)

	http, rpc = addrs("-dev")
	must.Eq(t, "127.0.0.1:4646", http, must.Sprint("unset is the default port"))
	must.Eq(t, "127.0.0.1:4647", rpc)

	file := filepath.Join(t.TempDir(), "agent.hcl")
	must.NoError(t, os.WriteFile(file, []byte("ports {\n  http = 0\n}\n"), 0o600))
	http, rpc = addrs("-dev", "-config", file)
	must.Eq(t, "127.0.0.1:0", http, must.Sprint("0 in the file is any free port"))
	must.Eq(t, "127.0.0.1:4647", rpc, must.Sprint("a port the file leaves unset is the default"))
	http, _ = addrs("-dev", "-config", file, "-http-port", "5646")
	must.Eq(t, "127.0.0.1:5646", http, must.Sprint("the flag overrides the file"))

	_, _, err := c.parse([]string{"-dev", "-rpc-port", "-1"})
	must.ErrorContains(t, err, "ports.rpc = -1 is not a port number")
}

func TestAgentConfig_HeartbeatTimings(t *testing.T) {
	c := &AgentCommand{UI: cli.NewMockUi()}
	file := filepath.Join(t.TempDir(), "server.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`
data_dir = "/var/lib/volplane"
server {
  enabled           = true
  bootstrap_expect  = 1
  heartbeat_ttl     = "2s"
  node_grace_period = "1500ms"
  csi_release_max_delay = "4s"
  csi_call_timeout  = "8s"
  node_gc_threshold = "30m"
}
`), 0o600))
	cfg, _, err := c.parse([]string{"-config", file})
	must.NoError(t, err)
	srv, _, err := c.serverConfig(cfg, false)
	must.NoError(t, err)
	must.Eq(t, 2*time.Second, srv.HeartbeatTTL)
	must.Eq(t, 1500*time.Millisecond, srv.NodeGracePeriod)
	must.Eq(t, 4*time.Second, srv.ReleaseMaxDelay)
	must.Eq(t, 8*time.Second, srv.CSICallTimeout)

	must.Eq(t, 30*time.Minute, srv.NodeGCThreshold)

	// Unset, the server's production defaults stay.
	cfg, _, err = c.parse([]string{"-server", "-bootstrap-expect", "1", "-data-dir", "/var/lib/volplane"})
	must.NoError(t, err)
	srv, _, err = c.serverConfig(cfg, false)
	must.NoError(t, err)
	def := server.DefaultConfig()
	must.Eq(t, def.HeartbeatTTL, srv.HeartbeatTTL)
	must.Eq(t, def.NodeGracePeriod, srv.NodeGracePeriod)
	must.Eq(t, def.ReleaseMaxDelay, srv.ReleaseMaxDelay)

	must.Eq(t, 24*time.Hour, def.NodeGCThreshold, must.Sprint("Nomad's default"))
	must.Eq(t, def.NodeGCThreshold, srv.NodeGCThreshold)
}

// TestAgentConfig_RaftMultiplier: raft_multiplier scales the base timings
// of the heartbeat, election, leader-lease and commit timeouts, as Nomad's;
// unset is 1.
func TestAgentConfig_RaftMultiplier(t *testing.T) {
	c := &AgentCommand{UI: cli.NewMockUi()}
	timings := func(args ...string) [4]time.Duration {
		cfg, _, err := c.parse(args)
		must.NoError(t, err)
		srv, _, err := c.serverConfig(cfg, false)
		must.NoError(t, err)
		rc := srv.RaftConfig
		return [4]time.Duration{rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout, rc.CommitTimeout}
	}
	base := timings("-server", "-bootstrap-expect", "1", "-data-dir", "/var/lib/volplane")
	must.Eq(t, [4]time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 10 * time.Millisecond}, base)

	file := filepath.Join(t.TempDir(), "server.hcl")
	must.NoError(t, os.WriteFile(file, []byte("server {\n  enabled = true\n  raft_multiplier = 5\n}\n"), 0o600))
	scaled := timings("-config", file, "-data-dir", "/var/lib/volplane")
	for i := range base {
		must.Eq(t, 5*base[i], scaled[i])
	}
}

// TestAgentConfig_RaftLogStore: the raft_logstore block's backend reaches
// the server; unset leaves it to the data dir.
func TestAgentConfig_RaftLogStore(t *testing.T) {
	c := &AgentCommand{UI: cli.NewMockUi()}
	backend := func(args ...string) string {
		cfg, _, err := c.parse(args)
		must.NoError(t, err)
		srv, _, err := c.serverConfig(cfg, false)
		must.NoError(t, err)
		return srv.RaftLogStore
	}
	must.Eq(t, "", backend("-server", "-bootstrap-expect", "1", "-data-dir", "/var/lib/volplane"))
	file := filepath.Join(t.TempDir(), "server.hcl")
	must.NoError(t, os.WriteFile(file, []byte("server {\n  enabled = true\n  raft_logstore {\n    backend = \"boltdb\"\n  }\n}\n"), 0o600))
	must.Eq(t, "boltdb", backend("-config", file, "-bootstrap-expect", "1", "-data-dir", "/var/lib/volplane"))
}

func TestAgentConfig_Errors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want string
	}{
		{"unknown attribute", `nodename = "x"`, `Unsupported argument`},
		{"wrong type", `server { bootstrap_expect = "three" }`, `bootstrap_expect`},
		{"bad port", `ports { http = 70000 }`, `ports.http = 70000 is not a port number`},
		{"bad bind", `bind_addr = "localhost:1"`, `bind_addr "localhost:1" is not an IP address`},
		{"bad level", `log_level = "loud"`, `log_level "loud"`},
		{"syntax", `server {`, `server.hcl:1`},
		{"bad ttl", `server { heartbeat_ttl = "soon" }`, `server.heartbeat_ttl "soon"`},
		{"zero ttl", `server { heartbeat_ttl = "0s" }`, `server.heartbeat_ttl "0s": must be a positive duration`},
		{"negative grace", `server { node_grace_period = "-1s" }`, `server.node_grace_period "-1s": must be a positive duration`},
		{"zero release delay", `server { csi_release_max_delay = "0" }`, `server.csi_release_max_delay "0": must be a positive duration`},
		{"bad call timeout", `server { csi_call_timeout = "soon" }`, `server.csi_call_timeout "soon"`},

		{"bad gc budget", `server { gc_heap_budget = "lots" }`, `server.gc_heap_budget "lots" is not a size`},
		{"negative gc budget", `server { gc_heap_budget = "-1GiB" }`, `server.gc_heap_budget "-1GiB" is not a size`},
		{"bad gc threshold", `server { node_gc_threshold = "a day" }`, `server.node_gc_threshold "a day"`},
		{"raft multiplier zero", `server { raft_multiplier = 0 }`, `raft_multiplier cannot be 0. Must be between 1 and 10`},
		{"raft multiplier too high", `server { raft_multiplier = 11 }`, `raft_multiplier cannot be 11. Must be between 1 and 10`},
		{"bad log store", "server {\n  raft_logstore {\n    backend = \"bolt\"\n  }\n}", `server.raft_logstore.backend "bolt" is not one of "wal" or "boltdb"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAgentConfig("server.hcl", []byte(tc.src))
			must.ErrorContains(t, err, tc.want)
		})
	}
}

func TestAgentCommand_UsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},                          // neither -server nor -dev
		{"-server", "-bogus"},       // unknown flag
		{"-server", "extra"},        // stray argument
		{"-config", "/nonexistent"}, // unreadable file
	} {
		ui := cli.NewMockUi()
		c := &AgentCommand{UI: ui}
		must.Eq(t, 1, c.Run(args), must.Sprintf("args %q", args))
		must.StrContains(t, ui.ErrorWriter.String(), "Error")
	}
}

func TestAgentCommand_DevRunsAndStops(t *testing.T) {
	ui := cli.NewMockUi()
	stop := make(chan struct{})
	c := &AgentCommand{UI: ui, ShutdownCh: stop}
	done := make(chan int, 1)
	go func() { done <- c.Run([]string{"-dev", "-http-port", "0", "-rpc-port", "0", "-log-level", "error"}) }()
	close(stop)
	must.Eq(t, 0, <-done)
	out := ui.OutputWriter.String()
	must.StrContains(t, out, "Development mode")
	// The ports printed are the ones bound, not 0 nor the defaults.
	must.RegexMatch(t, regexp.MustCompile(`RPC 127\.0\.0\.1:[1-9][0-9]*, HTTP http://127\.0\.0\.1:[1-9][0-9]*`), out)
	// A free port may start with the digits of a default one (":46475"), so
	// the defaults are matched as whole port numbers.
	must.False(t, regexp.MustCompile(`:464[67]\b`).MatchString(out), must.Sprint(out))
}
