package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// nodePluginJob is the job ID of examples/plugin-node.hcl.
const nodePluginJob = "plugin-dev-nodes"

// TestE2E_PluginJobUpgrade: plugin job upgrade with claims in place. The
// node plugin (a system job) and two controllers run as jobs, and the
// per_alloc consumer runs on their volumes. A new version of the node
// plugin job (one more plugin argument) replaces its allocations one node
// at a time (a plugin group's default update max_parallel is 1): while it
// rolls, polling the plugin never sees both nodes without a healthy node
// instance, and the job says what the update waits for. Both nodes end up
// running new plugin processes; the consumer's allocations keep running
// with the same claims, nothing was unpublished; stopping the consumer
// then unpublishes its volumes through the new instances (the old
// processes are gone by then) and frees the claims.
func TestE2E_PluginJobUpgrade(t *testing.T) {
	t.Parallel()
	e, s := startPluginJobs(t)
	exts, web := e.runPerAllocConsumer(t, s)

	claims := map[string]*structs.CSIVolume{}
	for i := range 3 {
		claims[volID(i)] = e.volume(t, s, volID(i))
		must.MapLen(t, 1, claims[volID(i)].WriteClaims, must.Sprintf("%s is claimed", volID(i)))
	}
	// The node plugin processes of version 0, by node.
	oldAllocs := e.nodePluginAllocs(t, s, 0)
	oldPIDs := map[string]int{}
	for node, a := range oldAllocs {
		oldPIDs[node] = pluginProcess(t, e.pluginTaskDir(node, a.ID))
	}

	// Watch the plugin and the job while the update rolls.
	w := e.watchRollingUpdate(s)
	upgradeStart := time.Now()
	res := e.cli(t, s, "job run", "-detach", e.examplePluginJob(t, "plugin-node.hcl", []string{"-log-level", "debug"}))
	must.Zero(t, res.Code, must.Sprint(res))

	// Both nodes end up running version 1, each instance healthy and its
	// own allocation's.
	var newAllocs map[string]*structs.Allocation
	testutil.WaitForResult(t, 2*pluginRestartTimeout, func() (bool, error) {
		var err error
		newAllocs, err = e.liveNodePluginAllocs(s, 1)
		if err != nil {
			return false, err
		}
		p, err := e.plugin(s)
		if err != nil {
			return false, err
		}
		for node, a := range newAllocs {
			if info := p.Nodes[node]; info == nil || !info.Healthy || info.AllocID != a.ID {
				return false, fmt.Errorf("node %s: the instance of allocation %s is not healthy yet: %+v", node, a.ID, info)
			}
		}
		return true, nil
	})
	seen := w.stop(t)
	t.Logf("rolling update polled %d times", seen.polls)
	must.Positive(t, seen.polls)
	must.SliceEmpty(t, seen.bothDown, must.Sprint("both nodes lacked a healthy node plugin instance"))
	must.True(t, seen.waiting, must.Sprint("the job never said the rolling update was waiting"))
	must.LessEq(t, 1, seen.maxReplacing, must.Sprint("one node at a time: at most one new allocation was not running at once"))

	for node, a := range newAllocs {
		must.NotEq(t, oldAllocs[node].ID, a.ID)
		pid := pluginProcess(t, e.pluginTaskDir(node, a.ID))
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		must.NoError(t, err)
		must.True(t, bytes.Contains(cmd, []byte("-log-level")), must.Sprintf("node %s runs the new version: %q", node, cmd))
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			err := syscall.Kill(oldPIDs[node], 0)
			return errors.Is(err, syscall.ESRCH), fmt.Errorf("the old plugin process %d on %s still runs (%v)", oldPIDs[node], node, err)
		})
	}
	var job structs.Job
	must.NoError(t, e.get(s.HTTPAddr()+"/v1/job/"+nodePluginJob, &job))
	must.SliceEmpty(t, job.Placement["nodes"].Waiting)

	// The consumer kept running, with the same claims; the update
	// unpublished nothing.
	for name, a := range e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning) {
		must.Eq(t, web[name].ID, a.ID, must.Sprintf("%s is the same allocation", name))
	}
	for i := range 3 {
		id := volID(i)
		v := e.volume(t, s, id)
		must.Eq(t, claims[id].WriteClaims, v.WriteClaims, must.Sprintf("%s keeps its claims", id))
		must.Eq(t, claims[id].ReadClaims, v.ReadClaims)
		must.SliceEmpty(t, e.callsOf(t, "NodeUnpublishVolume", exts[id], codes.OK))
		for _, c := range e.callsOf(t, "NodePublishVolume", exts[id], codes.OK) {
			must.True(t, c.Time.Before(upgradeStart), must.Sprintf("%s was published by the old instance", id))
		}
	}

	// Stopping the consumer unpublishes through the new instances and frees
	// the claims.
	upgraded := time.Now()
	res = e.cli(t, s, "job stop", "-detach", "web")
	must.Zero(t, res.Code, must.Sprint(res))
	for i := range 3 {
		id := volID(i)
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			var vol structs.CSIVolume
			if err := e.get(s.HTTPAddr()+"/v1/volume/csi/"+id, &vol); err != nil {
				return false, err
			}
			return !vol.InUse(), fmt.Errorf("volume %s is still claimed", id)
		})
		calls := e.callsOf(t, "NodeUnpublishVolume", exts[id], codes.OK)
		must.SliceNotEmpty(t, calls, must.Sprintf("%s was not unpublished", id))
		a := web[structs.AllocName("web", "app", i)]
		must.NotNil(t, a, must.Sprintf("allocation %d of web among %v", i, web))
		for _, c := range calls {
			must.True(t, c.Time.After(upgraded), must.Sprintf("%s unpublished after the upgrade", id))
			must.Eq(t, a.NodeID, c.Instance, must.Sprintf("%s unpublished by the node plugin of its node", id))
		}
	}
}

// pluginTaskDir is the task directory of the node plugin allocation on
// the node (the agent keeps the client's data under DATA_DIR/client).
func (e *clientEnv) pluginTaskDir(nodeID, allocID string) string {
	for _, cl := range e.clients {
		if e.nodeIDs[cl.Name()] == nodeID {
			return filepath.Join(cl.DataDir(), "client", "allocs", allocID, "plugin")
		}
	}
	return ""
}

// nodePluginAllocs waits until every node runs an allocation of the node
// plugin job's version and returns them by node.
func (e *clientEnv) nodePluginAllocs(t *testing.T, s Server, version uint64) map[string]*structs.Allocation {
	t.Helper()
	var out map[string]*structs.Allocation
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var err error
		out, err = e.liveNodePluginAllocs(s, version)
		return err == nil, err
	})
	return out
}

// liveNodePluginAllocs returns, by node, the node plugin job's running
// allocations of the version; an error unless every node has one and no
// allocation of another version is live.
func (e *clientEnv) liveNodePluginAllocs(s Server, version uint64) (map[string]*structs.Allocation, error) {
	var allocs []*structs.Allocation
	if err := e.get(s.HTTPAddr()+"/v1/job/"+nodePluginJob+"/allocations", &allocs); err != nil {
		return nil, err
	}
	out := map[string]*structs.Allocation{}
	var errs []string
	for _, a := range allocs {
		switch {
		case a.JobVersion == version && !a.Terminal() && a.ClientStatus == structs.AllocClientStatusRunning:
			out[a.NodeID] = a
		case a.JobVersion != version && !a.ClientTerminal():
			errs = append(errs, fmt.Sprintf("allocation %s of version %d on %s is %s/%s", a.ID, a.JobVersion, a.NodeID, a.DesiredStatus, a.ClientStatus))
		}
	}
	for _, node := range e.nodeIDs {
		if out[node] == nil {
			errs = append(errs, fmt.Sprintf("node %s runs no allocation of version %d", node, version))
		}
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "; "))
	}
	return out, nil
}

// rollingWatch polls the plugin and the node plugin job while an update
// rolls.
type rollingWatch struct {
	done chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	seen rollingSeen
}

// rollingSeen is what the polls saw.
type rollingSeen struct {
	polls int
	// bothDown describes the polls that found no node with a healthy node
	// instance.
	bothDown []string
	// waiting: the job's placement said the update was waiting.
	waiting bool
	// maxReplacing is the most allocations of the new version seen live
	// but not running at once.
	maxReplacing int
}

func (e *clientEnv) watchRollingUpdate(s Server) *rollingWatch {
	w := &rollingWatch{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			w.poll(e, s)
		}
	}()
	return w
}

func (w *rollingWatch) poll(e *clientEnv, s Server) {
	p, err := e.plugin(s)
	if err != nil {
		return
	}
	healthy := 0
	for _, node := range e.nodeIDs {
		if info := p.Nodes[node]; info != nil && info.Healthy {
			healthy++
		}
	}
	var job structs.Job
	jobErr := e.get(s.HTTPAddr()+"/v1/job/"+nodePluginJob, &job)
	var allocs []*structs.Allocation
	allocErr := e.get(s.HTTPAddr()+"/v1/job/"+nodePluginJob+"/allocations", &allocs)

	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen.polls++
	if healthy == 0 {
		w.seen.bothDown = append(w.seen.bothDown, fmt.Sprintf("at %s: %+v", time.Now().Format(time.RFC3339Nano), p.Nodes))
	}
	if jobErr == nil && job.Placement["nodes"] != nil && len(job.Placement["nodes"].Waiting) > 0 {
		w.seen.waiting = true
	}
	if allocErr == nil {
		replacing := 0
		for _, a := range allocs {
			if a.JobVersion > 0 && !a.Terminal() && a.ClientStatus != structs.AllocClientStatusRunning {
				replacing++
			}
		}
		w.seen.maxReplacing = max(w.seen.maxReplacing, replacing)
	}
}

// stop ends the polls and returns what they saw.
func (w *rollingWatch) stop(t *testing.T) rollingSeen {
	t.Helper()
	close(w.done)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}
