package e2e

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestE2E_AllocRunner runs the per_alloc job of examples/job-per-alloc.hcl
// on 3 servers and 2 client agents, each client with its own development
// plugin process (the two sharing one storage system), volumes created
// with the CLI. Each task writes into its own volume. A client killed with
// SIGKILL and started again takes its allocations over: they keep running,
// their claims are unchanged, and the plugin sees no second claim, stage
// or publish. Stopping the job releases every volume.
func TestE2E_AllocRunner(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: clientServerConfig})
	e, s := newClientEnv(t, c)

	exts := e.createVolumes(t, s, 3)
	res := e.cli(t, s, "job run", "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))

	allocs := e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning)
	claims := map[string]*structs.CSIVolumeClaim{}
	for i := range 3 {
		a := allocs[fmt.Sprintf("web.app[%d]", i)]
		must.NotNil(t, a)
		id := fmt.Sprintf("vol[%d]", i)
		hello := filepath.Join(devplugin.VolumeDataDir(e.stateDir, exts[id]), "hello")
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			b, err := os.ReadFile(hello)
			return err == nil && string(b) == "hi\n", fmt.Errorf("%s: %q, %v", hello, b, err)
		})
		vol := e.volume(t, s, id)
		claims[id] = vol.WriteClaims[a.ID]
		must.NotNil(t, claims[id], must.Sprintf("%s holds the write claim on %s", a.Name, id))
		must.Eq(t, a.NodeID, claims[id].NodeID)
		st := a.VolumeStates["data"]
		must.NotNil(t, st)
		must.Eq(t, structs.AllocVolumeStepPublished, st.Step)

		res := e.cli(t, s, "alloc status", a.ID)
		must.Zero(t, res.Code, must.Sprint(res))
		must.StrContains(t, res.Stdout, "Step", must.Sprint(res))
		must.StrContains(t, res.Stdout, "published", must.Sprint(res))
	}
	e.checkCallsOncePerVolume(t, exts)

	// SIGKILL the client that runs the most allocations, and start it
	// again.
	byNode := map[string][]string{}
	for _, a := range allocs {
		byNode[a.NodeID] = append(byNode[a.NodeID], a.ID)
	}
	victim := e.clients[0]
	if len(byNode[e.nodeIDs["c2"]]) > len(byNode[e.nodeIDs["c1"]]) {
		victim = e.clients[1]
	}
	mine := byNode[e.nodeIDs[victim.Name()]]
	must.SliceNotEmpty(t, mine)
	c.Kill(t, victim)
	c.Restart(t, victim)
	logPath := filepath.Join(victim.DataDir(), "..", victim.Name()+".log")
	log := waitLatestLog(t, logPath, "node allocations received from the servers")
	for _, id := range mine {
		must.StrContains(t, log, "task still running from before the agent restarted; supervising it: alloc_id="+id,
			must.Sprintf("allocation %s is taken over", id))
	}
	must.StrNotContains(t, log, "task started:", must.Sprint("no task is started again"))
	must.StrNotContains(t, log, "volume claimed:", must.Sprint("no volume is claimed again"))

	after := e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning)
	must.Eq(t, slices.Sorted(maps.Keys(allocs)), slices.Sorted(maps.Keys(after)))
	for name, a := range after {
		must.Eq(t, allocs[name].ID, a.ID, must.Sprintf("%s is the same allocation", name))
	}
	for id, before := range claims {
		must.Eq(t, before, e.volume(t, s, id).WriteClaims[before.AllocationID], must.Sprintf("the claim on %s is unchanged", id))
	}
	e.checkCallsOncePerVolume(t, exts)

	// Stopping the job stops the tasks; the servers release every volume
	// (node unpublish, node unstage, controller unpublish).
	// -detach: the test waits for the release itself, with its own bound.
	res = e.cli(t, s, "job stop", "-detach", "web")
	must.Zero(t, res.Code, must.Sprint(res))
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for id := range claims {
			if vol := e.volume(t, s, id); vol.InUse() {
				return false, fmt.Errorf("%s is still claimed", id)
			}
		}
		return true, nil
	})
	for id, ext := range exts {
		for _, method := range []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"} {
			must.SliceNotEmpty(t, e.callsOf(t, method, ext, codes.OK), must.Sprintf("%s of %s", method, id))
		}
	}
	e.checkSecrets(t)
	// Volume secrets never reach the clients' disks: a volume is claimed
	// again, rather than its secrets kept, when it must be staged after a
	// restart.
	for _, cl := range e.clients {
		err := filepath.WalkDir(cl.DataDir(), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			noSecret(t, e.secret, path, string(b))
			return nil
		})
		must.NoError(t, err)
	}
}

// waitJobAllocs waits until the job's latest allocation of each name (all
// three) has the client status, and returns them by name.
func (e *clientEnv) waitJobAllocs(t *testing.T, s Server, jobID, status string) map[string]*structs.Allocation {
	t.Helper()
	out := map[string]*structs.Allocation{}
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var allocs []*structs.Allocation
		if err := e.get(s.HTTPAddr()+"/v1/job/"+jobID+"/allocations", &allocs); err != nil {
			return false, err
		}
		clear(out)
		var errs []string
		for _, a := range allocs {
			if a.ServerTerminal() {
				continue
			}
			out[a.Name] = a
			if a.ClientStatus != status {
				errs = append(errs, fmt.Sprintf("%s is %s (%s)", a.Name, a.ClientStatus, a.ClientDescription))
			}
		}
		if len(out) != 3 || len(errs) > 0 {
			return false, fmt.Errorf("%d live allocations: %s", len(out), strings.Join(errs, "; "))
		}
		return true, nil
	})
	return out
}

// checkCallsOncePerVolume checks that each volume was controller
// published, staged and published exactly once.
func (e *clientEnv) checkCallsOncePerVolume(t *testing.T, exts map[string]string) {
	t.Helper()
	for id, ext := range exts {
		for _, method := range []string{"ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"} {
			must.Len(t, 1, e.callsOf(t, method, ext, codes.OK), must.Sprintf("%s of %s", method, id))
		}
	}
}

// waitLatestLog waits until what the latest start of a process logged
// contains want, and returns it.
func waitLatestLog(t *testing.T, path, want string) string {
	t.Helper()
	var out string
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		out = string(b)
		out = out[strings.LastIndex(out, startMarker):]
		return strings.Contains(out, want), fmt.Errorf("%s has not logged %q yet", path, want)
	})
	return out
}

// killTasksUnder kills every process whose working directory is under dir
// (the tasks and task supervisors of the client agent with that data dir),
// with its process group, and waits until they are gone.
func killTasksUnder(t *testing.T, dir string) {
	t.Helper()
	find := func() []int { return processesUnder(dir) }
	for _, pid := range find() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testutil.WaitForResult(t, exitTimeout, func() (bool, error) {
		left := find()
		return len(left) == 0, fmt.Errorf("processes under %s survived SIGKILL: %v", dir, left)
	})
}
