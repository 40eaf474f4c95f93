package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// procCluster is a cluster of server agents run as processes of their own
// (`volplane agent -server`), the binary being the running one (the bench
// runs inside volplane): what an operator runs, HTTP and all, with each
// server's heap and CPU its own. The e2e harness does the same for tests;
// it fails through testing.TB, which the shipped binary must not import,
// so this is the bench's own small version.
type procCluster struct {
	bin     string
	dir     string
	servers []*procServer
	pool    *rpc.ConnPool
	http    *http.Client
}

// procServer is one server agent process.
type procServer struct {
	name     string
	args     []string
	logPath  string
	httpAddr string // http://host:port
	rpcAddr  string
	// client is volplane's API client for the server's HTTP address.
	client *api.Client

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// procStopTimeout bounds a graceful stop before the process is killed.
const procStopTimeout = 30 * time.Second

// startProcCluster starts n server agents of the volplane binary bin (""
// for the running one) on free loopback ports with data dirs under dir,
// joined to each other, each with the agent configuration config (HCL, may
// be empty). waitLeader waits for them to form the cluster.
func startProcCluster(ctx context.Context, bin, dir string, n int, config string) (_ *procCluster, err error) {
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding the volplane binary: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &procCluster{
		bin:  bin,
		dir:  dir,
		pool: rpc.NewPool(rpc.PoolConfig{CallTimeout: callTimeout}),
		http: &http.Client{Timeout: callTimeout},
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
		}
	}()
	var configArgs []string
	if config != "" {
		path := filepath.Join(dir, "server.hcl")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			return nil, err
		}
		configArgs = []string{"-config", path}
	}
	ports, err := freeLoopbackPorts(2 * n)
	if err != nil {
		return nil, err
	}
	var join []string
	for i := range n {
		join = append(join, "-retry-join", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])))
	}
	for i := range n {
		name := fmt.Sprintf("s%d", i+1)
		args := []string{"agent", "-server", "-node-name", name, "-data-dir", filepath.Join(dir, name),
			"-bind", "127.0.0.1", "-http-port", strconv.Itoa(ports[2*i]), "-rpc-port", strconv.Itoa(ports[2*i+1]),
			"-bootstrap-expect", strconv.Itoa(n), "-log-level", "warn"}
		args = append(append(args, join...), configArgs...)
		httpAddr := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))
		client, err := api.NewClient(api.Config{Address: httpAddr, HTTPClient: c.http})
		if err != nil {
			return nil, err
		}
		c.servers = append(c.servers, &procServer{
			name: name, args: args, logPath: filepath.Join(dir, name+".log"), httpAddr: httpAddr, client: client,
			rpcAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])),
		})
	}
	for _, s := range c.servers {
		if err := c.start(s); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// freeLoopbackPorts returns n distinct free loopback ports, holding every
// listener until all are chosen so none is handed out twice.
func freeLoopbackPorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// start runs s's process, its output to its log file.
func (c *procCluster) start(s *procServer) error {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(c.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A killed benchmark leaves no servers behind.
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting server %s: %w", s.name, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return nil
}

// stop ends s's process: an interrupt, which the agent takes as a graceful
// shutdown, then a kill if it has not exited in procStopTimeout.
func (c *procCluster) stop(s *procServer) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	// A frozen server (the failover phase's SIGSTOP) takes no signal
	// until it is thawed.
	thaw(cmd.Process)
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
		return nil
	case <-time.After(procStopTimeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("server %s did not stop within %s and was killed", s.name, procStopTimeout)
	}
}

// pid is the process ID of s's running process, 0 when none.
func (s *procServer) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	select {
	case <-s.done:
		return 0
	default:
	}
	return s.cmd.Process.Pid
}

func (c *procCluster) close() error {
	var errs []error
	for _, s := range c.servers {
		errs = append(errs, c.stop(s))
	}
	c.pool.Close()
	return errors.Join(errs...)
}

// get sends a GET to path on s and decodes the JSON answer into out (nil
// discards it).
func (c *procCluster) get(ctx context.Context, s *procServer, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.httpAddr+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s on %s: %s: %s", path, s.name, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitLeader waits until every running server names the same leader and
// the leader answers a default read, and returns it.
func (c *procCluster) waitLeader(ctx context.Context) (*procServer, error) {
	deadline := time.Now().Add(formTimeout)
	var last error
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		leader, err := c.agreedLeader(ctx)
		if err == nil {
			if err = c.get(ctx, leader, "/v1/volumes?per_page=1", nil); err == nil {
				return leader, nil
			}
		}
		last = err
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no leader within %s: %w", formTimeout, last)
}

func (c *procCluster) agreedLeader(ctx context.Context) (*procServer, error) {
	var addr string
	for _, s := range c.servers {
		if s.pid() == 0 {
			continue
		}
		var got string
		if err := c.get(ctx, s, "/v1/status/leader?stale", &got); err != nil {
			return nil, err
		}
		if got == "" || (addr != "" && got != addr) {
			return nil, fmt.Errorf("servers do not agree on a leader yet")
		}
		addr = got
	}
	for _, s := range c.servers {
		if s.rpcAddr == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("the leader %q is none of the cluster's servers", addr)
}

// call makes an RPC on s.
func (c *procCluster) call(s *procServer, method string, args, reply any) error {
	return c.pool.RPC(s.rpcAddr, method, args, reply)
}

// registerNode registers the benchmark node through s, so volumes of the
// benchmark plugin are valid, and heartbeats it until stop is closed.
func (c *procCluster) registerNode(s *procServer, stop <-chan struct{}, wg *sync.WaitGroup) error {
	node := benchNode()
	var reply structs.NodeUpdateResponse
	if err := c.call(s, "Node.Register", &structs.NodeRegisterRequest{Node: node}, &reply); err != nil {
		return fmt.Errorf("registering the benchmark node: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		heartbeat(stop, node, reply.HeartbeatTTL, func(method string, args, reply any) error {
			return c.call(s, method, args, reply)
		}, hclog.NewNullLogger(), "benchmark node")
	}()
	return nil
}

// registerRange registers the benchmark volumes numbered from first to
// last through s, batch per request.
func (c *procCluster) registerRange(ctx context.Context, s *procServer, first, last, batch int) error {
	for n := first; n <= last; n += batch {
		if err := ctx.Err(); err != nil {
			return err
		}
		var vols []*structs.CSIVolume
		for i := n; i <= min(last, n+batch-1); i++ {
			vols = append(vols, benchVolume(int64(i)))
		}
		var reply structs.CSIVolumeRegisterResponse
		if err := c.call(s, "CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: vols}, &reply); err != nil {
			return fmt.Errorf("registering volumes %d to %d: %w", n, n+len(vols)-1, err)
		}
	}
	return nil
}
