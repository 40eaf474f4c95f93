package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// dieWithParent has the kernel kill a server process when the benchmark
// dies, so that a killed benchmark leaves no servers behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until the kernel shows the process stopped (state T
// in /proc/PID/stat): a stop signal takes effect asynchronously, and a
// write the process still committed would be counted as the new leader's.
func waitStopped(pid int, timeout time.Duration) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("process %d not stopped %s after SIGSTOP", pid, timeout)
}
