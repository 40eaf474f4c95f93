package e2e

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stuckDumpWait is how long a process that did not exit gets to write its
// goroutine dump after SIGQUIT.
const stuckDumpWait = 5 * time.Second

// dumpStuck makes a process that did not exit after a signal print its
// goroutines (the Go runtime does so on SIGQUIT, to the log, and exits),
// and logs those of volplane and Raft, so that a hang seen once in CI says
// where it waits.
func (c *ProcessCluster) dumpStuck(t testing.TB, s *process, done <-chan struct{}) {
	t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	if err := cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Logf("e2e: sending SIGQUIT to %s: %v", s.name, err)
		return
	}
	select {
	case <-done:
	case <-time.After(stuckDumpWait):
		t.Logf("e2e: %s did not write its goroutines within %s of SIGQUIT", s.name, stuckDumpWait)
		return
	}
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		t.Logf("e2e: reading the log of %s: %v", s.name, err)
		return
	}
	log := string(data)
	if i := strings.LastIndex(log, startMarker); i >= 0 {
		log = log[i:]
	}
	blocks := stuckGoroutines(log)
	t.Logf("e2e: %s's goroutines of volplane and Raft after SIGQUIT (%d stacks; the whole dump is in %s):\n%s",
		s.name, len(blocks), s.logPath, strings.Join(blocks, "\n\n"))
}

// stuckGoroutines returns the goroutines of a Go runtime dump whose
// stacks pass through volplane or hashicorp/raft, compacted: each as its
// state and its functions outside the runtime (no files, no arguments),
// goroutines with the same stack counted once.
func stuckGoroutines(dump string) []string {
	count := map[string]int{}
	var order []string
	for _, block := range strings.Split(dump, "\n\n") {
		block = strings.TrimSpace(block)
		if !strings.HasPrefix(block, "goroutine ") {
			continue
		}
		if !strings.Contains(block, "volplane/volplane/") && !strings.Contains(block, "hashicorp/raft") {
			continue
		}
		lines := strings.Split(block, "\n")
		// "goroutine 7 gp=... m=nil [chan receive, 2 minutes]:"
		state := lines[0]
		if i := strings.Index(state, "["); i >= 0 {
			state = strings.TrimSuffix(state[i:], ":")
		}
		// "[select, 2 minutes]": the wait's length would split stacks.
		if i := strings.Index(state, ","); i >= 0 {
			state = state[:i] + "]"
		}
		stack := []string{state}
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") || strings.HasPrefix(l, "created by runtime") {
				continue
			}
			if strings.HasPrefix(l, "created by") {
				// "created by f in goroutine 7": the creator's number
				// would split stacks.
				if i := strings.Index(l, " in goroutine "); i > 0 {
					l = l[:i]
				}
			} else if i := strings.LastIndex(l, "("); i > 0 {
				l = l[:i]
			}
			stack = append(stack, "  "+l)
		}
		key := strings.Join(stack, "\n")
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	out := make([]string, len(order))
	for i, key := range order {
		out[i] = fmt.Sprintf("%d x %s", count[key], key)
	}
	return out
}
