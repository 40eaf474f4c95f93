package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/allocrunner"
	"github.com/volplane/volplane/client/clienttest"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// allocEnv is a cluster for the allocation runner's tests: servers, and
// client agents each driving its own instance of the development plugin,
// the instances sharing one storage system.
type allocEnv struct {
	t        *testing.T
	servers  []*server.Server
	stateDir string
	plugins  []*devplugin.Plugin
	// dataDirs are the clients' data dirs, kept across their restarts.
	dataDirs []string
}

func newAllocEnv(t *testing.T, servers []*server.Server, clients int) *allocEnv {
	t.Helper()
	e := &allocEnv{t: t, servers: servers, stateDir: t.TempDir()}
	for i := range clients {
		e.plugins = append(e.plugins, startPlugin(t, pluginSocket(t, "dev"), e.stateDir, fmt.Sprintf("storage-%d", i)))
		dir := t.TempDir()
		e.dataDirs = append(e.dataDirs, dir)
		// After every client of the test is shut down (cleanups run last
		// registered first), end the tasks they left running.
		t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	}
	return e
}

// newOneClientEnv starts one server and one client on it (cb may change the
// client's config), and waits until the client's plugin instance is
// healthy.
func newOneClientEnv(t *testing.T, cb func(*Config)) (*server.Server, *allocEnv, *Client) {
	t.Helper()
	servers := testCluster(t, 1)
	e := newAllocEnv(t, servers, 1)
	c := e.startClient(0, cb)
	e.waitNodesHealthy(servers[0], 1)
	return servers[0], e, c
}

// startClient starts client i (again) on its data dir, with the
// allocation runner's timings shortened; cb may change its config.
func (e *allocEnv) startClient(i int, cb func(*Config)) *Client {
	e.t.Helper()
	return testClient(e.t, addrs(e.servers...), func(cfg *Config) {
		cfg.NodeName = fmt.Sprintf("client-%d", i)
		cfg.Logger = testLogger(e.t, cfg.NodeName, nil)
		cfg.DataDir = e.dataDirs[i]
		cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: e.plugins[i].Endpoint()}}
		cfg.ClaimBackoffMin = 50 * time.Millisecond
		cfg.ClaimBackoffMax = 400 * time.Millisecond
		cfg.TaskKillTimeout = 2 * time.Second
		cfg.TaskPollInterval = 50 * time.Millisecond
		cfg.AllocWatchWait = 10 * time.Second
		cfg.serverRetryMax = 250 * time.Millisecond
		cfg.orphanSweepMin = 100 * time.Millisecond
		cfg.orphanSweepMax = time.Second
		if cb != nil {
			cb(cfg)
		}
	})
}

// waitNodesHealthy waits until the plugin has n healthy node instances,
// so that the placer can use every client.
func (e *allocEnv) waitNodesHealthy(srv *server.Server, n int) {
	e.t.Helper()
	waitPlugin(e.t, srv, "dev", func(p *structs.CSIPlugin) error {
		if p == nil || p.NodesHealthy != n || p.ControllersHealthy != n {
			return fmt.Errorf("plugin is %+v", p)
		}
		return nil
	})
}

// createVolume creates a single-node-writer file-system volume through the
// servers (and a client's controller) and returns its external ID.
func (e *allocEnv) createVolume(srv *server.Server, id string) string {
	e.t.Helper()
	vol := mock.CSIVolume("dev")
	vol.ID, vol.Name, vol.ExternalID, vol.Parameters = id, id, "", nil
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	// A client's plugin can be healthy a moment before the servers can
	// call it back: retryable errors are retried. So are the errors of a
	// change of leader; a create whose registration was committed all the
	// same is not sent again (a create of a registered volume is an update
	// of it, which would need its external ID).
	var ext string
	retryWrite(e.t, "creating volume "+id, func() error {
		var got structs.CSIVolumeGetResponse
		if err := srv.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: id}, &got); err != nil {
			return err
		}
		if got.Volume != nil {
			ext = got.Volume.ExternalID
			return nil
		}
		var resp structs.CSIVolumeCreateResponse
		err := srv.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{vol}}, &resp)
		if err == nil {
			must.Len(e.t, 1, resp.Volumes)
			ext = resp.Volumes[0].ExternalID
		}
		return err
	})
	return ext
}

// retryWrite makes an idempotent write (call), trying it again for as long
// as it fails in a way the cluster gets over. Under load the leadership of
// a test cluster can change hands at any moment, and a write that meets the
// change fails with "no leader" (nothing was committed) or an internal
// "leadership lost while committing" (it may have been): both are tried
// again, as the client's own claims are (claimRetryable). Any other error
// fails the test at once.
func retryWrite(t *testing.T, what string, call func() error) {
	t.Helper()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		err := call()
		switch structs.CodeOf(err) {
		case "", structs.ErrCodeRetryable, structs.ErrCodeNoLeader, structs.ErrCodeInternal:
		default:
			t.Fatalf("%s: %v", what, err)
		}
		return err == nil, err
	})
}

// taskScript writes the allocation's name to "hello" in its volume, then
// runs until the file "done" appears in its allocation directory.
const taskScript = `echo "$VOLPLANE_ALLOC_NAME" > "$VOLPLANE_VOLUME_DATA/hello" && ` +
	`while [ ! -e "$VOLPLANE_ALLOC_DIR/done" ]; do sleep 0.05; done`

// writerJob is a service job whose group of count allocations each uses
// the volume source (per allocation when perAlloc) and runs script.
func writerJob(id string, count int, source string, perAlloc bool, script string) *structs.Job {
	return &structs.Job{
		ID: id, Namespace: structs.DefaultNamespace, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: count,
			Volumes: map[string]*structs.VolumeRequest{"data": {
				Name: "data", Type: structs.VolumeTypeCSI, Source: source, PerAlloc: perAlloc,
				AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
				AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
				MountOptions:   &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
			}},
			Tasks: []*structs.Task{{
				Name: "t", Driver: "exec",
				Config:       structs.TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}},
				VolumeMounts: []*structs.VolumeMount{{Volume: "data", Destination: "/data"}},
			}},
		}},
	}
}

func registerJob(t *testing.T, srv *server.Server, job *structs.Job) {
	t.Helper()
	// Registering the same job again changes nothing.
	retryWrite(t, "registering job "+job.ID, func() error {
		return srv.RPC("Job.Register", &structs.JobRegisterRequest{Job: job}, &structs.JobRegisterResponse{})
	})
}

// waitAllocs waits until the job has n allocations that pass check, and
// returns them by name (the latest of each name).
func waitAllocs(t *testing.T, srv *server.Server, jobID string, n int, check func(*structs.Allocation) error) map[string]*structs.Allocation {
	t.Helper()
	out := map[string]*structs.Allocation{}
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		allocs, err := srv.State().AllocsByJob(nil, structs.DefaultNamespace, jobID)
		if err != nil {
			return false, err
		}
		clear(out)
		var errs []error
		ok := 0
		for _, a := range allocs {
			if err := check(a); err != nil {
				errs = append(errs, fmt.Errorf("%s (%s): %w", a.Name, a.ID, err))
				continue
			}
			ok++
			if old := out[a.Name]; old == nil || old.CreateIndex < a.CreateIndex {
				out[a.Name] = a
			}
		}
		if ok != n {
			return false, fmt.Errorf("%d of %d allocations ready: %v", ok, n, errors.Join(errs...))
		}
		return true, nil
	})
	return out
}

// waitAlloc waits until the allocation passes check and returns it.
func waitAlloc(t *testing.T, srv *server.Server, allocID string, check func(*structs.Allocation) error) *structs.Allocation {
	t.Helper()
	var out *structs.Allocation
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		a, err := srv.State().AllocByID(nil, allocID)
		if err != nil || a == nil {
			return false, fmt.Errorf("allocation %s: %v", allocID, err)
		}
		out = a
		if err := check(a); err != nil {
			return false, err
		}
		return true, nil
	})
	return out
}

// clientStatus checks an allocation's client status.
func clientStatus(want string) func(*structs.Allocation) error {
	return func(a *structs.Allocation) error {
		if a.ClientStatus != want {
			return fmt.Errorf("client status %q (%s), want %q", a.ClientStatus, a.ClientDescription, want)
		}
		return nil
	}
}

// callsFor returns the calls of method on the external volume ID, in order.
func callsFor(t *testing.T, stateDir, method, volumeID string) []devplugin.Call {
	t.Helper()
	calls, err := devplugin.ReadCallLog(stateDir)
	must.NoError(t, err)
	var out []devplugin.Call
	for _, c := range calls {
		if c.Method == method && c.VolumeID == volumeID {
			out = append(out, c)
		}
	}
	return out
}

// methodsFor returns the methods called on the external volume ID, in
// order.
func methodsFor(t *testing.T, stateDir, volumeID string) []string {
	t.Helper()
	calls, err := devplugin.ReadCallLog(stateDir)
	must.NoError(t, err)
	var out []string
	for _, c := range calls {
		if c.VolumeID == volumeID {
			out = append(out, c.Method)
		}
	}
	return out
}

// readHello reads the file an allocation's task wrote into its volume.
func readHello(t *testing.T, stateDir, externalID string) string {
	t.Helper()
	var out string
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(devplugin.VolumeDataDir(stateDir, externalID), "hello"))
		out = strings.TrimSpace(string(b))
		return err == nil && out != "", err
	})
	return out
}

// allocDir is the directory of an allocation's tasks on the client.
func (c *Client) allocDir(allocID string) string {
	return allocrunner.AllocDir(c.config.DataDir, allocID)
}

// finishTask makes the taskScript of the allocation exit 0.
func finishTask(t *testing.T, c *Client, allocID string) {
	t.Helper()
	must.NoError(t, os.WriteFile(filepath.Join(c.allocDir(allocID), "done"), nil, 0o600))
}
