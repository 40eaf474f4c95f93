// Package e2e runs volplane the way an operator does: the real binary, as
// separate processes on 127.0.0.1, driven through its CLI, its HTTP API and
// its RPC port, with faults injected by killing, pausing and restarting
// processes.
//
// Test bodies are written against Cluster, not against processes, so that
// an in-process implementation (servers inside the test binary, as etcd's
// tests/framework does) could run the same bodies faster. Only the process
// implementation, ProcessCluster, exists so far.
//
// The tests skip under -short. TestMain builds ./cmd/volplane once per run
// of the test binary.
package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/volplane/volplane/testutil"
)

// Process is any agent of a Cluster: a server, a client agent or a CSI
// plugin. Its name is unique in the cluster and names its log.
type Process interface {
	Name() string
}

// Server is one server agent of a Cluster, as a test addresses it.
type Server interface {
	// Name is the agent's node name (-node-name).
	Name() string
	// HTTPAddr is the base URL of its HTTP API, "http://127.0.0.1:P"; the
	// CLI's -address.
	HTTPAddr() string
	// RPCAddr is its RPC and Raft address, "127.0.0.1:Q", which is also how
	// Raft and /v1/status/leader name it.
	RPCAddr() string
}

// Plugin is one instance of the development CSI plugin run by a Cluster.
type Plugin interface {
	Process
	// NodeID is the storage system's ID of the plugin's node, which
	// NodeGetInfo reports.
	NodeID() string
	// Endpoint is the plugin's socket, "unix:///path".
	Endpoint() string
	// StateDir is the storage system's state directory, shared by the
	// instances started with it (see devplugin.ReadCallLog).
	StateDir() string
}

// PluginConfig describes a development CSI plugin to start.
type PluginConfig struct {
	// Name names the process and its log.
	Name string
	// NodeID is the plugin's node ID in the storage system (-node-id).
	NodeID string
	// StateDir is the storage system's state directory (-state-dir);
	// instances given the same one share their volumes.
	StateDir string
}

// Client is one client agent of a Cluster.
type Client interface {
	// Name is the agent's node name (-node-name).
	Name() string
	// DataDir is the agent's data dir, kept across restarts.
	DataDir() string
}

// ClientConfig describes a client agent to start.
type ClientConfig struct {
	// Name is the agent's node name (-node-name) and names its log.
	Name string
	// Plugins are the CSI plugins the client drives, by plugin ID
	// (-csi-plugin ID=ENDPOINT); each's type is what it offers.
	Plugins map[string]Plugin
	// IntroToken is passed as -intro-token, for servers that require node
	// introduction.
	IntroToken string
}

// Cluster is what a test body needs from a cluster of server agents, and
// of the client agents and CSI plugins it adds.
type Cluster interface {
	// Servers are every server of the cluster, running or not, in a fixed
	// order.
	Servers() []Server
	// Running are the servers that are up and not paused.
	Running() []Server
	// Alive reports whether the process is up (paused counts as up): it
	// has not exited, on its own or by Kill or Stop.
	Alive(p Process) bool

	// StartPlugin starts a development CSI plugin and waits until its
	// socket accepts connections.
	StartPlugin(t testing.TB, cfg PluginConfig) Plugin
	// StartClient starts a client agent that registers with every server
	// of the cluster, with a data dir of its own. It returns once the agent
	// has started, not once its node is registered.
	StartClient(t testing.TB, cfg ClientConfig) Client

	// Kill crashes a process (SIGKILL) and waits until it is gone.
	Kill(t testing.TB, p Process)
	// Stop shuts a process down gracefully (SIGTERM) and returns how it
	// exited: nil for a clean exit.
	Stop(t testing.TB, p Process) error
	// Pause freezes a process (SIGSTOP); Resume thaws it (SIGCONT).
	Pause(t testing.TB, p Process)
	Resume(t testing.TB, p Process)
	// Restart starts a killed or stopped process again with the same
	// arguments and data dir, and waits until it serves as its Start did
	// (a server: until its HTTP API answers).
	Restart(t testing.TB, p Process)

	// CLI runs `volplane <command> -address=<s's HTTP address> <args...>`;
	// command is the command's words, such as "volume status".
	CLI(t testing.TB, s Server, command string, args ...string) CLIResult
	// Logs returns everything each process has logged so far, by name.
	Logs(t testing.TB) map[string]string
}

// CLIResult is what one CLI invocation printed and how it exited.
type CLIResult struct {
	Args   []string
	Stdout string
	Stderr string
	Code   int
}

// String describes the invocation for failure messages.
func (r CLIResult) String() string {
	return fmt.Sprintf("volplane %s: exit %d\nstdout:\n%s\nstderr:\n%s",
		strings.Join(r.Args, " "), r.Code, r.Stdout, r.Stderr)
}

// Timeouts of the harness. They are deadlines for polling, never sleeps.
const (
	leaderTimeout  = 30 * time.Second // a cluster forms or fails over
	startTimeout   = 20 * time.Second // an agent's HTTP API answers
	exitTimeout    = 15 * time.Second // an agent exits after a signal
	cliTimeout     = 30 * time.Second // one CLI invocation
	requestTimeout = 10 * time.Second // one HTTP request of the harness
	logTailLines   = 300              // lines of each agent's log shown on failure
)

// httpClient is used for every HTTP request of the tests. Keep-alives are
// off so that a request never lands on a connection to a process that was
// killed since. A request with "Expect: 100-continue" waits for the
// server's go-ahead before sending its body, as curl does for large bodies.
var httpClient = &http.Client{
	Timeout: requestTimeout,
	Transport: &http.Transport{
		DisableKeepAlives:     true,
		ExpectContinueTimeout: requestTimeout / 2,
	},
}

// WaitForLeader waits until every running server names the same leader
// (each asked with ?stale, so each answers from its own Raft state), that
// leader is a running server, and it serves consistent reads (it finished
// the barrier a new leader applies). It returns the leader.
func WaitForLeader(t testing.TB, c Cluster) Server {
	t.Helper()
	var leader Server
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		leader = nil
		running := c.Running()
		if len(running) == 0 {
			return false, errors.New("no server is running")
		}
		var addr string
		for _, s := range running {
			var got string
			if err := getJSON(s.HTTPAddr()+"/v1/status/leader?stale", &got); err != nil {
				return false, fmt.Errorf("%s: %v", s.Name(), err)
			}
			if got == "" {
				return false, fmt.Errorf("%s knows no leader", s.Name())
			}
			if addr != "" && got != addr {
				return false, fmt.Errorf("servers disagree on the leader: %s and %s", addr, got)
			}
			addr = got
		}
		for _, s := range running {
			if s.RPCAddr() == addr {
				leader = s
			}
		}
		if leader == nil {
			return false, fmt.Errorf("the leader %s is not a running server", addr)
		}
		// A consistent read is held on the leader until its barrier is done.
		var got string
		if err := getJSON(leader.HTTPAddr()+"/v1/status/leader", &got); err != nil {
			return false, fmt.Errorf("leader %s: %v", leader.Name(), err)
		}
		if got != addr {
			return false, fmt.Errorf("leader %s names %q as leader", leader.Name(), got)
		}
		return true, nil
	})
	t.Logf("leader is %s (%s)", leader.Name(), leader.RPCAddr())
	return leader
}

// Followers are the running servers other than leader.
func Followers(c Cluster, leader Server) []Server {
	var out []Server
	for _, s := range c.Running() {
		if s != leader {
			out = append(out, s)
		}
	}
	return out
}

// httpResult is one HTTP answer.
type httpResult struct {
	Status int
	Header http.Header
	Body   []byte
}

// doHTTP makes one request; body may be nil. A body of unknown length
// (anything but *bytes.Reader and *strings.Reader) is sent chunked. header
// is added to the request.
func doHTTP(method, url string, body io.Reader, header ...string) (*httpResult, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	return &httpResult{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// getJSON reads url and decodes its 200 answer into out.
func getJSON(url string, out any) error {
	res, err := doHTTP(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if res.Status != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, res.Status, bytes.TrimSpace(res.Body))
	}
	return decodeJSON(res.Body, out)
}

// decodeJSON decodes a whole JSON document into out.
func decodeJSON(b []byte, out any) error {
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decoding %q: %w", truncate(b, 200), err)
	}
	return nil
}

// truncate keeps failure messages short.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}
