package bench_test

import (
	"encoding/json"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/bench"
	"github.com/volplane/volplane/command"
)

// TestBenchSmoke runs `volplane bench` with every phase at tiny sizes, so CI
// proves the command works end to end: both clusters form, every phase
// produces figures, and everything is shut down and removed afterwards.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two 3-server clusters with production Raft timing")
	}
	dir := t.TempDir()
	// The command listens for interrupts; the goroutine that receives
	// signals, once started, lives as long as the process.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	signal.Stop(sig)
	before := runtime.NumGoroutine()

	ui := cli.NewMockUi()
	code := command.RunWithUi([]string{"bench", "-json",
		"-ops=40", "-serial-ops=20", "-writers=8", "-rounds=2",
		"-list-sizes=50,100", "-list-requests=5", "-batch=40",
		"-breakdown", "-dir=" + dir, "-log-level=warn"}, ui)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, ui.ErrorWriter.String())
	}

	var rep struct {
		EntryBytes int `json:"entry_bytes"`
		Results    []struct {
			Phase           string  `json:"phase"`
			Volumes         int     `json:"volumes"`
			Concurrency     int     `json:"concurrency"`
			Ops             int     `json:"ops"`
			OpsPerSec       float64 `json:"ops_per_sec"`
			P50             float64 `json:"p50_ms"`
			P99             float64 `json:"p99_ms"`
			ThroughputRatio float64 `json:"throughput_ratio"`
			P99Ratio        float64 `json:"p99_ratio"`
			Pass            *bool   `json:"pass"`
		} `json:"results"`
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &rep); err != nil {
		t.Fatalf("the output is not the JSON report: %v\n%s", err, ui.OutputWriter.String())
	}
	if rep.EntryBytes < 100 {
		t.Errorf("entry_bytes = %d, want the size of an encoded register request", rep.EntryBytes)
	}
	type level struct {
		phase         string
		conc, volumes int
		ops           int
	}
	want := []level{
		{"baseline", 1, 0, 20}, {"register", 1, 0, 20}, {"raft+fsm", 1, 0, 20},
		{"baseline", 8, 0, 40}, {"register", 8, 0, 40}, {"raft+fsm", 8, 0, 40},
		{"list", 1, 50, 5}, {"list", 1, 100, 5},
	}
	if len(rep.Results) != len(want) {
		t.Fatalf("got %d results, want %d:\n%s", len(rep.Results), len(want), ui.OutputWriter.String())
	}
	for i, w := range want {
		r := rep.Results[i]
		if got := (level{r.Phase, r.Concurrency, r.Volumes, r.Ops}); got != w {
			t.Errorf("result %d is %+v, want %+v", i, got, w)
		}
		if r.OpsPerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("result %d (%s): implausible figures: %v ops/s, p50 %vms, p99 %vms", i, r.Phase, r.OpsPerSec, r.P50, r.P99)
		}
		if (r.Phase == "register" || r.Phase == "raft+fsm") && (r.ThroughputRatio <= 0 || r.P99Ratio <= 0) {
			t.Errorf("result %d: %s without its comparison to the baseline: %+v", i, r.Phase, r)
		}
		if r.Phase == "register" && r.Pass == nil {
			t.Errorf("result %d: register without a verdict", i)
		}
		if r.Phase == "list" && r.Pass == nil {
			t.Errorf("result %d: list without a verdict", i)
		}
	}
	if !strings.Contains(ui.ErrorWriter.String(), "shutting the volplane cluster down") {
		t.Errorf("no progress on stderr:\n%s", ui.ErrorWriter.String())
	}

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("the data dirs were left behind: %v", entries)
	}

	// Everything the run started has been shut down and waited for; allow
	// a moment for goroutines that were told to exit to finish.
	checkGoroutines(t, before)
}

// checkGoroutines fails the test when more goroutines run than before the
// run, once those that were told to exit have had time to.
func checkGoroutines(t *testing.T, before int) {
	t.Helper()
	var leaked int
	deadline := time.Now().Add(10 * time.Second)
	for {
		leaked = runtime.NumGoroutine() - before
		if leaked <= 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if leaked > 0 {
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("%d goroutines before the run, %d more after:\n%s", before, leaked, b.String())
	}
}

func TestBenchTable(t *testing.T) {
	// A report renders as an aligned table; the figures are checked by
	// TestBenchSmoke, the layout here.
	rep := &bench.Report{}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "phase") {
		t.Errorf("table without its header:\n%s", b.String())
	}
}
