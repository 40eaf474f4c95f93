package server

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// TB is the part of TB the test helpers below use. The shipped
// binary links this package and must link neither the testing package nor
// testutil, so the helpers take this instead.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Log(args ...any)
	Name() string
	TempDir() string
	Cleanup(func())
}

// TestConfig returns a configuration for an in-process test server: random
// loopback ports, a data dir under the test's temp dir, and fast Raft
// timeouts.
func TestConfig(t TB) *Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = fmt.Sprintf("srv-%s", t.Name())
	cfg.DataDir = t.TempDir()
	cfg.RPCAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.BootstrapExpect = 1
	cfg.RetryJoinInterval = 100 * time.Millisecond
	cfg.RPCHoldTimeout = 5 * time.Second
	rc := raft.DefaultConfig()
	// Half of raft's defaults: quick enough to elect and fail over in a
	// test, slow enough that a loaded 2-core machine running -race does
	// not take a scheduling stall for a dead leader. At 100/100/50 ms,
	// leaders stepped down mid-test ("failed to contact quorum") after
	// 65-120 ms stalls, failing writes with "leadership lost".
	rc.HeartbeatTimeout = 500 * time.Millisecond
	rc.ElectionTimeout = 500 * time.Millisecond
	rc.LeaderLeaseTimeout = 250 * time.Millisecond
	rc.CommitTimeout = 5 * time.Millisecond
	cfg.RaftConfig = rc
	cfg.RaftTimeout = 2 * time.Second
	cfg.Logger = hclog.New(&hclog.LoggerOptions{
		Name:   cfg.NodeName,
		Level:  hclog.Warn,
		Output: testWriter{t},
	})
	return cfg
}

// testWriter sends log lines to the test's log, so they show only when a
// test fails or runs verbosely.
type testWriter struct{ t TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// TestServer starts a single server; cb may change the config first. The
// server is shut down when the test ends.
func TestServer(t TB, cb func(*Config)) *Server {
	t.Helper()
	cfg := TestConfig(t)
	if cb != nil {
		cb(cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("starting test server: %v", err)
	}
	t.Cleanup(func() {
		// A handler that outlived the shutdown would log into a test that
		// has ended.
		if err := s.Shutdown(); err != nil {
			t.Errorf("shutting down test server %s: %v", cfg.NodeName, err)
		}
	})
	return s
}

// TestCluster starts n servers that form one cluster through the join
// protocol and waits for a leader. Their configs can be changed by cb,
// which is told each server's index.
func TestCluster(t TB, n int, cb func(i int, c *Config)) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	var first string
	for i := 0; i < n; i++ {
		servers[i] = TestServer(t, func(c *Config) {
			c.NodeName = fmt.Sprintf("srv%d", i)
			c.BootstrapExpect = n
			if i > 0 {
				c.RetryJoin = []string{first}
			}
			// The first server has nobody to call: it learns of the others
			// when they call it.
			if cb != nil {
				cb(i, c)
			}
		})
		if i == 0 {
			first = servers[0].RPCAddr()
		}
	}
	WaitForLeader(t, servers...)
	return servers
}

// WaitForLeader waits until every given server knows the same leader, and
// that leader is one of them and has every given server as a peer.
func WaitForLeader(t TB, servers ...*Server) *Server {
	t.Helper()
	var leader *Server
	waitFor(t, 30*time.Second, func() (bool, error) {
		leader = nil
		var addr raft.ServerAddress
		for _, s := range servers {
			a, _ := s.raft.LeaderWithID()
			if a == "" {
				return false, fmt.Errorf("server %s has no leader", s.config.NodeName)
			}
			if addr != "" && a != addr {
				return false, fmt.Errorf("servers disagree on the leader: %s vs %s", addr, a)
			}
			addr = a
			if raft.ServerAddress(s.rpcAddr) == a {
				leader = s
			}
		}
		if leader == nil {
			return false, fmt.Errorf("leader %s is not among the servers", addr)
		}
		if !leader.isLeaderReady() {
			return false, fmt.Errorf("leader %s has not finished its barrier", addr)
		}
		f := leader.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return false, err
		}
		if got := len(f.Configuration().Servers); got < len(servers) {
			return false, fmt.Errorf("leader has %d peers, want %d", got, len(servers))
		}
		return true, nil
	})
	return leader
}

// Leader returns the server among servers that is leader now, or nil.
func Leader(servers ...*Server) *Server {
	for _, s := range servers {
		if s.raft != nil && s.raft.State() == raft.Leader {
			return s
		}
	}
	return nil
}

// waitFor polls cond until it reports true, failing the test with its last
// error after timeout (testutil.WaitForResult, which this package cannot
// import).
func waitFor(t TB, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(delay)
	}
}
