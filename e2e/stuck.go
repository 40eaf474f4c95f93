package e2e

import (
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
	t.Logf("e2e: %s's goroutines of volplane and Raft after SIGQUIT (%d; the whole dump is in %s):\n%s",
		s.name, len(blocks), s.logPath, strings.Join(blocks, "\n\n"))
}

// stuckGoroutines returns the goroutine blocks of a Go runtime dump whose
// stacks pass through volplane or hashicorp/raft.
func stuckGoroutines(dump string) []string {
	var out []string
	for _, block := range strings.Split(dump, "\n\n") {
		block = strings.TrimSpace(block)
		if !strings.HasPrefix(block, "goroutine ") {
			continue
		}
		if strings.Contains(block, "volplane/volplane/") || strings.Contains(block, "hashicorp/raft") {
			out = append(out, block)
		}
	}
	return out
}
