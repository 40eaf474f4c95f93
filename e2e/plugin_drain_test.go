package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// consumerJob is a service job of one allocation that writes to the
// single-node-writer volume "data" and keeps running.
const consumerJob = `job "consumer" {
  type = "service"

  group "app" {
    volume "data" {
      type            = "csi"
      source          = "data"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }

    task "writer" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"$VOLPLANE_ALLOC_ID\" >> $VOLPLANE_VOLUME_DATA/writers && sleep 3600"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
`

// TestE2E_PluginJobsDrain drains, through the CLI, the node of a running
// consumer of a volume, with the plugin running as the example plugin jobs
// (3 servers, 2 clients without static plugins). The consumer moves to the
// other node and claims the volume there; on the drained node the volume
// was node-unpublished and unstaged by that node's node plugin, and
// controller-unpublished from it, before the node plugin's task was
// stopped; the drain completes with the node ineligible, its plugin
// allocations stopped, nothing staged or published on it, and the plugin
// healthy on the other node alone.
func TestE2E_PluginJobsDrain(t *testing.T) {
	t.Parallel()
	e, s := startPluginJobs(t)

	res := e.cli(t, s, "volume create", e.writeSpec(t, "data", `capacity_min = "1MiB"`))
	must.Zero(t, res.Code, must.Sprint(res))
	ext := e.volume(t, s, "data").ExternalID
	res = e.cli(t, s, "job run", "-detach", writeFile(t, e.specDir, "consumer.hcl", consumerJob))
	must.Zero(t, res.Code, must.Sprint(res))
	first := e.waitConsumer(t, s, "")
	e.waitWriter(t, ext, first.ID)

	// Node A is where the consumer runs; B is the other.
	var nameA, nameB string
	for name, id := range e.nodeIDs {
		if id == first.NodeID {
			nameA = name
		} else {
			nameB = name
		}
	}
	must.NotEq(t, "", nameA, must.Sprintf("the consumer runs on %s, not a node of the test", first.NodeID))
	nodeA, nodeB := e.nodeIDs[nameA], e.nodeIDs[nameB]
	p, err := e.plugin(s)
	must.NoError(t, err)
	must.NotNil(t, p.Nodes[nodeA].NodeInfo)
	storageA := p.Nodes[nodeA].NodeInfo.ID
	pluginA := e.pluginAlloc(t, s, "plugin-dev-nodes", nodeA)
	pluginB := e.pluginAlloc(t, s, "plugin-dev-nodes", nodeB)

	// What node A's node plugin did for the consumer.
	published := e.instanceCalls(t, "NodePublishVolume", ext, storageA)
	must.Len(t, 1, published, must.Sprint("the consumer's volume is published once on node A"))
	staged := e.instanceCalls(t, "NodeStageVolume", ext, storageA)
	must.SliceNotEmpty(t, staged, must.Sprint("the development plugin stages: NodeStageVolume on node A"))
	for _, path := range []string{published[0].TargetPath, staged[0].StagingPath} {
		_, err := os.Lstat(path)
		must.NoError(t, err, must.Sprintf("%s exists while the consumer runs", path))
	}

	// The drain, followed by the CLI until it is done.
	drainAt := time.Now()
	// By name, as operators do; but a name such as "c2" can also be the
	// start of another node's random ID, and the CLI refuses a name that
	// is ambiguous so (command/lookup.go): the ID then.
	target := nameA
	for _, id := range e.nodeIDs {
		if id != nodeA && strings.HasPrefix(id, nameA) {
			target = nodeA
		}
	}
	res = e.cli(t, s, "node drain", "-enable", "-yes", target)
	t.Logf("node drain took %v:\n%s", time.Since(drainAt).Round(time.Millisecond), res.Stdout)
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, fmt.Sprintf("Drain complete for node %q", nodeA), must.Sprint(res))

	// The consumer moved to node B and holds the volume there.
	moved := e.waitConsumer(t, s, first.ID)
	must.Eq(t, nodeB, moved.NodeID, must.Sprint("the consumer is placed again on the other node"))
	e.waitWriter(t, ext, moved.ID)
	vol := e.volume(t, s, "data")
	must.MapLen(t, 1, vol.WriteClaims, must.Sprintf("claims: %+v", vol.WriteClaims))
	claim := vol.WriteClaims[moved.ID]
	must.NotNil(t, claim, must.Sprintf("the moved consumer holds the claim: %+v", vol.WriteClaims))
	must.Eq(t, nodeB, claim.NodeID)
	must.MapEmpty(t, vol.ReadClaims)
	must.MapEmpty(t, vol.PastClaims, must.Sprint("the old allocation's claim is freed"))

	// On node A, the release came before the node plugin's stop. (A
	// release retried after a lost answer may repeat a call: every one
	// must come before the stop.)
	unpublished := e.instanceCalls(t, "NodeUnpublishVolume", ext, storageA)
	must.SliceNotEmpty(t, unpublished, must.Sprint("NodeUnpublishVolume on node A"))
	for _, c := range unpublished {
		must.Eq(t, published[0].TargetPath, c.TargetPath)
	}
	unstaged := e.instanceCalls(t, "NodeUnstageVolume", ext, storageA)
	must.SliceNotEmpty(t, unstaged, must.Sprint("NodeUnstageVolume on node A"))
	for _, c := range unstaged {
		must.Eq(t, staged[0].StagingPath, c.StagingPath)
	}
	var ctrlUnpublished []devplugin.Call
	for _, c := range e.callsOf(t, "ControllerUnpublishVolume", ext, codes.OK) {
		if c.NodeID == storageA {
			ctrlUnpublished = append(ctrlUnpublished, c)
		}
	}
	must.SliceNotEmpty(t, ctrlUnpublished, must.Sprint("ControllerUnpublishVolume from node A"))
	must.True(t, unstaged[0].Time.After(unpublished[0].Time), must.Sprint("unstaged after unpublished"))
	must.True(t, ctrlUnpublished[0].Time.After(unstaged[0].Time), must.Sprint("controller unpublish after the node's release"))

	stoppedA := e.waitAllocStopped(t, s, pluginA.ID)
	task := stoppedA.TaskStates["plugin"]
	must.NotNil(t, task, must.Sprintf("task states of %s: %v", pluginA.ID, stoppedA.TaskStates))
	var killing time.Time
	for _, ev := range task.Events {
		if ev.Type == structs.TaskKilling && time.Unix(0, ev.Time).After(drainAt) {
			killing = time.Unix(0, ev.Time)
			break
		}
	}
	must.False(t, killing.IsZero(), must.Sprintf("no Killing event of node A's node plugin since the drain: %s", taskEvents(task)))
	finished := time.Unix(0, task.FinishedAt)
	must.True(t, !finished.Before(killing), must.Sprintf("finished %v before killed %v", finished, killing))
	release := append(append(append([]devplugin.Call{}, unpublished...), unstaged...), ctrlUnpublished...)
	for _, c := range release {
		must.True(t, c.Time.Before(killing), must.Sprintf("%s at %v, after node A's node plugin was being stopped at %v",
			c.Method, c.Time.Format(time.RFC3339Nano), killing.Format(time.RFC3339Nano)))
	}
	t.Logf("on node A: NodeUnpublishVolume %v, NodeUnstageVolume %v, ControllerUnpublishVolume %v, node plugin killed %v",
		unpublished[0].Time.Format(time.StampMicro), unstaged[0].Time.Format(time.StampMicro),
		ctrlUnpublished[0].Time.Format(time.StampMicro), killing.Format(time.StampMicro))
	// Every allocation on node A ended: the consumer, the controller and
	// the node plugin.
	var onA []*structs.Allocation
	must.NoError(t, e.get(s.HTTPAddr()+"/v1/node/"+nodeA+"/allocations", &onA))
	jobs := map[string]bool{}
	for _, a := range onA {
		jobs[a.JobID] = true
		must.True(t, a.ServerTerminal() && a.ClientTerminal(),
			must.Sprintf("allocation %s of %s on node A is %s/%s", a.ID, a.JobID, a.DesiredStatus, a.ClientStatus))
	}
	must.Eq(t, map[string]bool{"consumer": true, "plugin-dev-nodes": true, "plugin-dev-controllers": true}, jobs)
	// Node B's node plugin kept running.
	must.Eq(t, pluginB.ID, e.pluginAlloc(t, s, "plugin-dev-nodes", nodeB).ID)

	// The drain is complete: node A ineligible, no strategy, LastDrain complete.
	var node structs.Node
	must.NoError(t, e.get(s.HTTPAddr()+"/v1/node/"+nodeA, &node))
	must.Nil(t, node.DrainStrategy)
	must.Eq(t, structs.NodeSchedulingIneligible, node.SchedulingEligibility)
	must.NotNil(t, node.LastDrain)
	must.Eq(t, structs.DrainStatusComplete, node.LastDrain.Status)
	res = e.cli(t, s, "node status", nodeA)
	must.Zero(t, res.Code, must.Sprint(res))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^Drain\s+= false$`), res.Stdout, must.Sprint(res))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^Eligibility\s+= ineligible$`), res.Stdout, must.Sprint(res))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^Last Drain\s+= complete `), res.Stdout, must.Sprint(res))

	// Nothing is left staged or published on node A, in the storage
	// system or in the client's CSI directories.
	st := devPluginState(t, e.stateDir)
	for what := range st.published() {
		must.False(t, strings.HasPrefix(what, storageA+" "), must.Sprintf("left on node A: %s", what))
	}
	for what := range st.controllerPublished() {
		must.False(t, strings.HasSuffix(what, " to "+storageA), must.Sprintf("left controller-published: %s", what))
	}
	for _, path := range []string{published[0].TargetPath, staged[0].StagingPath} {
		_, err := os.Lstat(path)
		must.True(t, errors.Is(err, os.ErrNotExist), must.Sprintf("%s is left on node A: %v", path, err))
	}

	var clientA Client
	for _, cl := range e.clients {
		if cl.Name() == nameA {
			clientA = cl
		}
	}
	// The agent keeps the client's data under DATA_DIR/client.
	csiDirA := filepath.Join(clientA.DataDir(), "client", "csi")
	must.NoError(t, filepath.WalkDir(csiDirA, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || strings.Contains(path, first.ID) {
			t.Errorf("left in node A's CSI directory: %s (%v)", path, d.Type())
		}
		return nil
	}))
	// The plugin is healthy on node B alone.
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		p, err := e.plugin(s)
		if err != nil {
			return false, err
		}
		if p.NodesHealthy != 1 || p.Nodes[nodeB] == nil || !p.Nodes[nodeB].Healthy || p.Nodes[nodeA] != nil {
			return false, fmt.Errorf("nodes healthy %d, expected %d: %+v", p.NodesHealthy, p.NodesExpected, p.Nodes)
		}
		return true, nil
	})
	res = e.cli(t, s, "plugin status", "-verbose", pluginID)
	must.Zero(t, res.Code, must.Sprint(res))
	must.RegexMatch(t, regexp.MustCompile(`(?m)^Nodes Healthy\s+= 1$`), res.Stdout, must.Sprint(res))
	_, nodeTable, found := strings.Cut(res.Stdout, "\nNodes\n")
	must.True(t, found, must.Sprint(res))
	rows := tableRows(nodeTable)
	must.SliceLen(t, 1, rows, must.Sprint(res))
	must.Eq(t, []string{nodeB, "true"}, rows[0][:2], must.Sprint(res))

	// Eligible again, node A gets a node plugin of the system job again,
	// and the plugin is healthy on both nodes; the consumer stays where
	// it is.
	res = e.cli(t, s, "node eligibility", "-enable", nodeA)
	must.Zero(t, res.Code, must.Sprint(res))
	again := e.pluginAlloc(t, s, "plugin-dev-nodes", nodeA)
	must.NotEq(t, pluginA.ID, again.ID)
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		p, err := e.plugin(s)
		if err != nil {
			return false, err
		}
		if p.NodesHealthy != 2 || p.Nodes[nodeA] == nil || !p.Nodes[nodeA].Healthy {
			return false, fmt.Errorf("nodes healthy %d, expected %d: %+v", p.NodesHealthy, p.NodesExpected, p.Nodes)
		}
		return true, nil
	})
	must.Eq(t, moved.ID, e.waitConsumer(t, s, first.ID).ID)
}

// waitConsumer waits until the consumer job has a live allocation other
// than old, running, and returns it.
func (e *clientEnv) waitConsumer(t *testing.T, s Server, old string) *structs.Allocation {
	t.Helper()
	var out *structs.Allocation
	testutil.WaitForResult(t, pluginRestartTimeout, func() (bool, error) {
		var allocs []*structs.Allocation
		if err := e.get(s.HTTPAddr()+"/v1/job/consumer/allocations", &allocs); err != nil {
			return false, err
		}
		var seen []string
		for _, a := range allocs {
			seen = append(seen, fmt.Sprintf("%s on %s: %s/%s (%s)", a.ID, a.NodeID, a.DesiredStatus, a.ClientStatus, a.ClientDescription))
			if a.ID != old && !a.ServerTerminal() && a.ClientStatus == structs.AllocClientStatusRunning {
				out = a
				return true, nil
			}
		}
		return false, fmt.Errorf("no running consumer allocation other than %q: %s", old, strings.Join(seen, "; "))
	})
	return out
}

// waitWriter waits until allocation allocID wrote its ID to the volume.
func (e *clientEnv) waitWriter(t *testing.T, ext, allocID string) {
	t.Helper()
	path := devplugin.VolumeDataDir(e.stateDir, ext) + "/writers"
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		b, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(b), allocID+"\n"), fmt.Errorf("%s: %q, %v", path, b, err)
	})
}

// waitAllocStopped waits until the servers stopped the allocation and its
// client reported it ended, and returns it.
func (e *clientEnv) waitAllocStopped(t *testing.T, s Server, allocID string) *structs.Allocation {
	t.Helper()
	var a structs.Allocation
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		if err := e.get(s.HTTPAddr()+"/v1/allocation/"+allocID, &a); err != nil {
			return false, err
		}
		return a.ServerTerminal() && a.ClientTerminal(), fmt.Errorf("allocation %s is %s/%s", allocID, a.DesiredStatus, a.ClientStatus)
	})
	return &a
}

// instanceCalls returns the successful calls of method on volumeID that
// the plugin instance with the storage node ID instance served.
func (e *clientEnv) instanceCalls(t *testing.T, method, volumeID, instance string) []devplugin.Call {
	t.Helper()
	var out []devplugin.Call
	for _, c := range e.callsOf(t, method, volumeID, codes.OK) {
		if c.Instance == instance {
			out = append(out, c)
		}
	}
	return out
}

// taskEvents describes a task's events, for a failure message.
func taskEvents(ts *structs.TaskState) string {
	var out []string
	for _, ev := range ts.Events {
		out = append(out, fmt.Sprintf("%s at %s", ev.Type, time.Unix(0, ev.Time).Format(time.RFC3339Nano)))
	}
	return strings.Join(out, ", ")
}
