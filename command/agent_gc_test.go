package command

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/gctune"
	"github.com/volplane/volplane/testutil"
)

func TestGCHeapBudget(t *testing.T) {
	for v, want := range map[string]uint64{"": 0, "2GiB": 2 << 30, "512MB": 512_000_000, "1 GiB": 1 << 30} {
		got, off, err := gcHeapBudget(v)
		must.NoError(t, err)
		must.Eq(t, want, got, must.Sprintf("%q", v))
		must.False(t, off, must.Sprintf("%q", v))
	}
	_, off, err := gcHeapBudget("0")
	must.NoError(t, err)
	must.True(t, off)
}

// TestAgentCommand_GCTuning: a server agent tunes the collector while it
// runs (a development agent's heap is far below a quarter of any machine's
// memory, so GOGC is the tuner's most) and puts GOGC back when it stops;
// with server.gc_heap_budget = "0" it leaves GOGC alone.
func TestAgentCommand_GCTuning(t *testing.T) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		t.Skip("GOGC is set in the environment: the agent leaves the collector to it")
	}
	before := gctune.GCPercent()
	run := func(t *testing.T, args []string, want int) {
		ui := cli.NewMockUi()
		stop := make(chan struct{})
		c := &AgentCommand{UI: ui, ShutdownCh: stop}
		done := make(chan int, 1)
		go func() { done <- c.Run(args) }()
		testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
			return ui.OutputWriter.String() != "", nil
		})
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			return gctune.GCPercent() == want, nil
		})
		close(stop)
		must.Eq(t, 0, <-done, must.Sprint(ui.ErrorWriter.String()))
		must.Eq(t, before, gctune.GCPercent(), must.Sprint("GOGC after the agent stopped"))
	}
	t.Run("tuned", func(t *testing.T) {
		run(t, []string{"-dev", "-http-port", "0", "-rpc-port", "0", "-log-level", "error"}, gctune.DefaultMaxPercent)
	})
	t.Run("off", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "agent.hcl")
		must.NoError(t, os.WriteFile(file, []byte("server {\n  gc_heap_budget = \"0\"\n}\n"), 0o600))
		run(t, []string{"-dev", "-config", file, "-http-port", "0", "-rpc-port", "0", "-log-level", "error"}, before)
	})
}
