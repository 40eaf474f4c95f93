package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestNomadAgentConfig: three servers that expect each other and join by
// their serf ports, and a client that knows the servers' RPC ports and
// runs raw_exec tasks, every agent on its own loopback ports.
func TestNomadAgentConfig(t *testing.T) {
	ports := []int{101, 102, 103, 201, 202, 203, 301, 302, 303, 401, 402, 403}
	agents := nomadAgents("/data", "/st", 3, ports)
	if len(agents) != 4 {
		t.Fatalf("%d agents, want 3 servers and a client", len(agents))
	}
	server := agents[1].hcl()
	for _, want := range []string{
		`name = "nomad2"`, `data_dir = "/data/nomad2"`, `bind_addr = "127.0.0.1"`,
		"ports {\n  http = 201\n  rpc = 202\n  serf = 203\n}",
		"advertise {\n  http = \"127.0.0.1:201\"\n  rpc = \"127.0.0.1:202\"\n  serf = \"127.0.0.1:203\"\n}",
		"bootstrap_expect = 3", `retry_join = ["127.0.0.1:103", "127.0.0.1:203", "127.0.0.1:303"]`,
	} {
		if !strings.Contains(server, want) {
			t.Errorf("server config lacks %q:\n%s", want, server)
		}
	}
	for _, not := range []string{"client {", "raw_exec"} {
		if strings.Contains(server, not) {
			t.Errorf("server config has %q:\n%s", not, server)
		}
	}
	client := agents[3].hcl()
	for _, want := range []string{
		`name = "nomad-client"`, `data_dir = "/data/nomad-client"`, "http = 401",
		"client {\n  enabled = true\n  state_dir = \"/st\"\n  servers = [\"127.0.0.1:102\", \"127.0.0.1:202\", \"127.0.0.1:302\"]\n",
		`"fingerprint.denylist" = "env_aws,`,
		"plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}",
	} {
		if !strings.Contains(client, want) {
			t.Errorf("client config lacks %q:\n%s", want, client)
		}
	}
	if strings.Contains(client, "server {") {
		t.Errorf("client config has a server block:\n%s", client)
	}
	// A path with a quote stays one HCL string.
	if got := (nomadAgent{name: "n", dataDir: `/a"b`}).hcl(); !strings.Contains(got, `data_dir = "/a\"b"`) {
		t.Errorf("data_dir not quoted:\n%s", got)
	}
}

// TestNomadPluginJob: the plugin job runs the development plugin with
// raw_exec as a node-only plugin, in Nomad's job JSON.
func TestNomadPluginJob(t *testing.T) {
	b, err := json.Marshal(nomadPluginJobBody("/bin/volplane", "/state", "bench"))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		Job struct {
			ID, Type    string
			Datacenters []string
			TaskGroups  []struct {
				Count int
				Tasks []struct {
					Driver string
					Config struct {
						Command string   `json:"command"`
						Args    []string `json:"args"`
					}
					CSIPluginConfig struct{ ID, Type, MountDir string }
				}
			}
		}
	}
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	j := job.Job
	if j.ID != nomadPluginJob || len(j.TaskGroups) != 1 || j.TaskGroups[0].Count != 1 || len(j.TaskGroups[0].Tasks) != 1 {
		t.Fatalf("job %s", b)
	}
	task := j.TaskGroups[0].Tasks[0]
	args := strings.Join(task.Config.Args, " ")
	if task.Driver != "raw_exec" || task.Config.Command != "/bin/volplane" ||
		!strings.HasPrefix(args, "csi-dev-plugin -state-dir /state ") || !strings.Contains(args, "-disable-capability plugin:CONTROLLER_SERVICE") {
		t.Errorf("task %+v", task)
	}
	if p := task.CSIPluginConfig; p.ID != "bench" || p.Type != "node" || p.MountDir == "" {
		t.Errorf("csi_plugin %+v", p)
	}
}

// TestAddNomad: each level reports Nomad's figures, then volplane's and
// the bare Raft cluster's, each with the median of its round ratios to
// Nomad's; only volplane's 16-writer row is judged, against 5x.
func TestAddNomad(t *testing.T) {
	rounds := func(rates ...float64) *series {
		s := &series{}
		for _, rate := range rates {
			// 100 ops per round, at the given rate.
			s.add(make([]time.Duration, 100), time.Duration(100/rate*float64(time.Second)))
		}
		return s
	}
	var r Report
	for _, lv := range []struct {
		writers           int
		vpRates, rawRates []float64
	}{
		{1, []float64{200, 300, 250}, []float64{300, 300, 300}},
		{16, []float64{400, 600, 500}, []float64{700, 800, 900}},
		{64, []float64{900, 700, 800}, []float64{1000, 1000, 1000}},
	} {
		r.addNomad(lv.writers, 931, rounds(100, 100, 100), rounds(lv.vpRates...), rounds(lv.rawRates...))
	}
	if len(r.Results) != 9 {
		t.Fatalf("%d results, want 9", len(r.Results))
	}
	for i, res := range r.Results {
		want := []string{"nomad", "volplane", "bare raft"}[i%3]
		if res.Phase != PhaseHTTPNomad || res.Cluster != want || res.Ops != 300 {
			t.Errorf("result %d: %+v", i, res)
		}
	}
	for i, want := range map[int]float64{1: 2.5, 2: 3, 4: 5, 5: 8, 7: 8, 8: 10} {
		if got := r.Results[i].ThroughputRatio; got != want {
			t.Errorf("result %d: ratio %v, want %v", i, got, want)
		}
	}
	for i, res := range r.Results {
		if i != 4 && res.Pass != nil {
			t.Errorf("result %d is judged: %+v", i, res)
		}
	}
	if p := r.Results[4].Pass; p == nil || !*p || r.Results[4].Target != "ops/s >= 5x" {
		t.Errorf("16 writers at 5x: %+v", r.Results[4])
	}
	if !strings.Contains(r.Results[5].Detail, "931-byte entries") {
		t.Errorf("the bare raft row does not say what it applied: %q", r.Results[5].Detail)
	}

	var miss Report
	miss.addNomad(16, 931, rounds(100, 100, 100), rounds(400, 600, 450), rounds(900, 900, 900))
	if p := miss.Results[1].Pass; p == nil || *p || miss.allPass() {
		t.Errorf("16 writers at 4.5x passes: %+v", miss.Results[1])
	}
}

// TestFindNomadBinary: a given binary must be executable; without one the
// cached one is used, and with none cached the phase says why it skips.
func TestFindNomadBinary(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", dir)
	if runtime.GOOS != "linux" {
		t.Skip("XDG_CACHE_HOME is the cache directory on Linux")
	}
	path, missing, err := findNomadBinary("")
	if err != nil || path != "" || !strings.Contains(missing, filepath.Join(dir, "volplane", "nomad-"+NomadVersion, "nomad")) {
		t.Errorf("none cached: %q, %q, %v", path, missing, err)
	}
	cached, _ := NomadCachePath()
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if path, _, err := findNomadBinary(""); err != nil || path != cached {
		t.Errorf("cached: %q, %v", path, err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := findNomadBinary(plain); err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("a file that is not executable: %v", err)
	}
	if path, _, err := findNomadBinary(cached); err != nil || path != cached {
		t.Errorf("given: %q, %v", path, err)
	}
}

// TestHTTPNomadPhase runs the http-nomad phase at a tiny size against the
// cached Nomad binary: both clusters form, the plugin becomes healthy on
// the Nomad client, both take the registers, and nothing is left running.
func TestHTTPNomadPhase(t *testing.T) {
	nomadBin, missing, err := findNomadBinary("")
	if err != nil {
		t.Fatal(err)
	}
	if nomadBin == "" {
		t.Skip("no nomad binary: " + missing)
	}
	if testing.Short() {
		t.Skip("starts a 3-server volplane cluster and a 3-server Nomad cluster with a client")
	}
	bin := filepath.Join(t.TempDir(), "volplane")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/volplane/volplane/cmd/volplane").CombinedOutput(); err != nil {
		t.Fatalf("building volplane: %v\n%s", err, out)
	}
	dir := t.TempDir()
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Phases: []string{PhaseHTTPNomad}, Binary: bin, HTTPRegisterOps: 40, Rounds: 2,
		Dir: dir, Progress: &progress})
	if err != nil {
		t.Fatalf("run: %v\nprogress:\n%s", err, progress.String())
	}
	if len(rep.Results) != 9 {
		t.Fatalf("%d results, want 9 (nomad, volplane and bare raft at 3 levels): %+v\nnotes: %v", len(rep.Results), rep.Results, rep.Notes)
	}
	for i, res := range rep.Results {
		wantOps := map[int]int{1: 10, 16: 40, 64: 40}[res.Concurrency]
		if res.Phase != PhaseHTTPNomad || res.Ops != wantOps || res.OpsPerSec <= 0 || res.P50 <= 0 {
			t.Errorf("result %d: %+v", i, res)
		}
		if res.Cluster != "nomad" && res.ThroughputRatio <= 0 {
			t.Errorf("result %d without its ratio: %+v", i, res)
		}
		if judged := res.Cluster == "volplane" && res.Concurrency == NomadTargetWriters; judged != (res.Pass != nil) {
			t.Errorf("result %d judged: %v, want %v", i, res.Pass != nil, judged)
		}
	}
	// The data dirs are gone, and with them every agent; the plugin task,
	// which a Nomad client leaves running when it exits, was stopped.
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Errorf("left in the data dir: %v %v", entries, err)
	}
	if runtime.GOOS == "linux" {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), dir) {
				t.Errorf("a process still runs with the bench's dir: %s: %q", p, b)
			}
		}
	}
}
