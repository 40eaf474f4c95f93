package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// devAgent is one `volplane agent -dev` process, started as a user starts
// it but on ports it picks itself (-http-port 0 -rpc-port 0), with its data
// dir in the test's temp dir so that what it leaves behind can be looked at.
type devAgent struct {
	cmd      *exec.Cmd
	out      *testutil.Buffer
	done     chan struct{}
	exitErr  error // set before done is closed
	dataDir  string
	httpAddr string
	rpcAddr  string
}

// devAgentStarted is the line the agent prints once its server listens.
var devAgentStarted = regexp.MustCompile(`volplane agent started: .*, RPC (127\.0\.0\.1:[0-9]+), HTTP (http://127\.0\.0\.1:[0-9]+)`)

// startDevAgent starts a dev agent on dataDir, with extra flags after the
// harness's own, and returns as soon as the agent printed the address it
// serves HTTP on, as a script that reads it would. The agent is killed,
// and the tasks it left behind with it, when the test ends.
func startDevAgent(t *testing.T, dataDir string, extra ...string) *devAgent {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: skipped with -short")
	}
	if buildErr != nil {
		t.Fatalf("e2e: %v", buildErr)
	}
	a := &devAgent{out: &testutil.Buffer{}, done: make(chan struct{}), dataDir: dataDir}
	args := append([]string{"agent", "-dev", "-http-port", "0", "-rpc-port", "0",
		"-data-dir", dataDir, "-log-level", "debug"}, extra...)
	a.cmd = exec.Command(volplaneBin, args...)
	a.cmd.Stdout, a.cmd.Stderr = a.out, a.out
	a.cmd.Env = cliEnv()
	configureCmd(a.cmd)
	must.NoError(t, a.cmd.Start())
	go func() {
		a.exitErr = a.cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() {
		select {
		case <-a.done:
		default:
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		killTasksUnder(t, dataDir)
		if t.Failed() {
			t.Logf("==== e2e: output of the dev agent on %s ====\n%s", dataDir, a.out.String())
		}
	})
	testutil.WaitForResult(t, startTimeout, func() (bool, error) {
		select {
		case <-a.done:
			t.Fatalf("e2e: the dev agent exited while starting: %v\n%s", a.exitErr, a.out.String())
		default:
		}
		m := devAgentStarted.FindStringSubmatch(a.out.String())
		if m == nil {
			return false, errors.New("the dev agent has not printed its addresses")
		}
		a.rpcAddr, a.httpAddr = m[1], m[2]
		return true, nil
	})
	return a
}

// The agent is the Server the harness's CLI runs against.
var _ Server = (*devAgent)(nil)

func (a *devAgent) Name() string     { return "dev" }
func (a *devAgent) HTTPAddr() string { return a.httpAddr }
func (a *devAgent) RPCAddr() string  { return a.rpcAddr }

// cli runs `volplane <command> -address=<the agent> args...`.
func (a *devAgent) cli(t *testing.T, command string, args ...string) CLIResult {
	t.Helper()
	return (&ProcessCluster{bin: volplaneBin}).CLI(t, a, command, args...)
}

// interrupt sends SIGINT, as Ctrl-C does, and waits for the agent to exit;
// it returns how long that took.
func (a *devAgent) interrupt(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	must.NoError(t, a.cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-a.done:
	case <-time.After(time.Minute):
		t.Fatalf("e2e: the dev agent did not exit within a minute of SIGINT")
	}
	must.NoError(t, a.exitErr, must.Sprint("the dev agent exits 0 on SIGINT"))
	return time.Since(start)
}

// writeDevVolumeSpec writes the specification of a volume of the dev
// plugin to create, and returns its path.
func writeDevVolumeSpec(t *testing.T, id string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), id+".hcl")
	must.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`id        = %q
name      = %q
type      = "csi"
plugin_id = "dev"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, id, id)), 0o644))
	return path
}

// A script that starts the dev agent and creates a volume at once works
// every time: the agent holds API writes until its own client registered
// with the dev plugin healthy. Once with the plugin's first probe answering
// "not ready", so that the plugin is healthy only at the next fingerprint
// (seconds later) and a write that did not wait fails for certain; then
// rounds as a user's script runs them.
func TestE2E_DevAgentWritesRightAfterStart(t *testing.T) {
	t.Parallel()
	spec := writeDevVolumeSpec(t, "scratch")
	for round := range 5 {
		dataDir := t.TempDir()
		if round == 0 {
			stateDir := filepath.Join(dataDir, "devplugin")
			must.NoError(t, os.MkdirAll(stateDir, 0o755))
			must.NoError(t, devplugin.SetFault(stateDir, "Probe", devplugin.Fault{NotReady: true, Times: 1}))
		}
		a := startDevAgent(t, dataDir)
		res := a.cli(t, "volume create", spec)
		must.Zero(t, res.Code, must.Sprintf("round %d: %s", round, res))
		must.StrContains(t, res.Stdout, `Created volume "scratch"`)
		a.interrupt(t)
	}
}

// Ctrl-C on `agent -dev` stops its allocations before it exits: no task it
// started keeps running, and the dev plugin has nothing staged or published
// on the node, nor controller-published, for them any more.
func TestE2E_DevAgentInterruptStopsAllocations(t *testing.T) {
	t.Parallel()
	a := startDevAgent(t, t.TempDir())
	for _, id := range []string{"vol[0]", "vol[1]", "vol[2]"} {
		res := a.cli(t, "volume create", writeDevVolumeSpec(t, id))
		must.Zero(t, res.Code, must.Sprint(res))
	}
	res := a.cli(t, "job run", "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var allocs []*structs.Allocation
		if err := getJSON(a.httpAddr+"/v1/job/web/allocations", &allocs); err != nil {
			return false, err
		}
		running := 0
		for _, al := range allocs {
			if al.ClientStatus == structs.AllocClientStatusRunning {
				running++
			}
		}
		return running == 3, fmt.Errorf("%d of 3 allocations running", running)
	})
	clientDir := filepath.Join(a.dataDir, "client")
	must.SliceNotEmpty(t, processesUnder(clientDir), must.Sprint("the tasks run"))
	stateDir := filepath.Join(a.dataDir, "devplugin")
	must.MapNotEmpty(t, devPluginState(t, stateDir).published(), must.Sprint("the volumes are published"))

	took := a.interrupt(t)
	t.Logf("the dev agent stopped its allocations and exited %s after SIGINT", took.Round(time.Millisecond))
	must.SliceEmpty(t, processesUnder(clientDir), must.Sprint("no task or task supervisor outlives the agent"))
	st := devPluginState(t, stateDir)
	must.MapEmpty(t, st.published(), must.Sprint("nothing is left published or staged on the node"))
	must.MapEmpty(t, st.controllerPublished(), must.Sprint("nothing is left controller-published"))
	out := a.out.String()
	must.StrContains(t, out, "Stopping the allocations and releasing their volumes")
	must.StrContains(t, out, `description="tasks stopped: the agent is shutting down"`)
}

// devState is the part of the dev plugin's state file the tests read.
type devState struct {
	Volumes map[string]struct {
		Publications map[string]json.RawMessage `json:"publications"`
	} `json:"volumes"`
	Nodes map[string]struct {
		Staged    map[string]json.RawMessage `json:"staged"`
		Published map[string]json.RawMessage `json:"published"`
	} `json:"nodes"`
}

func devPluginState(t *testing.T, stateDir string) *devState {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	must.NoError(t, err)
	var st devState
	must.NoError(t, json.Unmarshal(b, &st))
	return &st
}

// published returns, by node and path or volume, what is staged or
// published on a node.
func (s *devState) published() map[string]bool {
	out := map[string]bool{}
	for node, n := range s.Nodes {
		for v := range n.Staged {
			out[node+" staged "+v] = true
		}
		for p := range n.Published {
			out[node+" published at "+p] = true
		}
	}
	return out
}

// controllerPublished returns the volumes published to a node by the
// controller, by volume and node.
func (s *devState) controllerPublished() map[string]bool {
	out := map[string]bool{}
	for vol, v := range s.Volumes {
		for node := range v.Publications {
			out[vol+" to "+node] = true
		}
	}
	return out
}

// processesUnder returns the live processes whose working directory is
// under dir: the tasks and task supervisors of the client agent whose data
// dir it is.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
