package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// The directories of an allocation, under the data dir:
//
//	<data dir>/allocs/<alloc>/                      VOLPLANE_ALLOC_DIR
//	<data dir>/allocs/<alloc>/<task>/               the task's working dir, VOLPLANE_TASK_DIR
//	<data dir>/allocs/<alloc>/logs/<task>.stdout    the task's output
//	<data dir>/allocs/<alloc>/logs/<task>.stderr
//	<data dir>/allocs/<alloc>/.control/<task>.*     the shim's spec, PID file, exit file and log
//
// (The CSI target paths are elsewhere: see state.CSIPaths.)
const allocsDir = "allocs"

// allocDir is the directory of an allocation's tasks.
func (c *Client) allocDir(allocID string) string {
	return filepath.Join(c.config.DataDir, allocsDir, state.Segment(allocID))
}

// taskPaths are the files of one task.
type taskPaths struct {
	Dir      string
	Stdout   string
	Stderr   string
	Spec     string
	PIDFile  string
	ExitFile string
	ShimLog  string
}

func newTaskPaths(allocDir, task string) taskPaths {
	name := state.Segment(task)
	control := filepath.Join(allocDir, ".control")
	return taskPaths{
		Dir:      filepath.Join(allocDir, name),
		Stdout:   filepath.Join(allocDir, "logs", name+".stdout"),
		Stderr:   filepath.Join(allocDir, "logs", name+".stderr"),
		Spec:     filepath.Join(control, name+".spec.json"),
		PIDFile:  filepath.Join(control, name+".pid.json"),
		ExitFile: filepath.Join(control, name+".exit.json"),
		ShimLog:  filepath.Join(control, name+".shim.log"),
	}
}

// VolumeEnvVar is the environment variable that gives a task the path of
// its group's volume alias: VOLPLANE_VOLUME_ and the alias upper-cased,
// with every character other than a letter or a digit replaced by "_".
func VolumeEnvVar(alias string) string {
	var b strings.Builder
	b.WriteString("VOLPLANE_VOLUME_")
	for _, r := range strings.ToUpper(alias) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// taskEnv is a task's environment: the agent's own, without its VOLPLANE_
// settings, plus the allocation's and task's identity and directories and,
// for every volume of the group, its published path. There is no
// isolation: every task of the group can reach every volume of the group.
func taskEnv(rec *allocRecord, task string, paths taskPaths, allocDir string, targets map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VOLPLANE_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"VOLPLANE_ALLOC_ID="+rec.ID,
		"VOLPLANE_ALLOC_NAME="+rec.Name,
		"VOLPLANE_JOB_ID="+rec.JobID,
		"VOLPLANE_GROUP_NAME="+rec.TaskGroup,
		"VOLPLANE_TASK_NAME="+task,
		"VOLPLANE_ALLOC_DIR="+allocDir,
		"VOLPLANE_TASK_DIR="+paths.Dir,
	)
	for alias, target := range targets {
		env = append(env, VolumeEnvVar(alias)+"="+target)
	}
	return env
}

// startTask starts a task's shim in a process group of its own and returns
// its identity. A command that cannot be found fails here, before any
// process is started. shimExe is the agent's executable.
func startTask(shimExe string, task *structs.Task, paths taskPaths, env []string) (processID, error) {
	if task.Driver != "exec" {
		return processID{}, fmt.Errorf("driver %q is not supported (only exec is)", task.Driver)
	}
	if task.Config.Command == "" {
		return processID{}, errors.New("exec: no command")
	}
	// The task's PATH is the agent's (taskEnv keeps it), so LookPath in
	// the agent finds what the shim would.
	command, err := exec.LookPath(task.Config.Command)
	if err != nil {
		return processID{}, err
	}
	if shimExe == "" {
		return processID{}, errors.New("the client agent does not know its own executable, which supervises tasks")
	}
	for _, dir := range []string{paths.Dir, filepath.Dir(paths.Stdout), filepath.Dir(paths.Spec)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return processID{}, err
		}
	}
	// Left by an earlier start, they would be taken for this one's.
	for _, f := range []string{paths.PIDFile, paths.ExitFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return processID{}, err
		}
	}
	spec, err := json.Marshal(&shimSpec{
		Command: command, Args: task.Config.Args, Env: env, Dir: paths.Dir,
		Stdout: paths.Stdout, Stderr: paths.Stderr, PIDFile: paths.PIDFile, ExitFile: paths.ExitFile,
	})
	if err != nil {
		return processID{}, err
	}
	if err := state.WriteFileAtomic(paths.Spec, spec); err != nil {
		return processID{}, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return processID{}, err
	}
	defer devNull.Close()
	shimLog, err := os.OpenFile(paths.ShimLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return processID{}, err
	}
	defer shimLog.Close()
	shimEnv := append(os.Environ(), taskShimEnv+"="+paths.Spec)
	proc, err := os.StartProcess(shimExe, []string{shimExe}, &os.ProcAttr{
		Dir:   paths.Dir,
		Env:   shimEnv,
		Files: []*os.File{devNull, shimLog, shimLog},
		// Its own group, so that a stop signals the shim and everything
		// the task started, and nothing else; and so that a signal sent
		// to the agent's group (a terminal's Ctrl-C) does not reach it.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return processID{}, fmt.Errorf("starting its supervisor: %w", err)
	}
	pid := proc.Pid
	// The shim is reaped with wait4 by PID (see taskEnded); the handle is
	// not needed.
	_ = proc.Release()
	id, err := identifyProcess(pid)
	if err != nil {
		// It is gone already (or /proc cannot say): wait4 or the exit file
		// tells how it ended.
		return processID{PID: pid, BootID: bootID()}, nil
	}
	// The shim writes the same as it starts, which takes a moment; written
	// here too, an agent stopped right after this start finds the task.
	if buf, err := json.Marshal(id); err == nil {
		_ = state.WriteFileAtomic(paths.PIDFile, buf)
	}
	return id, nil
}

// taskEnded reports whether the shim p identifies has ended. When it has,
// it kills whatever the task left running in its process group and reaps
// the shim if it is a child of this process (an agent restarted in the
// same process, as tests do, finds its earlier shims among its children).
// The group is killed only while the shim is a zombie: its PID is then
// still taken, so the group cannot be anyone else's.
func taskEnded(p processID) bool {
	if p.PID <= 0 {
		return true
	}
	if p.StartTicks != 0 && p.alive() {
		return false
	}
	if p.StartTicks == 0 && pidExists(p.PID) && !isZombie(p.PID) {
		// Never identified (it was already gone, or /proc could not
		// say): a live process with its PID is taken to be it.
		return false
	}
	if isZombie(p.PID) {
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil)
	return true
}

func pidExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// signalTask sends sig to the task's process group. The group is the
// shim's PID, which cannot be reused while any member of the group lives;
// a group that is gone is not an error.
func signalTask(p processID, sig syscall.Signal) error {
	if p.PID <= 0 {
		return nil
	}
	err := syscall.Kill(-p.PID, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// readExit reads the exit file a task's shim wrote, if it did.
func readExit(paths taskPaths) (*taskExit, error) {
	buf, err := os.ReadFile(paths.ExitFile)
	if err != nil {
		return nil, err
	}
	var e taskExit
	if err := json.Unmarshal(buf, &e); err != nil {
		return nil, fmt.Errorf("exit file %s: %w", paths.ExitFile, err)
	}
	return &e, nil
}

// readPIDFile reads the identity a task's shim recorded as it started.
func readPIDFile(paths taskPaths) (processID, bool) {
	buf, err := os.ReadFile(paths.PIDFile)
	if err != nil {
		return processID{}, false
	}
	var p processID
	if json.Unmarshal(buf, &p) != nil || p.PID <= 0 {
		return processID{}, false
	}
	return p, true
}

// judgeExit decides whether a task's end is a failure, and describes it.
// exit is nil when the shim recorded nothing (it was killed too). A task
// the client was stopping did not fail, whatever its end.
func judgeExit(t *taskRecord, exit *taskExit) {
	t.State, t.Exit = taskDead, exit
	switch {
	case t.FailReason != "":
		t.Failed, t.Description = true, fmt.Sprintf("task %s: %s", t.Name, t.FailReason)
	case exit != nil && exit.StartError != "":
		t.Failed, t.Description = true, fmt.Sprintf("task %s: %s", t.Name, exit.StartError)
	case t.Stopping && exit == nil:
		t.Description = fmt.Sprintf("task %s: killed", t.Name)
	case t.Stopping && exit.Signal != "":
		t.Description = fmt.Sprintf("task %s: stopped (%s)", t.Name, exit.Signal)
	case t.Stopping:
		t.Description = fmt.Sprintf("task %s: stopped (exit code %d)", t.Name, exit.ExitCode)
	case exit == nil:
		t.Failed, t.Description = true, fmt.Sprintf("task %s: ended without an exit status (its supervisor was killed)", t.Name)
	case exit.Signal != "":
		t.Failed, t.Description = true, fmt.Sprintf("task %s: killed by %s", t.Name, exit.Signal)
	case exit.ExitCode != 0:
		t.Failed, t.Description = true, fmt.Sprintf("task %s: exit code %d", t.Name, exit.ExitCode)
	default:
		t.Description = fmt.Sprintf("task %s: exit code 0", t.Name)
	}
}
