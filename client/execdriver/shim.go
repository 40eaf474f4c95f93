// Package execdriver runs a client's exec tasks: each under a small
// supervisor, the task shim (the agent's own executable started again),
// that outlives the agent and records how the task ended; it starts tasks,
// signals their process groups, tells whether they ended and reads their
// exit. What a task's end means for its allocation is the client's call.
package execdriver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// A task does not run as a child of the agent but of a small supervisor,
// the task shim: the agent's own executable started again with taskShimEnv
// naming a spec file. The shim starts the task's command in the process
// group it leads, waits for it, and writes how it ended to a file. It
// outlives the agent, so that a task keeps running while the agent is down
// or restarting, and a restarted agent, which cannot wait for a process it
// did not start, still learns the task's exit code from that file.
//
//	agent ──(start, own process group)──> shim ──(fork/exec)──> task command
//	shim writes <task>.pid.json at start and <task>.exit.json at the end
//
// The agent stops a task by signalling the whole group; the shim survives
// SIGTERM (it has a handler, which exec resets for the task) to record the
// task's end, and dies with it on SIGKILL.

// taskShimEnv, when set in a process's environment, makes the execdriver
// package's init run the task shim instead of the program.
const taskShimEnv = "VOLPLANE_TASK_SHIM"

func init() {
	if spec := os.Getenv(taskShimEnv); spec != "" {
		os.Exit(runTaskShim(spec))
	}
}

// shimSpec is what the agent asks the shim to run, written to a file next
// to the task's other control files.
type shimSpec struct {
	// ReadyFD, when not 0, is a descriptor the shim closes once it
	// handles the stop signals and wrote its PID file.
	ReadyFD int `json:",omitempty"`
	Command string
	Args    []string
	// Env is the task's whole environment.
	Env []string
	// Dir is the task's working directory.
	Dir string
	// Stdout and Stderr are files the task's output is appended to.
	Stdout string
	Stderr string
	// PIDFile receives the shim's ProcessID as it starts; ExitFile the
	// task's TaskExit once it ended.
	PIDFile  string
	ExitFile string
}

// identifyProcess returns the identity of the live process pid.
func identifyProcess(pid int) (state.ProcessID, error) {
	ticks, argv0, alive, err := procInfo(pid)
	if err != nil {
		return state.ProcessID{}, err
	}
	if !alive {
		return state.ProcessID{}, fmt.Errorf("process %d is not running", pid)
	}
	return state.ProcessID{PID: pid, StartTicks: ticks, Argv0: argv0, BootID: bootID()}, nil
}

// Alive reports whether the process p identifies still runs (a zombie
// does not).
func Alive(p state.ProcessID) bool {
	if p.PID <= 0 {
		return false
	}
	if p.BootID != "" && p.BootID != bootID() {
		return false
	}
	ticks, argv0, alive, err := procInfo(p.PID)
	if err != nil || !alive {
		return false
	}
	return ticks == p.StartTicks && (p.Argv0 == "" || argv0 == p.Argv0)
}

// runTaskShim is the shim's main: it returns the shim's exit status, which
// nobody reads; what matters is the exit file.
func runTaskShim(specPath string) int {
	os.Unsetenv(taskShimEnv)
	// Signals sent to the group reach the task too; the shim must outlive
	// it to record its end. A handler rather than SIG_IGN, which the task
	// would inherit.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for range sigs {
		}
	}()

	buf, err := os.ReadFile(specPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "volplane task shim: %v\n", err)
		return 2
	}
	var spec shimSpec
	if err := json.Unmarshal(buf, &spec); err != nil {
		fmt.Fprintf(os.Stderr, "volplane task shim: spec %s: %v\n", specPath, err)
		return 2
	}
	if self, err := identifyProcess(os.Getpid()); err == nil {
		if buf, err := json.Marshal(self); err == nil {
			if err := state.WriteFileAtomic(spec.PIDFile, buf); err != nil {
				fmt.Fprintf(os.Stderr, "volplane task shim: %v\n", err)
			}
		}
	}
	if spec.ReadyFD != 0 {
		// Closed here, it is not inherited by the task either.
		_ = syscall.Close(spec.ReadyFD)
	}
	exit := runShimCommand(&spec)
	exit.FinishedAt = structs.NowNano()
	buf, err = json.Marshal(exit)
	if err == nil {
		err = state.WriteFileAtomic(spec.ExitFile, buf)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "volplane task shim: recording the exit: %v\n", err)
		return 2
	}
	return 0
}

// runShimCommand runs the task's command to its end.
func runShimCommand(spec *shimSpec) state.TaskExit {
	stdout, err := os.OpenFile(spec.Stdout, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return state.TaskExit{ExitCode: -1, StartError: fmt.Sprintf("opening its stdout: %v", err)}
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(spec.Stderr, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return state.TaskExit{ExitCode: -1, StartError: fmt.Sprintf("opening its stderr: %v", err)}
	}
	defer stderr.Close()

	cmd := exec.Command(spec.Command, spec.Args...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return state.TaskExit{ExitCode: -1, StartError: err.Error()}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return state.TaskExit{}
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return state.TaskExit{ExitCode: -1, Signal: SignalName(ws.Signal())}
		}
		return state.TaskExit{ExitCode: ee.ExitCode()}
	default:
		return state.TaskExit{ExitCode: -1, StartError: err.Error()}
	}
}

// SignalName names a signal as the C headers do ("SIGTERM"), falling back
// to its description.
func SignalName(sig syscall.Signal) string {
	for name, s := range map[string]syscall.Signal{
		"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT,
		"SIGHUP": syscall.SIGHUP, "SIGQUIT": syscall.SIGQUIT, "SIGABRT": syscall.SIGABRT,
		"SIGSEGV": syscall.SIGSEGV, "SIGPIPE": syscall.SIGPIPE, "SIGUSR1": syscall.SIGUSR1,
		"SIGUSR2": syscall.SIGUSR2, "SIGBUS": syscall.SIGBUS, "SIGILL": syscall.SIGILL,
	} {
		if s == sig {
			return name
		}
	}
	return sig.String()
}
