package client

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/client/allocrunner"
	"github.com/volplane/volplane/client/state"
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
	srv, e, c := newOneClientEnv(t, nil)
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
	// controller, and the client forgets the volume; it keeps the
	// finished allocation, with its logs.
	finishTask(t, c, a.ID)
	done := waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusComplete))
	must.Eq(t, "all tasks completed", done.ClientDescription)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		st, _ := c.AllocState(a.ID)
		methods := methodsFor(t, e.stateDir, ext)
		return len(st.Volumes) == 0 && slices.Contains(methods, "ControllerUnpublishVolume"),
			fmt.Errorf("the client knows volumes %v; calls: %v", st.Volumes, methods)
	})
	must.Eq(t, []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"},
		slices.DeleteFunc(methodsFor(t, e.stateDir, ext), func(m string) bool { return m == "ValidateVolumeCapabilities" })[4:])
	_, ok = c.Usage().Get(a.ID, "solo")
	must.False(t, ok)
	local, ok := c.AllocState(a.ID)
	must.True(t, ok)
	must.Eq(t, structs.AllocClientStatusComplete, local.ClientStatus)
	must.Eq(t, allocrunner.TaskState{PID: local.Tasks["t"].PID, State: state.TaskDead, Description: "task t: exit code 0"}, local.Tasks["t"])
	_, err = os.Stat(filepath.Join(c.allocDir(a.ID), "logs", "t.stdout"))
	must.NoError(t, err, must.Sprint("a finished allocation keeps its logs"))
}

// A task whose command does not exist fails its allocation, with the
// reason; nothing is started.
func TestAllocRunner_MissingCommandFails(t *testing.T) {
	t.Parallel()
	srv, e, _ := newOneClientEnv(t, nil)
	e.createVolume(srv, "nocmd")

	job := writerJob("nocmd", 1, "nocmd", false, "")
	job.TaskGroups[0].Tasks[0].Config = structs.TaskConfig{Command: "/no/such/command", Args: []string{"x"}}
	registerJob(t, srv, job)
	// The servers replace a failed allocation of a service job: wait for
	// the first one to fail, then stop the job.
	var failed *structs.Allocation
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		allocs, err := srv.State().AllocsByJob(nil, structs.DefaultNamespace, "nocmd")
		if err != nil {
			return false, err
		}
		for _, a := range allocs {
			if a.ClientStatus == structs.AllocClientStatusFailed {
				failed = a
				return true, nil
			}
		}
		return false, fmt.Errorf("no failed allocation among %d", len(allocs))
	})
	must.NoError(t, srv.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "nocmd"}, &structs.JobDeregisterResponse{}))
	must.Eq(t, `task t: exec: "/no/such/command": stat /no/such/command: no such file or directory`, failed.ClientDescription)
	must.Eq(t, structs.AllocVolumeStepPublished, failed.VolumeStates["data"].Step,
		must.Sprint("the volume was published before the task was tried"))
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

// While an allocation runs, the servers cannot release its volume from the
// node: NodeDetachVolume answers with a retryable error. An allocation
// that replaces it (a new job version) waits for its claim, and shows why
// (naming the allocation that holds the volume), how many attempts failed
// and when it tries again; once the earlier claim is released, it runs.
func TestAllocRunner_ClaimWaitsForEarlierClaim(t *testing.T) {
	t.Parallel()
	srv, e, c := newOneClientEnv(t, nil)
	ext := e.createVolume(srv, "shared")

	registerJob(t, srv, writerJob("w", 1, "shared", false, taskScript))
	first := waitAllocs(t, srv, "w", 1, clientStatus(structs.AllocClientStatusRunning))["w.g[0]"]

	detach := &structs.ClientCSINodeDetachVolumeRequest{
		PluginID: "dev", VolumeID: "shared", ExternalID: ext, AllocID: first.ID,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}
	detach.NodeID = c.NodeID()
	err := srv.RPC("ClientCSI.NodeDetachVolume", detach, &structs.ClientCSIEmptyResponse{})
	must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err), must.Sprintf("error: %v", err))
	must.StrContains(t, err.Error(), fmt.Sprintf("allocation %q still has running tasks", first.ID))
	must.Eq(t, 0, countCalls(t, e.stateDir, "NodeUnpublishVolume", ext)[ext], must.Sprint("nothing was unpublished"))

	// Hold the first allocation's claim: its release cannot unpublish.
	must.NoError(t, devplugin.SetFault(e.stateDir, "NodeUnpublishVolume", devplugin.Fault{Code: codes.Unavailable, Message: "held by the test"}))
	update := writerJob("w", 1, "shared", false, taskScript+" # v2")
	registerJob(t, srv, update)
	waitAlloc(t, srv, first.ID, clientStatus(structs.AllocClientStatusComplete))
	waiting := waitAllocs(t, srv, "w", 1, func(a *structs.Allocation) error {
		st := a.VolumeStates["data"]
		switch {
		case a.ID == first.ID:
			return fmt.Errorf("the first allocation")
		case st == nil:
			return fmt.Errorf("no volume state yet")
		case st.Step != structs.AllocVolumeStepClaiming || st.Attempts < 2 || st.NextRetry == 0:
			return fmt.Errorf("volume state %+v", *st)
		case !strings.Contains(st.Waiting, first.ID):
			return fmt.Errorf("waiting %q does not name %s", st.Waiting, first.ID)
		}
		return nil
	})["w.g[0]"]
	must.Eq(t, structs.AllocClientStatusPending, waiting.ClientStatus)
	st := waiting.VolumeStates["data"]
	must.StrContains(t, st.Waiting, "max claims")
	must.Greater(t, st.UpdatedAt, st.NextRetry)
	local, _ := c.AllocState(waiting.ID)
	must.Eq(t, structs.AllocVolumeStepClaiming, local.Volumes["data"].Step)
	must.MapEmpty(t, local.Tasks, must.Sprint("no task starts before its volumes are published"))

	// The earlier claim is released: the replacement claims and runs.
	must.NoError(t, devplugin.ClearFaults(e.stateDir))
	running := waitAlloc(t, srv, waiting.ID, clientStatus(structs.AllocClientStatusRunning))
	must.Eq(t, structs.AllocVolumeState{VolumeID: "shared", Step: structs.AllocVolumeStepPublished,
		UpdatedAt: running.VolumeStates["data"].UpdatedAt}, *running.VolumeStates["data"])
	must.Eq(t, "w.g[0]", readHello(t, e.stateDir, ext))
}

// In a group of several tasks, one that fails stops the others (SIGTERM,
// then SIGKILL after the kill timeout for one that ignores SIGTERM) and
// fails the allocation with its reason; the others count as stopped, not
// failed.
func TestAllocRunner_FailedTaskStopsTheOthers(t *testing.T) {
	t.Parallel()
	srv, _, c := newOneClientEnv(t, func(cfg *Config) { cfg.TaskKillTimeout = 500 * time.Millisecond })

	job := &structs.Job{
		ID: "pair", Namespace: structs.DefaultNamespace, Type: structs.JobTypeBatch,
		TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Tasks: []*structs.Task{
			{Name: "long", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/sh",
				Args: []string{"-c", `echo started; while [ ! -e "$VOLPLANE_ALLOC_DIR/go" ]; do sleep 0.05; done; exec sleep 3600`}}},
			{Name: "short", Driver: "exec", Config: structs.TaskConfig{Command: "sh",
				Args: []string{"-c", `while [ ! -e "$VOLPLANE_ALLOC_DIR/go" ]; do sleep 0.05; done; echo oops >&2; exit 3`}}},
			{Name: "stubborn", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/sh",
				Args: []string{"-c", `trap "" TERM; while true; do sleep 0.05; done`}}},
		}}},
	}
	registerJob(t, srv, job)
	a := waitAllocs(t, srv, "pair", 1, clientStatus(structs.AllocClientStatusRunning))["pair.g[0]"]
	must.NoError(t, os.WriteFile(filepath.Join(c.allocDir(a.ID), "go"), nil, 0o600))
	failed := waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusFailed))
	must.NoError(t, srv.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "pair"}, &structs.JobDeregisterResponse{}))
	must.Eq(t, "task short: exit code 3", failed.ClientDescription)
	st, _ := c.AllocState(a.ID)
	must.Eq(t, allocrunner.TaskState{PID: st.Tasks["long"].PID, State: state.TaskDead, Description: "task long: stopped (SIGTERM)"}, st.Tasks["long"])
	must.True(t, st.Tasks["short"].Failed)
	must.Eq(t, allocrunner.TaskState{PID: st.Tasks["stubborn"].PID, State: state.TaskDead, Description: "task stubborn: killed"}, st.Tasks["stubborn"])
	out, err := os.ReadFile(filepath.Join(c.allocDir(a.ID), "logs", "short.stderr"))
	must.NoError(t, err)
	must.Eq(t, "oops\n", string(out))
	out, err = os.ReadFile(filepath.Join(c.allocDir(a.ID), "logs", "long.stdout"))
	must.NoError(t, err)
	must.Eq(t, "started\n", string(out))
}
