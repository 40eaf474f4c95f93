package client

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/clienttest"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// devPluginTaskArg makes the test binary, run as a task with it as its
// first argument, the development plugin on $CSI_ENDPOINT, as
// `volplane csi-dev-plugin` is in a real job; its PID goes to plugin.pid
// in the task's directory, for the tests to kill it.
const devPluginTaskArg = "client-test-csi-dev-plugin"

func init() {
	if len(os.Args) == 3 && os.Args[1] == devPluginTaskArg {
		os.Exit(runDevPluginTask(os.Args[2]))
	}
}

func runDevPluginTask(stateDir string) int {
	p, err := devplugin.New(devplugin.Config{
		Endpoint: os.Getenv("CSI_ENDPOINT"), StateDir: stateDir, NodeID: os.Getenv("VOLPLANE_NODE_ID"),
	})
	if err == nil {
		err = p.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.WriteFile("plugin.pid", []byte(strconv.Itoa(os.Getpid())), 0o600)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	p.Stop()
	return 0
}

// pluginJob is a job whose one task runs the development plugin (or
// command, when given) as a CSI plugin of type typ.
func pluginJob(t *testing.T, id, jobType string, typ structs.CSIPluginType, stateDir string, command ...string) *structs.Job {
	t.Helper()
	if command == nil {
		exe, err := os.Executable()
		must.NoError(t, err)
		command = []string{exe, devPluginTaskArg, stateDir}
	}
	return &structs.Job{
		ID: id, Namespace: structs.DefaultNamespace, Type: jobType,
		TaskGroups: []*structs.TaskGroup{{
			Name: "plugin", Count: 1,
			Tasks: []*structs.Task{{
				Name: "plugin", Driver: "exec",
				Config: structs.TaskConfig{Command: command[0], Args: command[1:]},
				CSIPluginConfig: &structs.TaskCSIPluginConfig{
					ID: "dev", Type: typ, HealthTimeout: 5 * time.Second,
				},
			}},
		}},
	}
}

// pluginJobClient starts one server and one client without static
// plugins, on a short data dir (plugin sockets live in it).
func pluginJobClient(t *testing.T) (*server.Server, *Client) {
	t.Helper()
	srv := testCluster(t, 1)[0]
	dir := socketDir(t)
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	return srv, startPluginJobClient(t, srv, dir)
}

// startPluginJobClient starts (again) the client of pluginJobClient on
// its data dir.
func startPluginJobClient(t *testing.T, srv *server.Server, dir string) *Client {
	t.Helper()
	c := testClient(t, addrs(srv), func(cfg *Config) {
		cfg.DataDir = dir
		cfg.FingerprintInterval = 100 * time.Millisecond
		cfg.TaskPollInterval = 50 * time.Millisecond
		cfg.TaskKillTimeout = 2 * time.Second
		cfg.TaskRestartDelay = 200 * time.Millisecond
		cfg.AllocWatchWait = 10 * time.Second
		cfg.serverRetryMax = 250 * time.Millisecond
	})
	waitRegistered(t, c)
	return c
}

// taskEvents checks that the task's events include the given types in
// that order (others may come between).
func taskEvents(task string, types ...string) func(*structs.Allocation) error {
	return func(a *structs.Allocation) error {
		ts := a.TaskStates[task]
		if ts == nil {
			return fmt.Errorf("no state of task %s", task)
		}
		var got []string
		for _, e := range ts.Events {
			got = append(got, e.Type)
		}
		i := 0
		for _, g := range got {
			if i < len(types) && g == types[i] {
				i++
			}
		}
		if i < len(types) {
			return fmt.Errorf("task %s events %q, want %q in order", task, got, types)
		}
		return nil
	}
}

// TestPluginJob_HealthyKilledRestartedStopped runs the development plugin
// as a monolith plugin job on a client without static plugins: it becomes
// healthy with its provider, a SIGKILL of the plugin makes its instance
// unhealthy (a task event), the task is restarted and healthy again, and a
// job stop deregisters the instance from the node.
func TestPluginJob_HealthyKilledRestartedStopped(t *testing.T) {
	srv, c := pluginJobClient(t)
	registerJob(t, srv, pluginJob(t, "plugin-dev", structs.JobTypeService, structs.CSIPluginTypeMonolith, t.TempDir()))

	waitPlugin(t, srv, "dev", func(p *structs.CSIPlugin) error {
		switch {
		case p == nil:
			return fmt.Errorf("no plugin")
		case p.NodesHealthy != 1 || p.ControllersHealthy != 1:
			return fmt.Errorf("plugin %+v", p)
		case p.Provider != devplugin.PluginName:
			return fmt.Errorf("provider %q, want %q", p.Provider, devplugin.PluginName)
		}
		return nil
	})
	allocs := waitAllocs(t, srv, "plugin-dev", 1, func(a *structs.Allocation) error {
		if err := clientStatus(structs.AllocClientStatusRunning)(a); err != nil {
			return err
		}
		return taskEvents("plugin", structs.TaskStarted, structs.TaskPluginHealthy)(a)
	})
	alloc := allocs["plugin-dev.plugin[0]"]
	must.NotNil(t, alloc)
	ev := alloc.TaskStates["plugin"].Events
	must.Eq(t, "plugin: dev", ev[len(ev)-1].DisplayMessage)
	// The node reports which allocation runs the instance, on both sides.
	p, err := srv.State().CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.Eq(t, alloc.ID, p.Nodes[c.NodeID()].AllocID)
	must.Eq(t, alloc.ID, p.Controllers[c.NodeID()].AllocID)

	// SIGKILL the plugin itself (not its shim): the client sees the task
	// end, reports the instance unhealthy, and restarts the task.
	pidFile := filepath.Join(c.allocDir(alloc.ID), "plugin", "plugin.pid")
	buf, err := os.ReadFile(pidFile)
	must.NoError(t, err)
	pid, err := strconv.Atoi(string(buf))
	must.NoError(t, err)
	must.NoError(t, os.Remove(pidFile))
	must.NoError(t, syscall.Kill(pid, syscall.SIGKILL))

	waitAlloc(t, srv, alloc.ID, taskEvents("plugin",
		structs.TaskPluginHealthy, structs.TaskTerminated, structs.TaskPluginUnhealthy, structs.TaskRestarting,
		structs.TaskStarted, structs.TaskPluginHealthy))
	a := waitAlloc(t, srv, alloc.ID, func(a *structs.Allocation) error {
		if ts := a.TaskStates["plugin"]; ts.Restarts != 1 || ts.State != structs.TaskStateRunning {
			return fmt.Errorf("task %+v", ts)
		}
		return clientStatus(structs.AllocClientStatusRunning)(a)
	})
	var unhealthy *structs.TaskEvent
	for _, e := range a.TaskStates["plugin"].Events {
		if e.Type == structs.TaskPluginUnhealthy {
			unhealthy = e
		}
	}
	must.StrContains(t, unhealthy.DisplayMessage, "Error: plugin task exited: task plugin: killed by SIGKILL")
	waitPlugin(t, srv, "dev", instanceHealth(c.NodeID(), true, ""))
	_, err = os.Stat(pidFile)
	must.NoError(t, err, must.Sprint("the restarted plugin wrote its PID again"))

	// Stopping the job stops the task and deregisters the instance; the
	// node's fingerprint drops the plugin.
	must.NoError(t, srv.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "plugin-dev"}, &structs.JobDeregisterResponse{}))
	waitAlloc(t, srv, alloc.ID, clientStatus(structs.AllocClientStatusComplete))
	waitNode(t, srv, c.NodeID(), func(n *structs.Node) error {
		if len(n.CSINodePlugins) != 0 || len(n.CSIControllerPlugins) != 0 {
			return fmt.Errorf("node still reports plugins: nodes %v, controllers %v", n.CSINodePlugins, n.CSIControllerPlugins)
		}
		return nil
	})
	must.SliceEmpty(t, c.plugins.Keys())
}

// TestPluginJob_NoSocket: a plugin task that never creates its socket gets
// a task event saying so and fails its allocation after health_timeout.
func TestPluginJob_NoSocket(t *testing.T) {
	srv, _ := pluginJobClient(t)
	job := pluginJob(t, "plugin-mute", structs.JobTypeService, structs.CSIPluginTypeNode, "", "/bin/sleep", "60")
	job.TaskGroups[0].Tasks[0].CSIPluginConfig.HealthTimeout = time.Second
	registerJob(t, srv, job)

	start := time.Now()
	allocs := waitAllocs(t, srv, "plugin-mute", 1, clientStatus(structs.AllocClientStatusFailed))
	must.Greater(t, time.Second, time.Since(start))
	for _, a := range allocs {
		must.StrContains(t, a.ClientDescription, "CSI plugin did not create its socket")
		must.StrContains(t, a.ClientDescription, "before configured 1s health timeout")
		must.NoError(t, taskEvents("plugin", structs.TaskStarted, structs.TaskPluginUnhealthy, structs.TaskKilling, structs.TaskTerminated)(a))
		must.True(t, a.TaskStates["plugin"].Failed)
	}
	p, err := srv.State().CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.Nil(t, p, must.Sprint("a plugin that never answered is never on the node"))
}

// TestPluginJob_BadInput: jobs whose csi_plugin block is wrong are
// refused at registration with Nomad's messages.
func TestPluginJob_BadInput(t *testing.T) {
	srv := testCluster(t, 1)[0]
	cases := map[string]struct {
		change func(*structs.TaskCSIPluginConfig)
		want   string
	}{
		"no id":        {func(c *structs.TaskCSIPluginConfig) { c.ID = "" }, "CSIPluginConfig must have a non-empty PluginID"},
		"unknown type": {func(c *structs.TaskCSIPluginConfig) { c.Type = "storage" }, `CSIPluginConfig PluginType must be one of 'node', 'controller', or 'monolith', got: "storage"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			job := pluginJob(t, "bad", structs.JobTypeSystem, structs.CSIPluginTypeNode, t.TempDir())
			tc.change(job.TaskGroups[0].Tasks[0].CSIPluginConfig)
			err := srv.RPC("Job.Register", &structs.JobRegisterRequest{Job: job}, &structs.JobRegisterResponse{})
			must.ErrorContains(t, err, tc.want)
			must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
		})
	}
	var reply structs.JobRegisterResponse
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		err := srv.RPC("Job.Register", &structs.JobRegisterRequest{Job: pluginJob(t, "advice", structs.JobTypeService, structs.CSIPluginTypeNode, t.TempDir())}, &reply)
		return err == nil, err
	})
	must.SliceLen(t, 1, reply.Warnings)
	must.True(t, strings.Contains(reply.Warnings[0], "node and monolith plugins belong in system jobs"))
}

// TestPluginJob_AgentRestart: a plugin task keeps running while its agent
// restarts, and the restarted agent registers its instance again, without
// restarting the task.
func TestPluginJob_AgentRestart(t *testing.T) {
	srv, c := pluginJobClient(t)
	registerJob(t, srv, pluginJob(t, "plugin-dev", structs.JobTypeSystem, structs.CSIPluginTypeNode, t.TempDir()))
	waitPlugin(t, srv, "dev", instanceHealth(c.NodeID(), true, ""))
	allocs := waitAllocs(t, srv, "plugin-dev", 1, clientStatus(structs.AllocClientStatusRunning))
	var alloc *structs.Allocation
	for _, a := range allocs {
		alloc = a
	}
	pidFile := filepath.Join(c.allocDir(alloc.ID), "plugin", "plugin.pid")
	before, err := os.ReadFile(pidFile)
	must.NoError(t, err)

	must.NoError(t, c.Shutdown())
	c = startPluginJobClient(t, srv, c.config.DataDir)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		keys := c.plugins.Keys()
		return len(keys) == 1, fmt.Errorf("instances %v", keys)
	})
	waitPlugin(t, srv, "dev", instanceHealth(c.NodeID(), true, ""))
	after, err := os.ReadFile(pidFile)
	must.NoError(t, err)
	must.Eq(t, string(before), string(after), must.Sprint("the plugin task was not restarted"))
	a := waitAlloc(t, srv, alloc.ID, clientStatus(structs.AllocClientStatusRunning))
	must.Eq(t, uint64(0), a.TaskStates["plugin"].Restarts)
}
