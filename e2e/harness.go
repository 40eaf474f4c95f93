package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/volplane/volplane/testutil"
)

// buildVolplane builds ./cmd/volplane into dir and returns the binary.
func buildVolplane(dir string) (string, error) {
	bin := filepath.Join(dir, "volplane")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/volplane/volplane/cmd/volplane")
	// Built in volplane's own module (this file's parent directory), so
	// that test modules outside it (e2e/nomadcli) build it with volplane's
	// go.mod and go.sum rather than their own.
	if _, file, _, ok := runtime.Caller(0); ok {
		cmd.Dir = filepath.Dir(filepath.Dir(file))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/volplane: %v\n%s", err, out)
	}
	return bin, nil
}

// UseVolplane builds ./cmd/volplane into dir for the harness to run, for
// test packages outside this one (this package's TestMain does the same);
// a build failure is reported by each test that starts a process.
func UseVolplane(dir string) {
	volplaneBin, buildErr = buildVolplane(dir)
}

// VolplaneBinary is the binary the harness runs, once built.
func VolplaneBinary() (string, error) { return volplaneBin, buildErr }

// volplaneBin is the binary TestMain built, or buildErr why it could not.
var (
	volplaneBin string
	buildErr    error
)

// configureCmd adjusts every agent command before it starts; on Linux it
// makes the agent die with the test binary (see harness_linux.go), so that
// a test binary killed by -timeout leaves no agents behind.
var configureCmd = func(*exec.Cmd) {}

// ProcessConfig configures NewProcessCluster.
type ProcessConfig struct {
	// Servers is the number of server agents; each is started with
	// -bootstrap-expect Servers and -retry-join naming every server.
	Servers int
	// ServerConfig, when set, is an agent configuration file (HCL) every
	// server is started with (-config); flags override it. Tests use it for
	// the settings that have no flag, such as the heartbeat TTL.
	ServerConfig string
	// ExtraArgs are appended to every server's command line.
	ExtraArgs []string
	// TLS runs the cluster with tls { rpc = true, http = true }: servers
	// with the package's server certificate, clients with its client
	// certificate, the harness and the CLI with its CLI certificate.
	TLS bool
}

// ProcessCluster is a Cluster of `volplane agent -server` processes, and
// the client agents and CSI plugins a test adds to it.
type ProcessCluster struct {
	bin string
	// dir holds the data dirs and logs of every process.
	dir     string
	servers []*procServer
	clients []*procClient
	plugins []*procPlugin
	// extraDirs are directories outside dir to remove at the end.
	extraDirs []string
	// tls is set for a cluster started with ProcessConfig.TLS.
	tls *tlsFiles
	// token, once set (SetToken), is the ACL token the CLI and the
	// harness's HTTP reads send.
	token string
}

var _ Cluster = (*ProcessCluster)(nil)

// process is one process of the cluster (a server, a client agent or a CSI
// plugin), across its restarts.
type process struct {
	name    string
	args    []string
	logPath string
	// ready waits after each start until the process serves, failing the
	// test if it exits meanwhile.
	ready func(t testing.TB)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed once the current process is reaped
	exitErr error         // how it exited; set before done is closed
	// signalled is set before the harness signals the process to exit, so
	// an exit it did not cause can be reported.
	signalled bool
	paused    bool
	starts    int
}

func (p *process) Name() string { return p.name }

// proc lets the harness find the process behind a Process of any kind.
func (p *process) proc() *process { return p }

// procServer is one server agent.
type procServer struct {
	*process
	httpAddr string
	rpcAddr  string
}

func (s *procServer) HTTPAddr() string { return s.httpAddr }
func (s *procServer) RPCAddr() string  { return s.rpcAddr }

// NewProcessCluster starts cfg.Servers agents, each with its own data dir
// and log file under the test's temp dir, and waits until each one's HTTP
// API answers (not for a leader: see WaitForLeader). Every process is
// killed when the test ends, and on failure the tail of each log is shown.
// It skips the test under -short.
func NewProcessCluster(t testing.TB, cfg ProcessConfig) *ProcessCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	if buildErr != nil {
		t.Fatalf("e2e: %v", buildErr)
	}
	if volplaneBin == "" {
		t.Fatal("e2e: the volplane binary was not built (TestMain must call buildVolplane)")
	}
	if cfg.Servers < 1 {
		t.Fatalf("e2e: a cluster needs at least one server, got %d", cfg.Servers)
	}
	dir := t.TempDir()
	ports := freePorts(t, 2*cfg.Servers)
	c := &ProcessCluster{bin: volplaneBin, dir: dir}
	serverConfig := cfg.ServerConfig
	if cfg.TLS {
		if e2eTLS == nil {
			t.Fatal("e2e: TLS fixtures were not set up (TestMain must call setupTLS)")
		}
		var err error
		if c.tls, err = e2eTLS.copyTo(filepath.Join(dir, "tls")); err != nil {
			t.Fatalf("e2e: copying the TLS files: %v", err)
		}
		serverConfig += c.tls.block(c.tls.server)
	}
	var configArgs []string
	if serverConfig != "" {
		path := filepath.Join(dir, "server.hcl")
		if err := os.WriteFile(path, []byte(serverConfig), 0o644); err != nil {
			t.Fatalf("e2e: writing the servers' config file: %v", err)
		}
		configArgs = []string{"-config", path}
	}
	var join []string
	for i := range cfg.Servers {
		join = append(join, "-retry-join", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])))
	}
	for i := range cfg.Servers {
		name := fmt.Sprintf("s%d", i+1)
		httpPort, rpcPort := ports[2*i], ports[2*i+1]
		args := []string{"agent", "-server",
			"-node-name", name,
			"-data-dir", filepath.Join(dir, name),
			"-bind", "127.0.0.1",
			"-http-port", strconv.Itoa(httpPort),
			"-rpc-port", strconv.Itoa(rpcPort),
			"-bootstrap-expect", strconv.Itoa(cfg.Servers),
			// Debug, so that the secret checks read every line an agent
			// could write.
			"-log-level", "debug",
		}
		args = append(args, join...)
		args = append(args, configArgs...)
		args = append(args, cfg.ExtraArgs...)
		s := &procServer{
			process: &process{
				name:    name,
				args:    args,
				logPath: filepath.Join(dir, name+".log"),
			},
			httpAddr: c.scheme() + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort)),
			rpcAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(rpcPort)),
		}
		s.ready = func(t testing.TB) { c.waitHTTP(t, s) }
		c.servers = append(c.servers, s)
	}
	// Registered after t.TempDir, so it runs before the logs are removed.
	t.Cleanup(func() { c.cleanup(t) })
	for _, s := range c.servers {
		c.start(t, s.process)
	}
	for _, s := range c.servers {
		s.ready(t)
	}
	return c
}

// scheme is the HTTP API's: https for a TLS cluster.
func (c *ProcessCluster) scheme() string {
	if c.tls != nil {
		return "https"
	}
	return "http"
}

// freePorts returns n distinct free loopback ports. All listeners are held
// until every port is chosen, so the kernel cannot hand out one twice.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("e2e: picking a free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// Servers implements Cluster.
func (c *ProcessCluster) Servers() []Server {
	out := make([]Server, len(c.servers))
	for i, s := range c.servers {
		out[i] = s
	}
	return out
}

// Running implements Cluster.
func (c *ProcessCluster) Running() []Server {
	var out []Server
	for _, s := range c.servers {
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if !paused && s.alive() {
			out = append(out, s)
		}
	}
	return out
}

// Alive implements Cluster.
func (c *ProcessCluster) Alive(p Process) bool {
	return procOf(p).alive()
}

// procOf returns the process behind p, which must be one of a
// ProcessCluster's.
func procOf(p Process) *process {
	if pp, ok := p.(interface{ proc() *process }); ok {
		return pp.proc()
	}
	panic(fmt.Sprintf("e2e: %T (%s) is not a process of a ProcessCluster", p, p.Name()))
}

// all returns every process of the cluster: the clients first, then the
// plugins they use, then the servers.
func (c *ProcessCluster) all() []*process {
	var out []*process
	for _, cl := range c.clients {
		out = append(out, cl.process)
	}
	for _, p := range c.plugins {
		out = append(out, p.process)
	}
	for _, s := range c.servers {
		out = append(out, s.process)
	}
	return out
}

func (s *process) alive() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exitError is how the last run of s ended (nil while it runs).
func (s *process) exitError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitErr
}

// startMarker begins the line the harness writes to a process's log before
// each start.
const startMarker = "==== e2e: start "

// start launches s's process with its output appended to its log file.
func (c *ProcessCluster) start(t testing.TB, s *process) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		select {
		case <-s.done:
		default:
			t.Fatalf("e2e: %s is already running", s.name)
		}
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("e2e: opening the log of %s: %v", s.name, err)
	}
	// The child gets its own descriptor; ours is not needed after Start.
	defer logFile.Close()
	s.starts++
	fmt.Fprintf(logFile, "%s%d of %s at %s: volplane %s\n",
		startMarker, s.starts, s.name, time.Now().Format(time.RFC3339Nano), strings.Join(s.args, " "))
	cmd := exec.Command(c.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = cliEnv()
	configureCmd(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("e2e: starting %s: %v", s.name, err)
	}
	done := make(chan struct{})
	s.cmd, s.done, s.signalled, s.paused, s.exitErr = cmd, done, false, false, nil
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.exitErr = err
		s.mu.Unlock()
		close(done)
	}()
}

// waitHTTP waits until s's HTTP API answers a stale status read, failing at
// once if the process exits meanwhile.
func (c *ProcessCluster) waitHTTP(t testing.TB, s *procServer) {
	t.Helper()
	testutil.WaitForResult(t, startTimeout, func() (bool, error) {
		if !s.alive() {
			t.Fatalf("e2e: %s exited while starting: %v", s.name, s.exitError())
		}
		var leader string
		if err := getJSON(s.httpAddr+"/v1/status/leader?stale", &leader); err != nil {
			return false, fmt.Errorf("%s: %v", s.name, err)
		}
		return true, nil
	})
}

// signal sends sig to s's running process; exiting marks the exit as the
// harness's doing.
func (c *ProcessCluster) signal(t testing.TB, s *process, sig syscall.Signal, exiting bool) <-chan struct{} {
	t.Helper()
	if !s.alive() {
		t.Fatalf("e2e: %s is not running", s.name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if exiting {
		s.signalled = true
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("e2e: sending %v to %s: %v", sig, s.name, err)
	}
	return s.done
}

// Kill implements Cluster.
func (c *ProcessCluster) Kill(t testing.TB, p Process) {
	t.Helper()
	s := procOf(p)
	done := c.signal(t, s, syscall.SIGKILL, true)
	c.waitExit(t, s, done)
	t.Logf("e2e: killed %s", s.name)
}

// Stop implements Cluster.
func (c *ProcessCluster) Stop(t testing.TB, p Process) error {
	t.Helper()
	s := procOf(p)
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	start := time.Now()
	done := c.signal(t, s, syscall.SIGTERM, true)
	if paused {
		// A stopped process handles SIGTERM only once it runs again.
		c.signal(t, s, syscall.SIGCONT, false)
	}
	c.waitExit(t, s, done)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	t.Logf("e2e: stopped %s in %s: %v", s.name, time.Since(start).Round(time.Millisecond), s.exitErr)
	return s.exitErr
}

func (c *ProcessCluster) waitExit(t testing.TB, s *process, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(exitTimeout):
		c.dumpStuck(t, s, done)
		t.Fatalf("e2e: %s did not exit within %s of being signalled", s.name, exitTimeout)
	}
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
}

// Pause implements Cluster.
func (c *ProcessCluster) Pause(t testing.TB, p Process) {
	t.Helper()
	s := procOf(p)
	c.signal(t, s, syscall.SIGSTOP, false)
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	t.Logf("e2e: paused %s", s.name)
}

// Resume implements Cluster.
func (c *ProcessCluster) Resume(t testing.TB, p Process) {
	t.Helper()
	s := procOf(p)
	c.signal(t, s, syscall.SIGCONT, false)
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	t.Logf("e2e: resumed %s", s.name)
}

// Restart implements Cluster.
func (c *ProcessCluster) Restart(t testing.TB, p Process) {
	t.Helper()
	s := procOf(p)
	c.start(t, s)
	if s.ready != nil {
		s.ready(t)
	}
	t.Logf("e2e: restarted %s", s.name)
}

// CLI implements Cluster.
func (c *ProcessCluster) CLI(t testing.TB, srv Server, command string, args ...string) CLIResult {
	t.Helper()
	argv := append(strings.Fields(command), "-address="+srv.HTTPAddr())
	argv = append(argv, args...)
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, argv...)
	cmd.Env = cliEnv()
	if c.tls != nil {
		cmd.Env = append(cmd.Env, c.tls.cliEnv()...)
	}
	if c.token != "" {
		// A -token among args wins over it.
		cmd.Env = append(cmd.Env, "VOLPLANE_TOKEN="+c.token)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := CLIResult{Args: argv, Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("e2e: volplane %s did not finish within %s\nstdout:\n%s\nstderr:\n%s",
			strings.Join(argv, " "), cliTimeout, res.Stdout, res.Stderr)
	case errors.As(err, &exitErr):
		res.Code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("e2e: running volplane %s: %v", strings.Join(argv, " "), err)
	}
	return res
}

// cliEnv is the environment of every process the harness starts: the
// test's, without the variables that would point the CLI elsewhere
// (Nomad's are read when volplane's are unset).
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VOLPLANE_") && !strings.HasPrefix(kv, "NOMAD_") {
			env = append(env, kv)
		}
	}
	return env
}

// cleanup kills every process still running, reports any that exited
// without the harness asking, and on failure shows each agent's log.
func (c *ProcessCluster) cleanup(t testing.TB) {
	for _, s := range c.all() {
		s.mu.Lock()
		cmd, done, signalled := s.cmd, s.done, s.signalled
		s.mu.Unlock()
		if done == nil {
			continue
		}
		select {
		case <-done:
			s.mu.Lock()
			err := s.exitErr
			s.mu.Unlock()
			if !signalled {
				t.Errorf("e2e: %s exited on its own: %v", s.name, err)
			}
			continue
		default:
		}
		// SIGKILL also ends a paused process.
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(exitTimeout):
			t.Errorf("e2e: %s (pid %d) did not die after SIGKILL", s.name, cmd.Process.Pid)
		}
	}
	for _, dir := range c.extraDirs {
		os.RemoveAll(dir)
	}
	if !t.Failed() {
		return
	}
	for _, s := range c.all() {
		tail, err := logTail(s.logPath, logTailLines)
		if err != nil {
			t.Logf("e2e: reading the log of %s: %v", s.name, err)
			continue
		}
		t.Logf("==== e2e: last %d lines of %s's log (%s) ====\n%s", logTailLines, s.name, s.logPath, tail)
	}
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 2*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), sc.Err()
}

// Logs implements Cluster: each agent's stdout and stderr, across restarts.
func (c *ProcessCluster) Logs(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range c.all() {
		b, err := os.ReadFile(s.logPath)
		if err != nil {
			t.Fatalf("e2e: reading the log of %s: %v", s.name, err)
		}
		out[s.name] = string(b)
	}
	return out
}
