package client

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// An allocation's volume is claimed (the servers have the controller
// publish it), staged and published through the development plugin's real
// socket; its task finds the published path in its environment and writes
// into the volume; the allocation is reported running, then complete when
// the task exits 0.
func TestAllocRunner_ClaimStagePublishRun(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	srv := servers[0]
	e := newAllocEnv(t, servers, 1)
	c := e.startClient(0, nil)
	e.waitNodesHealthy(srv, 1)
	ext := e.createVolume(srv, "solo")

	job := writerJob("solo", 1, "solo", false, taskScript)
	// A batch job: once complete, its allocation is not replaced.
	job.Type = structs.JobTypeBatch
	registerJob(t, srv, job)
	allocs := waitAllocs(t, srv, "solo", 1, clientStatus(structs.AllocClientStatusRunning))
	a := allocs["solo.g[0]"]
	must.NotNil(t, a)
	must.Eq(t, "solo.g[0]", readHello(t, e.stateDir, ext), must.Sprint("the task wrote into its published volume"))

	// The server has the progress of the volume.
	st := a.VolumeStates["data"]
	must.NotNil(t, st)
	must.Eq(t, structs.AllocVolumeState{VolumeID: "solo", Step: structs.AllocVolumeStepPublished, UpdatedAt: st.UpdatedAt}, *st)

	// ControllerPublish (by the server, through the client), then
	// NodeStage, then NodePublish, with the controller's publish context
	// passed through, at the paths of the client's layout.
	must.Eq(t, []string{"CreateVolume", "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"},
		slices.DeleteFunc(methodsFor(t, e.stateDir, ext), func(m string) bool { return m == "ValidateVolumeCapabilities" }))
	pub := callsFor(t, e.stateDir, "ControllerPublishVolume", ext)[0]
	must.MapNotEmpty(t, pub.PublishContext)
	stage := callsFor(t, e.stateDir, "NodeStageVolume", ext)[0]
	must.Eq(t, pub.PublishContext, stage.PublishContext)
	must.Eq(t, c.Paths().StagingPath("dev", "default", "solo", "rw-file-system-single-node-writer"), stage.StagingPath)
	publish := callsFor(t, e.stateDir, "NodePublishVolume", ext)[0]
	must.Eq(t, pub.PublishContext, publish.PublishContext)
	must.Eq(t, c.Paths().TargetPath(a.ID, "solo"), publish.TargetPath)
	must.Eq(t, stage.StagingPath, publish.StagingPath)

	// The usage registry knows the volume is published for the
	// allocation, so a release finds its paths.
	u, ok := c.Usage().Get(a.ID, "solo")
	must.True(t, ok)
	must.Eq(t, publish.TargetPath, u.TargetPath)
	must.Eq(t, ext, u.ExternalID)

	// The task's output goes to files in the allocation's directory.
	out, err := os.ReadFile(filepath.Join(c.allocDir(a.ID), "logs", "t.stdout"))
	must.NoError(t, err)
	must.Eq(t, "", string(out))

	// The task exits 0: complete. The servers then release the volume
	// from the node (the client no longer refuses) and from the
	// controller, and the client forgets the allocation.
	finishTask(t, c, a.ID)
	done := waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusComplete))
	must.Eq(t, "all tasks completed", done.ClientDescription)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		_, known := c.AllocState(a.ID)
		methods := methodsFor(t, e.stateDir, ext)
		return !known && slices.Contains(methods, "ControllerUnpublishVolume"),
			fmt.Errorf("client knows the allocation: %v; calls: %v", known, methods)
	})
	must.Eq(t, []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"},
		slices.DeleteFunc(methodsFor(t, e.stateDir, ext), func(m string) bool { return m == "ValidateVolumeCapabilities" })[4:])
	_, err = os.Stat(c.allocDir(a.ID))
	must.True(t, os.IsNotExist(err), must.Sprint("the allocation's directory is removed once it is forgotten"))
	_, ok = c.Usage().Get(a.ID, "solo")
	must.False(t, ok)
}

// A task whose command does not exist fails its allocation, with the
// reason; nothing is started.
func TestAllocRunner_MissingCommandFails(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	srv := servers[0]
	e := newAllocEnv(t, servers, 1)
	e.startClient(0, nil)
	e.waitNodesHealthy(srv, 1)
	e.createVolume(srv, "nocmd")

	job := writerJob("nocmd", 1, "nocmd", false, "")
	job.TaskGroups[0].Tasks[0].Config = structs.TaskConfig{Command: "/no/such/command", Args: []string{"x"}}
	registerJob(t, srv, job)
	allocs := waitAllocs(t, srv, "nocmd", 1, clientStatus(structs.AllocClientStatusFailed))
	a := allocs["nocmd.g[0]"]
	must.Eq(t, `task t: exec: "/no/such/command": stat /no/such/command: no such file or directory`, a.ClientDescription)
	// Stop the job so that the servers do not place replacements that
	// would wait for the failed allocation's claim.
	must.NoError(t, srv.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "nocmd"}, &structs.JobDeregisterResponse{}))
}

// The development plugin's state dir is shared: a helper to count calls of
// one method across the test's volumes.
func countCalls(t *testing.T, stateDir, method string, volumeIDs ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	calls, err := devplugin.ReadCallLog(stateDir)
	must.NoError(t, err)
	for _, c := range calls {
		if c.Method == method && slices.Contains(volumeIDs, c.VolumeID) && c.Code == 0 {
			out[c.VolumeID]++
		}
	}
	return out
}
