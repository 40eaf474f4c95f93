//go:build linux

package execdriver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// startShell starts script under a shim, as the client does, with the
// test binary as the shim (its init runs the shim).
func startShell(t *testing.T, allocDir, script string) (state.ProcessID, TaskPaths) {
	t.Helper()
	exe, err := os.Executable()
	must.NoError(t, err)
	task := &structs.Task{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}}}
	paths := NewTaskPaths(allocDir, task.Name)
	p, err := Start(exe, task, paths, []string{"PATH=" + os.Getenv("PATH")})
	must.NoError(t, err)
	// Whatever fails, nothing of the task outlives the test.
	t.Cleanup(func() {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(p.PID, &ws, 0, nil)
	})
	return p, paths
}

// readPID waits until the task wrote a PID to the file name in its
// directory, and returns it.
func readPID(t *testing.T, paths TaskPaths, name string) int {
	t.Helper()
	var pid int
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(paths.Dir, name))
		if err != nil {
			return false, err
		}
		if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return false, fmt.Errorf("%s: %q: %w", name, b, err)
		}
		return pid > 0, errors.New("no PID")
	})
	return pid
}

func running(pid int) bool { return PIDExists(pid) && !IsZombie(pid) }

// reapShim waits for the shim to end and reaps it, as init does for a shim
// whose agent is gone: a restarted agent never sees it as a zombie.
func reapShim(t *testing.T, p state.ProcessID) {
	t.Helper()
	var ws syscall.WaitStatus
	_, err := syscall.Wait4(p.PID, &ws, 0, nil)
	must.NoError(t, err)
	must.False(t, Alive(p))
}

// A shim killed while its task runs, and reaped by someone else (init,
// once the agent that started it is gone): the task's processes still run
// in its process group. The task has not ended until they are gone; Ended
// kills them.
func TestEnded_ShimGoneTaskRunning(t *testing.T) {
	t.Parallel()
	p, paths := startShell(t, t.TempDir(), `sleep 1000 & echo $! >bg.pid; echo $$ >main.pid; wait`)
	bg, main := readPID(t, paths, "bg.pid"), readPID(t, paths, "main.pid")
	must.False(t, Ended(p))

	must.NoError(t, syscall.Kill(p.PID, syscall.SIGKILL))
	reapShim(t, p)
	must.True(t, running(main) && running(bg))
	must.False(t, Ended(p), must.Sprint("the task's processes still run: it has not ended"))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return Ended(p), errors.New("not ended")
	})
	must.False(t, running(main), must.Sprint("the task's main process was killed"))
	must.False(t, running(bg), must.Sprint("what the task started was killed"))
}

// A task whose main process ended, leaving what it started in the
// background; its shim recorded the exit and ended, and was reaped by
// someone else. What it left runs in its group and is killed before the
// task counts as ended.
func TestEnded_TaskExitedLeavingProcesses(t *testing.T) {
	t.Parallel()
	p, paths := startShell(t, t.TempDir(), `sleep 1000 & echo $! >bg.pid`)
	bg := readPID(t, paths, "bg.pid")
	reapShim(t, p)
	exit, err := ReadExit(paths)
	must.NoError(t, err)
	must.Eq(t, 0, exit.ExitCode)
	must.True(t, running(bg))

	must.False(t, Ended(p), must.Sprint("a process the task started still runs"))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return Ended(p), errors.New("not ended")
	})
	must.False(t, running(bg))
}

// The shim a process identity names is gone and its PID is another
// process's, here the leader of a group of its own: the task's group was
// empty before the PID could be reused, so the task ended, and that other
// group is left alone.
func TestEnded_PIDReused(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	self, err := identifyProcess(cmd.Process.Pid)
	must.NoError(t, err)
	other := self
	other.StartTicks--
	must.False(t, Alive(other))
	must.True(t, Ended(other))
	must.True(t, Alive(self), must.Sprint("the process with the reused PID was left alone"))
}

// A stop right after Start returned (an agent restarted at once, or an
// allocation stopped as it started) finds the shim handling SIGTERM: it
// survives it and records the task's end (the task got the signal, or
// started after it and gets the next), never killed before it could
// record anything.
func TestStart_ShimReadyForStop(t *testing.T) {
	t.Parallel()
	p, paths := startShell(t, t.TempDir(), `touch started; exec sleep 1000`)
	must.NoError(t, Signal(p, syscall.SIGTERM))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		if Ended(p) {
			return true, nil
		}
		_, err := os.Stat(filepath.Join(paths.Dir, "started"))
		return err == nil, err
	})
	must.NoError(t, Signal(p, syscall.SIGTERM))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return Ended(p), errors.New("not ended")
	})
	exit, err := ReadExit(paths)
	must.NoError(t, err, must.Sprint("the shim recorded the task's end"))
	must.Eq(t, "SIGTERM", exit.Signal)
}
