// Package clienttest holds the fixtures the tests of the client agent's
// packages share.
package clienttest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volplane/volplane/client/execdriver"
	"github.com/volplane/volplane/testutil"
)

// KillTasksUnder kills every process whose working directory is under dir
// (the tasks and shims of a client whose data dir it is), with its process
// group, and waits until they are gone: a client leaves its tasks running
// when it shuts down, as it should, and the test must not.
func KillTasksUnder(t testing.TB, dir string) {
	t.Helper()
	find := func() []int { return ProcessesUnder(dir) }
	killed := find()
	for _, pid := range killed {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		// Reap those that were children of this process.
		for _, pid := range killed {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		if left := find(); len(left) > 0 {
			return false, fmt.Errorf("processes under %s survived SIGKILL: %v", dir, left)
		}
		return true, nil
	})
}

// ProcessesUnder returns the live processes (zombies aside) whose working
// directory is under dir: the tasks and shims of a client whose data dir
// it is.
func ProcessesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) && !execdriver.IsZombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
