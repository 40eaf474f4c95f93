package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// lifecycleGCThreshold is the servers' node_gc_threshold in
// TestE2E_StorageLifecycle: long enough for the test to see a down node
// before it goes, on a loaded machine.
const lifecycleGCThreshold = 8 * time.Second

// TestE2E_StorageLifecycle runs, on 3 servers and 2 client agents with
// their development plugin processes, the storage admin's work through
// the CLI: a task writes into a volume, the volume is snapshotted, a
// volume created from the snapshot is read by another task, which sees
// the same bytes; snapshots are listed and deleted; the providers' volumes
// are listed with the registered ones named; a volume in use is expanded,
// on its controller and its node; a client killed with SIGKILL has its node
// collected once node_gc_threshold has passed, and the plugin's counts are
// back to the live node.
func TestE2E_StorageLifecycle(t *testing.T) {
	t.Parallel()
	cfg := fmt.Sprintf("server {\n  heartbeat_ttl     = %q\n  node_grace_period = %q\n  node_gc_threshold = %q\n}\n",
		clientHeartbeatTTL, clientNodeGrace, lifecycleGCThreshold)
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: cfg})
	e, s := newClientEnv(t, c)

	// A task writes into "src".
	res := e.cli(t, s, "volume create", e.writeSpec(t, "src", `capacity_min = "1MiB"`))
	must.Zero(t, res.Code, must.Sprint(res))
	srcExt := e.volume(t, s, "src").ExternalID
	const data = "written-before-the-snapshot"
	e.runJob(t, s, "writer", "src", fmt.Sprintf(`echo %s > "$VOLPLANE_VOLUME_DATA/hello" && sleep 3600`, data))
	hello := filepath.Join(devplugin.VolumeDataDir(e.stateDir, srcExt), "hello")
	waitFileContent(t, hello, data+"\n")

	// Snapshotted, with the CLI.
	res = e.cli(t, s, "volume snapshot create", "-secret", "token="+e.secret+"-snap", "src", "nightly")
	must.Zero(t, res.Code, must.Sprint(res))
	rows := tableRows(res.Stdout)
	must.SliceLen(t, 1, rows, must.Sprint(res))
	snapID := rows[0][0]
	must.Eq(t, []string{snapID, "src", srcExt}, rows[0][:3], must.Sprint(res))
	e.checkServedByAClient(t, "CreateSnapshot", srcExt, codes.OK)
	e.stopJob(t, s, "writer")
	// The source changes after the snapshot.
	must.NoError(t, os.WriteFile(hello, []byte("changed\n"), 0o644))

	// A volume from the snapshot, read by another task, which copies what
	// it reads next to it.
	res = e.cli(t, s, "volume create", e.writeSpec(t, "restored", fmt.Sprintf("snapshot_id = %q", snapID)))
	must.Zero(t, res.Code, must.Sprint(res))
	restoredExt := e.volume(t, s, "restored").ExternalID
	must.NotEq(t, srcExt, restoredExt)
	e.runJob(t, s, "reader", "restored", `cp "$VOLPLANE_VOLUME_DATA/hello" "$VOLPLANE_VOLUME_DATA/read-back" && sleep 3600`)
	waitFileContent(t, filepath.Join(devplugin.VolumeDataDir(e.stateDir, restoredExt), "read-back"), data+"\n")

	res = e.cli(t, s, "volume snapshot list", "-plugin", pluginID)
	must.Zero(t, res.Code, must.Sprint(res))
	row := rowOf(tableRows(res.Stdout), snapID)
	must.SliceNotEmpty(t, row, must.Sprint(res))
	must.Eq(t, "src", row[1], must.Sprint("the snapshot names its registered volume"))

	// The providers' volumes, with the registered ones named.
	res = e.cli(t, s, "volume status", "-type", "csi", "-plugin_id", pluginID, "-verbose")
	must.Zero(t, res.Code, must.Sprint(res))
	external := res.Stdout[strings.Index(res.Stdout, "External Volumes of plugin "+pluginID):]
	for id, ext := range map[string]string{"src": srcExt, "restored": restoredExt} {
		must.StrContains(t, external, ext, must.Sprint(res))
		must.StrContains(t, external, structs.DefaultNamespace+"/"+id, must.Sprint(res))
	}

	// "restored" is in use by the reader: it is expanded online, on its
	// controller and then on the node the reader runs on.
	res = e.cli(t, s, "volume register", e.writeSpec(t, "restored",
		fmt.Sprintf("external_id = %q\ncapacity_min = \"2GiB\"", restoredExt)))
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stderr, "expanded online", must.Sprint(res))
	must.Eq(t, int64(2<<30), e.volume(t, s, "restored").Capacity)
	e.checkServedByAClient(t, "ControllerExpandVolume", restoredExt, codes.OK)
	e.checkServedByAClient(t, "NodeExpandVolume", restoredExt, codes.OK)
	res = e.cli(t, s, "volume status", "restored")
	must.Zero(t, res.Code, must.Sprint(res))
	must.True(t, slices.ContainsFunc(strings.Split(res.Stdout, "\n"), func(l string) bool {
		return slices.Equal(strings.Fields(l), []string{"Capacity", "=", "2", "GiB"})
	}), must.Sprint(res))

	res = e.cli(t, s, "volume snapshot delete", pluginID, snapID)
	must.Zero(t, res.Code, must.Sprint(res))
	e.checkServedByAClient(t, "DeleteSnapshot", "", codes.OK)
	e.stopJob(t, s, "reader")

	e.testNodeGC(t, s)
	// The snapshot's secret, and the volumes', are in no log and in none
	// of the storage system's files.
	e.checkSecrets(t)
}

// testNodeGC kills the second client with SIGKILL: its node is marked
// down, says when it will be collected, and is removed after the
// threshold with its plugin instances.
func (e *clientEnv) testNodeGC(t *testing.T, s Server) {
	victim := e.clients[1]
	id := e.nodeIDs[victim.Name()]
	e.c.Kill(t, victim)
	var down structs.Node
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		if err := e.get(s.HTTPAddr()+"/v1/node/"+id, &down); err != nil {
			return false, err
		}
		return down.Status == structs.NodeStatusDown, fmt.Errorf("node %s is %s", victim.Name(), down.Status)
	})
	must.Eq(t, time.Unix(0, down.StatusUpdatedAt).Add(lifecycleGCThreshold).UTC(), down.GCAfter.UTC())
	res := e.cli(t, s, "node status")
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, "GC After", must.Sprint(res))

	testutil.WaitForResult(t, lifecycleGCThreshold+leaderTimeout, func() (bool, error) {
		r, err := doHTTP(http.MethodGet, s.HTTPAddr()+"/v1/node/"+id, nil)
		if err != nil {
			return false, err
		}
		return r.Status == http.StatusNotFound, fmt.Errorf("GET node: %d", r.Status)
	})
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		p, err := e.plugin(s)
		if err != nil {
			return false, err
		}
		counts := []int{p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected}
		return fmt.Sprint(counts) == "[1 1 1 1]", fmt.Errorf("plugin counts %v", counts)
	})
	res = e.cli(t, s, "system gc")
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, "Removed 0 nodes", must.Sprint(res))
}

// runJob runs a service job of one allocation that uses volume source
// (single-node-writer) and runs script, and waits until it runs.
func (e *clientEnv) runJob(t *testing.T, s Server, id, source, script string) {
	t.Helper()
	path := writeFile(t, e.specDir, id+".job.hcl", fmt.Sprintf(`job %q {
  type = "service"

  group "app" {
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", %q]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
`, id, source, script))
	res := e.cli(t, s, "job run", "-detach", path)
	must.Zero(t, res.Code, must.Sprint(res))
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var allocs []*structs.Allocation
		if err := e.get(s.HTTPAddr()+"/v1/job/"+id+"/allocations", &allocs); err != nil {
			return false, err
		}
		for _, a := range allocs {
			if a.ClientStatus == structs.AllocClientStatusRunning {
				return true, nil
			}
		}
		return false, fmt.Errorf("job %s has no running allocation: %d allocations", id, len(allocs))
	})
}

// stopJob stops a job and waits until its volume's claims are released.
func (e *clientEnv) stopJob(t *testing.T, s Server, id string) {
	t.Helper()
	var job structs.Job
	must.NoError(t, e.get(s.HTTPAddr()+"/v1/job/"+id, &job))
	res := e.cli(t, s, "job stop", id)
	must.Zero(t, res.Code, must.Sprint(res))
	for _, req := range job.TaskGroups[0].Volumes {
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			var vol structs.CSIVolume
			if err := e.get(s.HTTPAddr()+"/v1/volume/csi/"+req.Source, &vol); err != nil {
				return false, err
			}
			return !vol.InUse(), fmt.Errorf("volume %s is still claimed", req.Source)
		})
	}
}

// waitFileContent waits until the file holds want.
func waitFileContent(t *testing.T, path, want string) {
	t.Helper()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == want, fmt.Errorf("%s: %q, %v", path, b, err)
	})
}
