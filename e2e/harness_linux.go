package e2e

import (
	"os/exec"
	"syscall"
)

func init() {
	// The kernel kills the agent when the thread that started it exits.
	// Go's runtime does not end threads of goroutines that did not lock
	// one, so in practice this is when the test binary exits, including
	// when it is killed by -timeout, which runs no t.Cleanup.
	configureCmd = func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
}
