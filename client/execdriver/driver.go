package execdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// shimReadyFD is the descriptor of the pipe the shim closes once ready
// (the fourth of ProcAttr.Files); shimReadyTimeout bounds the wait for it.
const (
	shimReadyFD      = 3
	shimReadyTimeout = 10 * time.Second
)

// TaskPaths are the files of one task.
type TaskPaths struct {
	Dir      string
	Stdout   string
	Stderr   string
	Spec     string
	PIDFile  string
	ExitFile string
	ShimLog  string
}

func NewTaskPaths(allocDir, task string) TaskPaths {
	name := state.Segment(task)
	control := filepath.Join(allocDir, ".control")
	return TaskPaths{
		Dir:      filepath.Join(allocDir, name),
		Stdout:   filepath.Join(allocDir, "logs", name+".stdout"),
		Stderr:   filepath.Join(allocDir, "logs", name+".stderr"),
		Spec:     filepath.Join(control, name+".spec.json"),
		PIDFile:  filepath.Join(control, name+".pid.json"),
		ExitFile: filepath.Join(control, name+".exit.json"),
		ShimLog:  filepath.Join(control, name+".shim.log"),
	}
}

// Start starts a task's shim in a process group of its own and returns
// its identity. A command that cannot be found fails here, before any
// process is started. shimExe is the agent's executable.
func Start(shimExe string, task *structs.Task, paths TaskPaths, env []string) (state.ProcessID, error) {
	if task.Driver != "exec" {
		return state.ProcessID{}, fmt.Errorf("driver %q is not supported (only exec is)", task.Driver)
	}
	if task.Config.Command == "" {
		return state.ProcessID{}, errors.New("exec: no command")
	}
	// The task's PATH is the agent's (taskEnv keeps it), so LookPath in
	// the agent finds what the shim would.
	command, err := exec.LookPath(task.Config.Command)
	if err != nil {
		return state.ProcessID{}, err
	}
	if shimExe == "" {
		return state.ProcessID{}, errors.New("the client agent does not know its own executable, which supervises tasks")
	}
	for _, dir := range []string{paths.Dir, filepath.Dir(paths.Stdout), filepath.Dir(paths.Spec)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return state.ProcessID{}, err
		}
	}
	// Left by an earlier start, they would be taken for this one's.
	for _, f := range []string{paths.PIDFile, paths.ExitFile} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return state.ProcessID{}, err
		}
	}
	spec, err := json.Marshal(&shimSpec{
		ReadyFD: shimReadyFD,
		Command: command, Args: task.Config.Args, Env: env, Dir: paths.Dir,
		Stdout: paths.Stdout, Stderr: paths.Stderr, PIDFile: paths.PIDFile, ExitFile: paths.ExitFile,
	})
	if err != nil {
		return state.ProcessID{}, err
	}
	if err := state.WriteFileAtomic(paths.Spec, spec); err != nil {
		return state.ProcessID{}, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return state.ProcessID{}, err
	}
	defer devNull.Close()
	shimLog, err := os.OpenFile(paths.ShimLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return state.ProcessID{}, err
	}
	defer shimLog.Close()
	// The shim closes its end of this pipe once it handles the signals
	// a stop sends and recorded its PID: until then a SIGTERM would kill
	// it without a record of the task's end, and a restarted agent could
	// not find it by its PID file.
	ready, readyW, err := os.Pipe()
	if err != nil {
		return state.ProcessID{}, err
	}
	defer ready.Close()
	shimEnv := append(os.Environ(), taskShimEnv+"="+paths.Spec)
	proc, err := os.StartProcess(shimExe, []string{shimExe}, &os.ProcAttr{
		Dir:   paths.Dir,
		Env:   shimEnv,
		Files: []*os.File{devNull, shimLog, shimLog, readyW},
		// Its own group, so that a stop signals the shim and everything
		// the task started, and nothing else; and so that a signal sent
		// to the agent's group (a terminal's Ctrl-C) does not reach it.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	readyW.Close()
	if err != nil {
		return state.ProcessID{}, fmt.Errorf("starting its supervisor: %w", err)
	}
	// The pipe's end of file: the shim is ready, or ended. A shim that
	// hangs on the way (its files on a stalled disk) is not waited for
	// longer than shimReadyTimeout.
	_ = ready.SetReadDeadline(time.Now().Add(shimReadyTimeout))
	if _, err := io.Copy(io.Discard, ready); err != nil {
		// Said in the task's supervisor log: the task is tracked by its
		// PID from here on as any other.
		fmt.Fprintf(shimLog, "%s agent: the supervisor did not report ready within %s (%v); going on without it\n",
			time.Now().UTC().Format(time.RFC3339), shimReadyTimeout, err)
	}
	pid := proc.Pid
	// The shim is reaped with wait4 by PID (see Ended); the handle is
	// not needed.
	_ = proc.Release()
	id, err := identifyProcess(pid)
	if err != nil {
		// It is gone already (or /proc cannot say): wait4 or the exit file
		// tells how it ended.
		return state.ProcessID{PID: pid, BootID: bootID()}, nil
	}
	// The shim writes the same as it starts, which takes a moment; written
	// here too, an agent stopped right after this start finds the task.
	if buf, err := json.Marshal(id); err == nil {
		_ = state.WriteFileAtomic(paths.PIDFile, buf)
	}
	return id, nil
}

// Ended reports whether the task whose shim p identifies has ended: its
// shim is gone, and so is every process of the task's process group (what
// the task left running in the background, or the task itself when its
// shim was killed). While the shim is gone and some remain, they are
// killed with SIGKILL and the task has not ended yet: a task is never
// reported ended while a process it started runs. The shim is reaped if
// it is a child of this process (an agent restarted in the same process,
// as tests do, finds its earlier shims among its children); otherwise
// init reaped it, and it is never seen as a zombie.
//
// The group's ID is the shim's PID, which the kernel does not reuse while
// the shim (even as a zombie) or any member of the group lives: a
// process with that PID which is not the shim means that the group
// emptied, and the group found by that ID is the task's.
func Ended(p state.ProcessID) bool {
	if p.PID <= 0 {
		return true
	}
	if p.StartTicks != 0 && Alive(p) {
		return false
	}
	if p.StartTicks == 0 && PIDExists(p.PID) && !IsZombie(p.PID) {
		// Never identified (it was already gone, or /proc could not
		// say): a live process with its PID is taken to be it.
		return false
	}
	if p.BootID != "" && p.BootID != bootID() {
		// Started before the machine rebooted: nothing of it runs.
		return true
	}
	ticks, exists := startTicksOf(p.PID)
	if exists && p.StartTicks != 0 && ticks != p.StartTicks {
		// Its PID is another process's.
		return true
	}
	if killGroupLeft(p.PID) {
		return false
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(p.PID, &ws, syscall.WNOHANG, nil)
	return true
}

func PIDExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Signal sends sig to the task's process group. The group is the
// shim's PID, which cannot be reused while any member of the group lives;
// a group that is gone is not an error.
func Signal(p state.ProcessID, sig syscall.Signal) error {
	if p.PID <= 0 {
		return nil
	}
	err := syscall.Kill(-p.PID, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// ReadExit reads the exit file a task's shim wrote, if it did.
func ReadExit(paths TaskPaths) (*state.TaskExit, error) {
	buf, err := os.ReadFile(paths.ExitFile)
	if err != nil {
		return nil, err
	}
	var e state.TaskExit
	if err := json.Unmarshal(buf, &e); err != nil {
		return nil, fmt.Errorf("exit file %s: %w", paths.ExitFile, err)
	}
	return &e, nil
}

// FindShim returns the identity of the live shim of an interrupted start
// of the task: one started from its spec file whose PID file the agent
// stopped before writing (and the shim itself did not write yet).
func FindShim(paths TaskPaths) (state.ProcessID, bool) {
	if _, err := os.Stat(paths.Spec); err != nil {
		// Written before any shim of the task starts.
		return state.ProcessID{}, false
	}
	pid, ok := findShim(paths.Spec)
	if !ok {
		return state.ProcessID{}, false
	}
	p, err := identifyProcess(pid)
	if err != nil {
		return state.ProcessID{}, false
	}
	return p, true
}

// ReadPIDFile reads the identity a task's shim recorded as it started.
func ReadPIDFile(paths TaskPaths) (state.ProcessID, bool) {
	buf, err := os.ReadFile(paths.PIDFile)
	if err != nil {
		return state.ProcessID{}, false
	}
	var p state.ProcessID
	if json.Unmarshal(buf, &p) != nil || p.PID <= 0 {
		return state.ProcessID{}, false
	}
	return p, true
}
