package bench_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/bench"
	"github.com/volplane/volplane/command"
)

// TestBenchSmoke runs `volplane bench` with every phase at tiny sizes, so CI
// proves the command works end to end: every cluster forms, every phase
// produces figures, and everything is shut down and removed afterwards.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two 3-server clusters with production Raft timing")
	}
	dir, profDir := t.TempDir(), t.TempDir()
	// The command listens for interrupts; the goroutine that receives
	// signals, once started, lives as long as the process.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	signal.Stop(sig)
	before := runtime.NumGoroutine()

	// The http phase runs server agents of a volplane binary.
	bin := filepath.Join(t.TempDir(), "volplane")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/volplane/volplane/cmd/volplane").CombinedOutput(); err != nil {
		t.Fatalf("building volplane: %v\n%s", err, out)
	}

	// Every phase but http-nomad, which needs a Nomad binary and has a
	// test of its own (TestHTTPNomadPhase).
	phases := strings.Join(slices.DeleteFunc(bench.AllPhases(), func(p string) bool { return p == bench.PhaseHTTPNomad }), ",")
	ui := cli.NewMockUi()
	code := command.RunWithUi([]string{"bench", "-json", "-binary=" + bin, "-http-register-ops=20", "-memory-volumes=200", "-failover-rounds=1",
		"-ops=40", "-serial-ops=20", "-writers=8", "-rounds=2",
		"-list-sizes=50,100", "-list-requests=5", "-batch=40",
		"-claim-ops=40", "-claim-serial-ops=20", "-refused-claims=30",
		"-release-volumes=20", "-scale-volumes=200", "-scale-stuck=5", "-scale-ops=40", "-scale-claim-ops=40",
		"-scale-rounds=2", "-acl-ops=40", "-acl-list-volumes=60", "-acl-list-requests=10", "-acl-rounds=2", "-phases=" + phases,
		"-breakdown", "-dir=" + dir, "-log-level=warn",
		"-memprofile=" + filepath.Join(profDir, "allocs.pprof")}, ui)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, ui.ErrorWriter.String())
	}
	// pprof profiles are gzipped protocol buffers.
	prof, err := os.ReadFile(filepath.Join(profDir, "allocs.pprof"))
	if err != nil || len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Fatalf("no allocation profile written (err %v, %d bytes)", err, len(prof))
	}

	var rep struct {
		EntryBytes      int   `json:"entry_bytes"`
		ClaimEntryBytes int   `json:"claim_entry_bytes"`
		ClaimAllocs     int   `json:"claim_allocs"`
		ReleaseJobs     int   `json:"release_jobs"`
		ReleasePerAgent []int `json:"release_per_agent"`
		Results         []struct {
			Phase           string  `json:"phase"`
			PairedWith      string  `json:"paired_with"`
			Cluster         string  `json:"cluster"`
			Volumes         int     `json:"volumes"`
			Concurrency     int     `json:"concurrency"`
			Ops             int     `json:"ops"`
			OpsPerSec       float64 `json:"ops_per_sec"`
			P50             float64 `json:"p50_ms"`
			P99             float64 `json:"p99_ms"`
			ThroughputRatio float64 `json:"throughput_ratio"`
			P99Ratio        float64 `json:"p99_ratio"`
			RaftBefore      uint64  `json:"raft_index_before"`
			RaftAdded       *uint64 `json:"raft_entries_added"`
			CPUCores        float64 `json:"cpu_cores"`
			CPUMsPerOp      float64 `json:"cpu_ms_per_op"`
			AllocKBPerOp    float64 `json:"alloc_kb_per_op"`
			GCCycles        *uint64 `json:"gc_cycles"`
			GoroutinesStart int     `json:"goroutines_before"`
			GoroutinesPeak  int     `json:"goroutines_peak"`
			FailedAttempts  *uint64 `json:"failed_attempts"`
			HeapMB          float64 `json:"heap_mb"`
			HeapPerVolume   int64   `json:"heap_bytes_per_volume"`
			Pass            *bool   `json:"pass"`
		} `json:"results"`
	}
	if err := json.Unmarshal(ui.OutputWriter.Bytes(), &rep); err != nil {
		t.Fatalf("the output is not the JSON report: %v\n%s", err, ui.OutputWriter.String())
	}
	if rep.EntryBytes < 100 {
		t.Errorf("entry_bytes = %d, want the size of an encoded register request", rep.EntryBytes)
	}
	if rep.ClaimEntryBytes < 100 || rep.ClaimEntryBytes == rep.EntryBytes {
		t.Errorf("claim_entry_bytes = %d, want the size of an encoded claim request", rep.ClaimEntryBytes)
	}
	// 20 + 40 measured claims and a warm-up of 20 before each level, in
	// groups of 20, and the rivals' group for the 30 refused claims: 5 + 2
	// groups.
	if rep.ClaimAllocs != 140 {
		t.Errorf("claim_allocs = %d, want 140", rep.ClaimAllocs)
	}
	type level struct {
		phase, pairedWith string
		conc, volumes     int
		ops               int
	}
	// 20 releases are one job's, spread over the two agents.
	if rep.ReleaseJobs != 1 || len(rep.ReleasePerAgent) != 2 || rep.ReleasePerAgent[0]+rep.ReleasePerAgent[1] != 20 ||
		rep.ReleasePerAgent[0] == 0 || rep.ReleasePerAgent[1] == 0 {
		t.Errorf("release_jobs = %d, release_per_agent = %v, want 1 job and 20 allocations on both agents",
			rep.ReleaseJobs, rep.ReleasePerAgent)
	}
	// The phases run in the order register, list, claim, release, scale, tls,
	// acl, whatever the order of -phases. The agent-down row's volumes are the
	// claims the stopped agent held, which the placer decides: checked
	// below, and -1 here.
	want := []level{
		{"baseline", "register", 1, 0, 20}, {"register", "", 1, 0, 20}, {"raft+fsm", "", 1, 0, 20},
		{"baseline", "register", 8, 0, 40}, {"register", "", 8, 0, 40}, {"raft+fsm", "", 8, 0, 40},
		{"list", "", 1, 50, 5}, {"list", "", 1, 100, 5},
		{"baseline", "claim", 1, 0, 20}, {"claim", "", 1, 0, 20},
		{"baseline", "claim", 8, 0, 40}, {"claim", "", 8, 0, 40},
		{"claim-refused", "", 8, 0, 30},
		{"release", "", 1, 20, 20}, {"release-goroutines", "", 1, 20, 20}, {"release-agent-down", "", 0, -1, 0},
		{"scale-register", "", 8, 0, 40}, {"scale-register", "", 8, 200, 40},
		{"scale-claim", "", 8, 0, 40}, {"scale-claim", "", 8, 200, 40},
		{"tls-register", "", 8, 0, 40}, {"tls-register", "", 8, 0, 40},
		{"tls-claim", "", 8, 0, 40}, {"tls-claim", "", 8, 0, 40},
		{"acl-register", "", 8, 0, 40}, {"acl-register", "", 8, 0, 40},
		{"acl-list", "", 1, 60, 10}, {"acl-list", "", 1, 60, 10},
		{"http-list", "", 1, 50, 5}, {"http-list", "", 1, 50, 5}, {"http-list", "", 1, 50, 5}, {"http-list", "", 1, 50, 5},
		{"http-list", "", 1, 50, 5},
		{"http-list", "", 1, 100, 5}, {"http-list", "", 1, 100, 5}, {"http-list", "", 1, 100, 5}, {"http-list", "", 1, 100, 5},
		{"http-list", "", 1, 100, 5},
		{"http-register", "", 1, 0, 5}, {"http-register", "", 16, 0, 20}, {"http-register", "", 64, 0, 20},
		{"memory", "", 1, 200, 0}, {"memory", "", 1, 200, 0},
		{"failover-kill", "", 1, 0, 1}, {"failover-stop", "", 1, 0, 1},
	}
	if len(rep.Results) != len(want) {
		t.Fatalf("got %d results, want %d:\n%s", len(rep.Results), len(want), ui.OutputWriter.String())
	}
	for i, w := range want {
		r := rep.Results[i]
		got := level{r.Phase, r.PairedWith, r.Concurrency, r.Volumes, r.Ops}
		if w.volumes == -1 && r.Volumes > 0 && r.Volumes < 20 {
			got.volumes = -1
		}
		if got != w {
			t.Errorf("result %d is %+v, want %+v", i, got, w)
		}
		switch r.Phase {
		case "release-goroutines":
			// The releases' goroutines: a few per worker at most, never
			// one per volume; with 20 volumes only counted.
			if r.GoroutinesStart <= 0 || r.GoroutinesPeak < r.GoroutinesStart {
				t.Errorf("result %d: implausible goroutine counts: %d before, %d at the peak", i, r.GoroutinesStart, r.GoroutinesPeak)
			}
		case "memory":
			if r.HeapMB == 0 || r.HeapPerVolume == 0 {
				t.Errorf("result %d: the memory phase without its heap: %+v", i, r)
			}
		case "release-agent-down":
			if r.CPUCores <= 0 || r.FailedAttempts == nil {
				t.Errorf("result %d: no CPU or failed attempts while the stopped agent's releases back off: %+v", i, r)
			}
		case "failover-kill", "failover-stop":
			if r.P50 <= 0 || r.P99 < r.P50 {
				t.Errorf("result %d (%s): implausible times to the first write: p50 %vms, max %vms", i, r.Phase, r.P50, r.P99)
			}
		default:
			if r.OpsPerSec <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
				t.Errorf("result %d (%s): implausible figures: %v ops/s, p50 %vms, p99 %vms", i, r.Phase, r.OpsPerSec, r.P50, r.P99)
			}
		}
		if r.Phase == "release" && (r.CPUCores <= 0 || r.CPUMsPerOp <= 0) {
			t.Errorf("result %d: the release without the process's CPU: %+v", i, r)
		}
		// Every interleaved side counts what the process allocated in its
		// rounds: an RPC call allocates at least its request and reply.
		if (r.Phase == "register" || r.Phase == "claim" || r.Phase == "baseline") && (r.AllocKBPerOp < 0.1 || r.GCCycles == nil) {
			t.Errorf("result %d: %s without the allocation of its rounds: %v KB/op, GCs %v", i, r.Phase, r.AllocKBPerOp, r.GCCycles)
		}
		if (r.Phase == "register" || r.Phase == "raft+fsm" || r.Phase == "claim") && (r.ThroughputRatio <= 0 || r.P99Ratio <= 0) {
			t.Errorf("result %d: %s without its comparison to the baseline: %+v", i, r.Phase, r)
		}
		// The loaded (tls) cluster's rows compare with the empty
		// (plaintext) one's.
		if (r.Cluster == "loaded" || r.Cluster == "tls") && (r.ThroughputRatio <= 0 || r.P99Ratio <= 0) {
			t.Errorf("result %d: %s without its comparison to the other cluster: %+v", i, r.Phase, r)
		}
		judged := r.Phase != "baseline" && r.Phase != "raft+fsm" && r.Cluster != "empty" && r.Cluster != "plaintext" && r.Cluster != "acl-off" &&
			r.Phase != "http-register" && r.Cluster != "follower-stale" && r.Cluster != "leader-gzip" && r.Cluster != "live"
		if judged && r.Pass == nil {
			t.Errorf("result %d: %s without a verdict", i, r.Phase)
		}
		// Refused claims write nothing: the verdict must be a pass here,
		// whatever the machine, unlike the ratios.
		if r.Phase == "claim-refused" && (r.RaftBefore == 0 || r.RaftAdded == nil || *r.RaftAdded != 0 || !*r.Pass) {
			t.Errorf("result %d: refused claims added Raft entries (before %d, added %v)", i, r.RaftBefore, r.RaftAdded)
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

	// The refused claims' row shows the Raft entries they added, and a
	// nonzero count is a missed target.
	added, fail := uint64(3), false
	rep = &bench.Report{ClaimEntryBytes: 300, Results: []bench.Result{{
		Phase: bench.PhaseClaimRefused, Concurrency: 64, Ops: 1000,
		RaftIndexBefore: 10, RaftIndexAfter: 13, RaftEntriesAdded: &added, Target: "0 Raft entries", Pass: &fail,
	}}}
	b.Reset()
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, bench.PhaseClaimRefused) {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 3 || f[len(f)-1] != "MISS" || !slices.Contains(f, "3") {
		t.Errorf("the refused claims' row does not show 3 entries and a MISS: %q\n%s", row, b.String())
	}
	if !strings.Contains(b.String(), "MISSED targets: claim-refused with 64 caller(s) (0 Raft entries)") {
		t.Errorf("the missed target is not named:\n%s", b.String())
	}
}

func TestBenchTableDetails(t *testing.T) {
	// A row without a rate shows dashes, not zeros, and a judged row's
	// detail goes under the table, named by its phase.
	pass := true
	rep := &bench.Report{Results: []bench.Result{{
		Phase: bench.PhaseReleaseGoroutines, Volumes: 1000, Concurrency: 50, Ops: 1000,
		GoroutinesBefore: 400, GoroutinesPeak: 420, Target: "peak +100 at most", Pass: &pass,
		Detail: "+20 at the peak over 400 before",
	}}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.Lines(b.String()) {
		if strings.HasPrefix(line, bench.PhaseReleaseGoroutines+" ") {
			row = line
		}
	}
	if f := strings.Fields(row); len(f) < 6 || f[4] != "-" || f[5] != "-" || f[len(f)-1] != "PASS" {
		t.Errorf("the goroutines row shows no dashes for its rate and p50, or no PASS: %q\n%s", row, b.String())
	}
	if !strings.Contains(b.String(), "\nrelease-goroutines: +20 at the peak over 400 before\n") {
		t.Errorf("the detail is not under the table:\n%s", b.String())
	}
}
