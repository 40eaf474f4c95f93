package client

import (
	"fmt"
	"net"
	netrpc "net/rpc"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// Timings of the in-process clusters: heartbeats every ~250 ms, a node
// marked down after 2 s of silence.
const (
	testTTL   = time.Second
	testGrace = time.Second
)

// testCluster starts n servers with short heartbeat timings.
func testCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	return server.TestCluster(t, n, func(_ int, c *server.Config) {
		c.HeartbeatTTL = testTTL
		c.NodeGracePeriod = testGrace
		c.HTTPAddr = ""
	})
}

func addrs(servers ...*server.Server) []string {
	var out []string
	for _, s := range servers {
		out = append(out, s.RPCAddr())
	}
	return out
}

// socketDir returns a short directory for unix sockets, whose paths are
// limited to 107 bytes (t.TempDir's can be longer).
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vpc")
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startPlugin starts a development plugin instance on socket, as node
// nodeID of the storage system kept in stateDir.
func startPlugin(t *testing.T, socket, stateDir, nodeID string) *devplugin.Plugin {
	t.Helper()
	p, err := devplugin.New(devplugin.Config{
		Endpoint: "unix://" + socket,
		StateDir: stateDir,
		NodeID:   nodeID,
		Logger:   testLogger(t, "devplugin", nil),
	})
	must.NoError(t, err)
	must.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return p
}

// testLogger logs to the test's log and, when buf is set, to buf too.
func testLogger(t *testing.T, name string, buf *testutil.Buffer) hclog.Logger {
	var out interface{ Write([]byte) (int, error) } = testWriter{t}
	if buf != nil {
		out = multiWriter{testWriter{t}, buf}
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: out})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type multiWriter []interface{ Write([]byte) (int, error) }

func (m multiWriter) Write(p []byte) (int, error) {
	for _, w := range m {
		w.Write(p)
	}
	return len(p), nil
}

// testClient starts a client with short timings; cb may change its config.
// It is shut down when the test ends.
func testClient(t *testing.T, servers []string, cb func(*Config)) *Client {
	t.Helper()
	cfg := &Config{
		NodeName:            "client-" + t.Name(),
		DataDir:             t.TempDir(),
		Servers:             servers,
		FingerprintInterval: 50 * time.Millisecond,
		UnhealthyThreshold:  3,
		PluginGoneTTL:       time.Minute,
		RPCTimeout:          2 * time.Second,
	}
	cfg.Logger = testLogger(t, cfg.NodeName, nil)
	if cb != nil {
		cb(cfg)
	}
	c, err := NewClient(cfg)
	must.NoError(t, err)
	t.Cleanup(func() { c.Shutdown() })
	return c
}

func waitRegistered(t *testing.T, c *Client) {
	t.Helper()
	select {
	case <-c.Registered():
	case <-time.After(20 * time.Second):
		t.Fatalf("client %s did not register", c.NodeID())
	}
}

// waitPlugin waits until the plugin, as srv sees it, passes check.
func waitPlugin(t *testing.T, srv *server.Server, id string, check func(*structs.CSIPlugin) error) {
	t.Helper()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		p, err := srv.State().CSIPluginByID(nil, id)
		if err != nil {
			return false, err
		}
		if err := check(p); err != nil {
			return false, err
		}
		return true, nil
	})
}

// waitNode waits until the node, as srv sees it, passes check, and returns
// it.
func waitNode(t *testing.T, srv *server.Server, id string, check func(*structs.Node) error) *structs.Node {
	t.Helper()
	var node *structs.Node
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n, err := srv.State().NodeByID(nil, id)
		if err != nil {
			return false, err
		}
		if n == nil {
			return false, fmt.Errorf("node %s is not registered", id)
		}
		if err := check(n); err != nil {
			return false, err
		}
		node = n
		return true, nil
	})
	return node
}

func nodeStatus(want string) func(*structs.Node) error {
	return func(n *structs.Node) error {
		if n.Status != want {
			return fmt.Errorf("node status is %q, want %q", n.Status, want)
		}
		return nil
	}
}

// instanceHealth checks the node instance of a plugin on nodeID.
func instanceHealth(nodeID string, healthy bool, reason string) func(*structs.CSIPlugin) error {
	return func(p *structs.CSIPlugin) error {
		if p == nil {
			return fmt.Errorf("no plugin")
		}
		n := p.Nodes[nodeID]
		switch {
		case n == nil:
			return fmt.Errorf("plugin has no node instance on %s", nodeID)
		case n.Healthy != healthy:
			return fmt.Errorf("node instance healthy=%v (%s), want %v", n.Healthy, n.HealthDescription, healthy)
		case !strings.Contains(n.HealthDescription, reason):
			return fmt.Errorf("node instance health %q does not mention %q", n.HealthDescription, reason)
		}
		return nil
	}
}

// fakeServer stands in for a server agent: it answers Node.Register and
// Node.UpdateStatus, records what it was sent, and hands out the yamux
// sessions clients open, so a test can call the client back over them.
type fakeServer struct {
	addr     string
	mux      *rpc.Mux
	sessions chan *yamux.Session

	mu       sync.Mutex
	requests []any // *structs.NodeRegisterRequest or *structs.NodeUpdateStatusRequest
	// failNext, when set, answers the next heartbeats with this error.
	failNext []error
	servers  []string
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{sessions: make(chan *yamux.Session, 16)}
	srv := netrpc.NewServer()
	must.NoError(t, srv.RegisterName("Node", &fakeNode{f: f}))
	f.mux = rpc.NewMux(rpc.MuxConfig{
		Logger: testLogger(t, "fake-server", nil),
		Handlers: rpc.Handlers{
			RPC:     func(conn net.Conn, _ rpc.Peer) { srv.ServeCodec(rpc.NewServerCodec(conn, 0)) },
			Session: func(s *yamux.Session, _ rpc.Peer) { f.sessions <- s },
		},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	f.addr = ln.Addr().String()
	go f.mux.Serve(ln)
	t.Cleanup(func() { f.mux.Close() })
	return f
}

func (f *fakeServer) record(req any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if len(f.failNext) > 0 {
		err := f.failNext[0]
		f.failNext = f.failNext[1:]
		return err
	}
	return nil
}

func (f *fakeServer) fail(errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = append(f.failNext, errs...)
}

// recorded returns the requests received so far.
func (f *fakeServer) recorded() []any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]any(nil), f.requests...)
}

func (f *fakeServer) session(t *testing.T) *yamux.Session {
	t.Helper()
	select {
	case s := <-f.sessions:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no client session")
		return nil
	}
}

type fakeNode struct{ f *fakeServer }

func (n *fakeNode) Register(args *structs.NodeRegisterRequest, reply *structs.NodeUpdateResponse) error {
	if err := n.f.record(args); err != nil {
		return err
	}
	n.reply(reply)
	return nil
}

func (n *fakeNode) UpdateStatus(args *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	if err := n.f.record(args); err != nil {
		return err
	}
	n.reply(reply)
	return nil
}

func (n *fakeNode) reply(reply *structs.NodeUpdateResponse) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	reply.HeartbeatTTL = 400 * time.Millisecond
	reply.Servers = n.f.servers
}

// pluginSocket returns a socket path for a plugin in a short directory.
func pluginSocket(t *testing.T, name string) string {
	return filepath.Join(socketDir(t), name+".sock")
}
