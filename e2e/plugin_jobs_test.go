package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// pluginRestartTimeout covers a plugin task's restart: the client's
// restart delay (15s), the start, and fingerprints until healthy.
const pluginRestartTimeout = 90 * time.Second

// TestE2E_PluginJobs runs 3 servers and 2 clients without static plugins;
// the development plugin runs as the jobs of examples/plugin-node.hcl (a
// system job of node plugins) and examples/plugin-controller.hcl (a
// service job of two controllers). The plugin becomes healthy on both
// nodes with two controllers; volumes created through the controller
// tasks are used by the per_alloc job of examples/job-per-alloc.hcl; a
// SIGKILL of a node plugin task makes its instance unhealthy, the client
// restarts it and it is healthy again, while the volumes' consumer keeps
// running.
func TestE2E_PluginJobs(t *testing.T) {
	t.Parallel()
	e, s := startPluginJobs(t)
	res := e.cli(t, s, "plugin status", pluginID)
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, devplugin.PluginName, must.Sprint(res))

	// Volumes created through a controller task, used per allocation.
	_, web := e.runPerAllocConsumer(t, s)

	// SIGKILL the node plugin on c1 (the plugin, not its supervisor).
	victim := e.clients[0]
	nodeAlloc := e.pluginAlloc(t, s, "plugin-dev-nodes", e.nodeIDs[victim.Name()])
	// The agent keeps the client's data under DATA_DIR/client.
	taskDir := filepath.Join(victim.DataDir(), "client", "allocs", nodeAlloc.ID, "plugin")
	pid := pluginProcess(t, taskDir)
	must.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	e.waitTaskEvents(t, s, nodeAlloc.ID, structs.TaskPluginUnhealthy, structs.TaskRestarting)
	e.waitTaskEvents(t, s, nodeAlloc.ID, structs.TaskPluginUnhealthy, structs.TaskRestarting, structs.TaskStarted, structs.TaskPluginHealthy)
	e.waitPluginHealth(t, s, 2)
	must.NotEq(t, pid, pluginProcess(t, taskDir), must.Sprint("the plugin runs again as a new process"))

	// The consumer kept running throughout.
	for name, a := range e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning) {
		must.Eq(t, web[name].ID, a.ID, must.Sprintf("%s is the same allocation", name))
	}
	res = e.cli(t, s, "alloc status", nodeAlloc.ID)
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, "Recent Events:", must.Sprint(res))
	must.StrContains(t, res.Stdout, "Plugin became healthy", must.Sprint(res))

	// Stopping the consumer releases its volumes through the plugin tasks.
	res = e.cli(t, s, "job stop", "-detach", "web")
	must.Zero(t, res.Code, must.Sprint(res))
	for i := range 3 {
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			var vol structs.CSIVolume
			if err := e.get(s.HTTPAddr()+"/v1/volume/csi/"+volID(i), &vol); err != nil {
				return false, err
			}
			return !vol.InUse(), fmt.Errorf("volume %s is still claimed", volID(i))
		})
	}
}

// startPluginJobs starts 3 servers and 2 clients without static plugins
// and runs the example plugin jobs (examples/plugin-node.hcl, a system job
// of node plugins, and examples/plugin-controller.hcl, two controllers)
// with the binary under test and the test's storage system; it returns
// once the plugin is healthy on both nodes, with the follower it talks to.
func startPluginJobs(t *testing.T) (*clientEnv, Server) {
	t.Helper()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: clientServerConfig})
	leader := WaitForLeader(t, c)
	e := &clientEnv{
		c: c, secret: newSecret(t), specDir: t.TempDir(), stateDir: t.TempDir(),
		nodeIDs: map[string]string{}, csiLog: &bytes.Buffer{},
	}
	for _, name := range []string{"c1", "c2"} {
		cl := c.StartClient(t, ClientConfig{Name: name})
		e.clients = append(e.clients, cl)
		t.Cleanup(func() { killTasksUnder(t, cl.DataDir()) })
	}
	s := Followers(c, leader)[0]
	e.waitNodesReady(t, s)
	for _, f := range []string{"plugin-node.hcl", "plugin-controller.hcl"} {
		res := e.cli(t, s, "job run", "-detach", e.examplePluginJob(t, f, nil))
		must.Zero(t, res.Code, must.Sprint(res))
	}
	e.waitPluginHealth(t, s, 2)
	return e, s
}

// examplePluginJob writes the example plugin job file f with the binary
// under test, the test's storage system and the extra plugin arguments,
// and returns its path.
func (e *clientEnv) examplePluginJob(t *testing.T, f string, extraArgs []string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "examples", f))
	must.NoError(t, err)
	spec := strings.ReplaceAll(string(src), `command = "volplane"`, fmt.Sprintf("command = %q", volplaneBin))
	args := fmt.Sprintf(`"-state-dir", %q`, e.stateDir)
	for _, a := range extraArgs {
		args += fmt.Sprintf(", %q", a)
	}
	spec = strings.ReplaceAll(spec, `"-state-dir", "/tmp/volplane-csi-dev"`, args)
	must.StrContains(t, spec, e.stateDir, must.Sprintf("%s names the storage system's directory", f))
	return writeFile(t, e.specDir, f, spec)
}

// runPerAllocConsumer creates vol[0] to vol[2] through a controller task
// and runs the per_alloc job of examples/job-per-alloc.hcl on them; it
// returns the volumes' external IDs and the job's running allocations,
// once each has written to its volume.
func (e *clientEnv) runPerAllocConsumer(t *testing.T, s Server) (map[string]string, map[string]*structs.Allocation) {
	t.Helper()
	exts := e.createVolumes(t, s, 3)
	res := e.cli(t, s, "job run", "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	web := e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning)
	for i := range 3 {
		hello := filepath.Join(devplugin.VolumeDataDir(e.stateDir, exts[volID(i)]), "hello")
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			b, err := os.ReadFile(hello)
			return err == nil && string(b) == "hi\n", fmt.Errorf("%s: %q, %v", hello, b, err)
		})
	}
	return exts, web
}

// pluginAlloc returns the running allocation of the plugin job on node.
func (e *clientEnv) pluginAlloc(t *testing.T, s Server, jobID, node string) *structs.Allocation {
	t.Helper()
	var out *structs.Allocation
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var allocs []*structs.Allocation
		if err := e.get(s.HTTPAddr()+"/v1/job/"+jobID+"/allocations", &allocs); err != nil {
			return false, err
		}
		for _, a := range allocs {
			if a.NodeID == node && a.ClientStatus == structs.AllocClientStatusRunning {
				out = a
				return true, nil
			}
		}
		return false, fmt.Errorf("job %s has no running allocation on %s among %d", jobID, node, len(allocs))
	})
	return out
}

// waitTaskEvents waits until the allocation's plugin task has the events
// of the given types in that order (others may come between).
func (e *clientEnv) waitTaskEvents(t *testing.T, s Server, allocID string, types ...string) {
	t.Helper()
	testutil.WaitForResult(t, pluginRestartTimeout, func() (bool, error) {
		var a structs.Allocation
		if err := e.get(s.HTTPAddr()+"/v1/allocation/"+allocID, &a); err != nil {
			return false, err
		}
		ts := a.TaskStates["plugin"]
		if ts == nil {
			return false, fmt.Errorf("no state of the plugin task")
		}
		var got []string
		i := 0
		for _, ev := range ts.Events {
			got = append(got, ev.Type)
			if i < len(types) && ev.Type == types[i] {
				i++
			}
		}
		return i == len(types), fmt.Errorf("events %q, want %q in order", got, types)
	})
}

// pluginProcess returns the PID of the development plugin running in
// taskDir (its shim runs there too, under another command line).
func pluginProcess(t *testing.T, taskDir string) int {
	t.Helper()
	var pid int
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for _, p := range processesUnder(taskDir) {
			cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			if err == nil && bytes.Contains(cmd, []byte("csi-dev-plugin")) {
				pid = p
				return true, nil
			}
		}
		var seen []string
		for _, p := range processesUnder(filepath.Dir(filepath.Dir(filepath.Dir(taskDir)))) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p))
			seen = append(seen, fmt.Sprintf("%d %q in %s", p, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}), cwd))
		}
		return false, fmt.Errorf("no csi-dev-plugin process in %s; the client's processes: %s", taskDir, strings.Join(seen, "; "))
	})
	return pid
}
