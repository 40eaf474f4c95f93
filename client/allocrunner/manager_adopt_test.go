package allocrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/clienttest"
	"github.com/volplane/volplane/client/execdriver"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// These tests stop a first Manager (an agent) at a point of a task's
// start, make the on-disk state what a crash there, or the death of the
// task's shim meanwhile, leaves, and check that the Manager started again
// on it never reports the allocation terminal while a process of the task
// runs.

// bgJob's task appends to starts each time it starts, leaves a process
// in the background, and runs until done exists.
var bgJob = shellJob(`echo x >>"$VOLPLANE_ALLOC_DIR/starts"; sleep 1000 & touch "$VOLPLANE_ALLOC_DIR/started"; ` +
	`while [ ! -e "$VOLPLANE_ALLOC_DIR/done" ]; do sleep 0.05; done`)

// runThenStop runs bgJob's allocation a1 on a first Manager until its
// task runs, stops that Manager as a shutdown does, and returns the
// task's shim PID.
func runThenStop(t *testing.T, dir string) int {
	t.Helper()
	first := startManager(t, dir, bgJob, allocOf(bgJob, "a1"))
	waitReported(t, first, "a1", structs.AllocClientStatusRunning)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		_, err := os.Stat(filepath.Join(AllocDir(dir, "a1"), "started"))
		return err == nil, err
	})
	st, _ := first.AllocState("a1")
	shim := st.Tasks["t"].PID
	must.Positive(t, shim)
	first.stop()
	return shim
}

// killShim kills a task's shim and reaps it, as init does once the agent
// that started it is gone: the task's own processes keep running.
func killShim(t *testing.T, pid int) {
	t.Helper()
	must.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(pid, &ws, 0, nil)
	must.NoError(t, err)
}

// waitTerminalNoneLeft waits until the allocation is reported terminal,
// then checks that nothing of its task runs any more.
func waitTerminalNoneLeft(t *testing.T, tm *testManager, dir, status string) {
	t.Helper()
	waitReported(t, tm, "a1", status)
	if left := clienttest.ProcessesUnder(dir); len(left) > 0 {
		for _, pid := range left {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Logf("left running: %s", stat)
		}
		t.Fatalf("reported %s while processes of its task still run: %v", status, left)
	}
	starts, err := os.ReadFile(filepath.Join(AllocDir(dir, "a1"), "starts"))
	must.NoError(t, err)
	must.Eq(t, 1, strings.Count(string(starts), "x"), must.Sprint("the task was started once"))
}

// The agent restarted; meanwhile the task's shim was killed (and reaped by
// init), its processes still run. The task is recorded running.
func TestManager_RestartShimGoneTaskRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	killShim(t, runThenStop(t, dir))
	must.SliceNotEmpty(t, clienttest.ProcessesUnder(dir))

	again := startManager(t, dir, bgJob, allocOf(bgJob, "a1"))
	waitTerminalNoneLeft(t, again, dir, structs.AllocClientStatusFailed)
	st, _ := again.AllocState("a1")
	must.Eq(t, "task t: ended without an exit status (its supervisor was killed)", st.Tasks["t"].Description)
}

// The agent stopped after the shim started but before it recorded the
// task running (its record says pending, the PID file names the shim);
// meanwhile the shim was killed and its processes still run. They are
// taken over, killed and awaited, not started a second time.
func TestManager_RestartUnrecordedStartShimGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	shim := runThenStop(t, dir)
	setTaskPending(t, dir)
	killShim(t, shim)

	again := startManager(t, dir, bgJob, allocOf(bgJob, "a1"))
	waitTerminalNoneLeft(t, again, dir, structs.AllocClientStatusFailed)
}

// The agent stopped after the shim started but before it recorded the
// task running, and the shim still runs: the task is taken over.
func TestManager_RestartUnrecordedStartAdopts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	shim := runThenStop(t, dir)
	setTaskPending(t, dir)

	again := startManager(t, dir, bgJob, allocOf(bgJob, "a1"))
	waitReported(t, again, "a1", structs.AllocClientStatusRunning)
	st, _ := again.AllocState("a1")
	must.Eq(t, shim, st.Tasks["t"].PID, must.Sprint("the running task was taken over, not started again"))
	again.StopAll("test ends")
	waitTerminalNoneLeft(t, again, dir, structs.AllocClientStatusComplete)
	st, _ = again.AllocState("a1")
	must.Eq(t, "task t: stopped (SIGTERM)", st.Tasks["t"].Description)
}

// The agent stopped after starting the shim but before writing its PID
// file, and the shim had not written it yet either: the task is found by
// its shim's environment and taken over, not started a second time.
func TestManager_RestartStartWithoutPIDFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	shim := runThenStop(t, dir)
	setTaskPending(t, dir)
	must.NoError(t, os.Remove(execdriver.NewTaskPaths(AllocDir(dir, "a1"), "t").PIDFile))

	again := startManager(t, dir, bgJob, allocOf(bgJob, "a1"))
	waitReported(t, again, "a1", structs.AllocClientStatusRunning)
	st, _ := again.AllocState("a1")
	must.Eq(t, shim, st.Tasks["t"].PID, must.Sprint("the running task was taken over, not started again"))
	again.StopAll("test ends")
	waitTerminalNoneLeft(t, again, dir, structs.AllocClientStatusComplete)
}

// setTaskPending rewrites the state file as an agent stopped between the
// start of a1's task and its record leaves it: the task pending, with no
// process.
func setTaskPending(t *testing.T, dir string) {
	t.Helper()
	db, restored, err := state.OpenDB(dir, hclog.NewNullLogger())
	must.NoError(t, err)
	defer db.Close()
	b := restored["a1"]
	must.NotNil(t, b)
	task := b.Tasks["t"]
	if task == nil || task.State != state.TaskRunning {
		t.Fatal(fmt.Errorf("task record %+v: want a running task", task))
	}
	a := b.Alloc
	a.ClientStatus, a.ClientDescription = structs.AllocClientStatusPending, ""
	must.NoError(t, db.Put(a, nil, []*state.TaskRecord{{Name: "t", State: state.TaskPending}}, "a1"))
}

// The allocation query loop answered, and its allocation's runner was
// started, before Start went over the runners restored from the state
// file: the new runner must not be taken for a restored one and run a
// second time (its task would be started twice, one of its shims
// unsupervised, both writing the same PID and exit files).
func TestManager_StartRunsEachRunnerOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	// Once it started its second goroutine, the query loop, Start waits
	// until the servers were queried twice: the answer to the first was
	// reconciled, the runner of its allocation started.
	timeout := time.After(20 * time.Second)
	tm := startManagerHooked(t, dir, func(tm *testManager, n int64) {
		for n == 2 {
			tm.servers.mu.Lock()
			q := tm.servers.queries
			tm.servers.mu.Unlock()
			if q >= 2 {
				return
			}
			select {
			case <-tm.servers.queried:
			case <-timeout:
				t.Error("the servers were not queried twice")
				return
			}
		}
	}, bgJob, allocOf(bgJob, "a1"))
	waitReported(t, tm, "a1", structs.AllocClientStatusRunning)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		_, err := os.Stat(filepath.Join(AllocDir(dir, "a1"), "started"))
		return err == nil, err
	})
	// The reporter, the query loop and the allocation's runner.
	must.Eq(t, 3, tm.goCalls.Load(), must.Sprint("goroutines started by the Manager"))
	tm.StopAll("test ends")
	waitTerminalNoneLeft(t, tm, dir, structs.AllocClientStatusComplete)
}
