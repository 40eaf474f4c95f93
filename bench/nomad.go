package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The http-nomad phase: volplane and Nomad side by side, each a 3-server
// cluster of agent processes, taking the same registers over HTTP in
// interleaved rounds. Nomad is run as an external program only (its
// binary, built by e2e/nomadcli from Nomad's published module, or any
// given with Config.NomadBinary); none of its code is part of volplane.
const (
	// PhaseHTTPNomad registers volumes with PUT /v1/volume/csi/:id at 1, 16
	// and 64 writers on a volplane cluster and on a Nomad cluster,
	// interleaved, and reports volplane's rate as a multiple of Nomad's.
	PhaseHTTPNomad = "http-nomad"
)

// Targets of the http-nomad phase.
const (
	// NomadTargetRatio is the least multiple of Nomad's register rate that
	// volplane's must reach with NomadTargetWriters writers.
	NomadTargetRatio = 5.0
	// NomadTargetWriters is the level NomadTargetRatio applies to.
	NomadTargetWriters = 16
)

// NomadVersion is the Nomad release whose binary e2e/nomadcli builds and
// caches; the phase looks for it there when no binary is given.
const NomadVersion = "v1.10.5"

// nomadPluginJob is the ID of the job that runs the CSI plugin on the Nomad
// client.
const nomadPluginJob = "bench-csi-plugin"

// NomadCachePath is where e2e/nomadcli keeps the Nomad binary it builds:
// $XDG_CACHE_HOME/volplane/nomad-<version>/nomad, or under ~/.cache. (That
// module is one of its own, so that Nomad stays out of volplane's go.mod:
// the path is repeated here rather than imported.)
func NomadCachePath() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "volplane", "nomad-"+NomadVersion, "nomad"), nil
}

// findNomadBinary returns the Nomad binary the phase runs: given, which
// must be an executable file, or else the cached one. With none given and
// none cached it returns "" and the reason, in words, with a nil error.
func findNomadBinary(given string) (path, missing string, err error) {
	executable := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
	}
	if given != "" {
		if !executable(given) {
			return "", "", fmt.Errorf("-nomad-binary %s is not an executable file", given)
		}
		return given, "", nil
	}
	cached, err := NomadCachePath()
	if err != nil {
		return "", "no -nomad-binary given and no cache directory: " + err.Error(), nil
	}
	if !executable(cached) {
		return "", fmt.Sprintf("no -nomad-binary given and none cached at %s (e2e/nomadcli builds Nomad %s there)",
			cached, NomadVersion), nil
	}
	return cached, "", nil
}

// nomadAgent is the configuration of one Nomad agent of the phase.
type nomadAgent struct {
	name    string
	dataDir string
	// http, rpc and serf are its loopback ports.
	http, rpc, serf int
	// servers is how many servers the cluster has: for a server, its
	// bootstrap_expect. join is, for a server, the servers' serf
	// addresses; for a client, their RPC addresses.
	server  bool
	servers int
	join    []string
	// stateDir is a client's state_dir: the CSI plugin's socket is made
	// under it, and a socket's path may not exceed 107 bytes.
	stateDir string
}

// hcl renders the agent's configuration file.
func (a nomadAgent) hcl() string {
	q := strconv.Quote
	addr := func(port int) string { return q(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))) }
	quoted := make([]string, len(a.join))
	for i, j := range a.join {
		quoted[i] = q(j)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "name = %s\ndata_dir = %s\nbind_addr = \"127.0.0.1\"\nlog_level = \"WARN\"\ndisable_update_check = true\n",
		q(a.name), q(a.dataDir))
	fmt.Fprintf(&b, "ports {\n  http = %d\n  rpc = %d\n  serf = %d\n}\n", a.http, a.rpc, a.serf)
	fmt.Fprintf(&b, "advertise {\n  http = %s\n  rpc = %s\n  serf = %s\n}\n", addr(a.http), addr(a.rpc), addr(a.serf))
	// No Consul here: without this the agents keep trying to reach one.
	b.WriteString("consul {\n  server_auto_join = false\n  client_auto_join = false\n  auto_advertise = false\n}\n")
	if a.server {
		fmt.Fprintf(&b, "server {\n  enabled = true\n  bootstrap_expect = %d\n  server_join {\n    retry_join = [%s]\n  }\n}\n",
			a.servers, strings.Join(quoted, ", "))
	} else {
		// The cloud fingerprinters wait on metadata endpoints that are not
		// there, and the AWS one fails the client when AWS_CA_BUNDLE is
		// set ("failed to setup IMDS client").
		fmt.Fprintf(&b, "client {\n  enabled = true\n  state_dir = %s\n  servers = [%s]\n  options = {\n    \"fingerprint.denylist\" = \"%s\"\n  }\n}\n",
			q(a.stateDir), strings.Join(quoted, ", "), nomadFingerprintDenylist)
		b.WriteString("plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n")
	}
	return b.String()
}

// nomadFingerprintDenylist are the client fingerprinters the phase turns off.
const nomadFingerprintDenylist = "env_aws,env_gce,env_azure,env_digitalocean"

// nomadAgents lays out n servers and one client with data dirs under dir,
// the client's state under stateDir, on ports (3 per agent).
func nomadAgents(dir, stateDir string, n int, ports []int) []nomadAgent {
	var serf, rpc []string
	for i := range n {
		rpc = append(rpc, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i+1])))
		serf = append(serf, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i+2])))
	}
	var out []nomadAgent
	for i := range n + 1 {
		a := nomadAgent{http: ports[3*i], rpc: ports[3*i+1], serf: ports[3*i+2]}
		if i < n {
			a.name, a.server, a.servers, a.join = fmt.Sprintf("nomad%d", i+1), true, n, serf
		} else {
			a.name, a.join, a.stateDir = "nomad-client", rpc, stateDir
		}
		a.dataDir = filepath.Join(dir, a.name)
		out = append(out, a)
	}
	return out
}

// nomadPluginJobBody is the job, in the JSON of PUT /v1/jobs, that runs
// volplane's development CSI plugin as plugin pluginID's node service with
// raw_exec: no controller service, so Nomad registers its volumes without
// asking a controller, as volplane does for the benchmark node's plugin.
// raw_exec has no filesystem isolation, so the client passes the plugin
// the socket's host path in CSI_ENDPOINT, which the plugin reads.
func nomadPluginJobBody(volplaneBin, stateDir, pluginID string) map[string]any {
	task := map[string]any{
		"Name":   "plugin",
		"Driver": "raw_exec",
		"Config": map[string]any{
			"command": volplaneBin,
			"args":    []string{"csi-dev-plugin", "-state-dir", stateDir, "-disable-capability", "plugin:CONTROLLER_SERVICE", "-log-level", "warn"},
		},
		"CSIPluginConfig": map[string]any{"ID": pluginID, "Type": "node", "MountDir": "/csi"},
		"Resources":       map[string]any{"CPU": 100, "MemoryMB": 64},
	}
	return map[string]any{"Job": map[string]any{
		"ID": nomadPluginJob, "Name": nomadPluginJob, "Type": "service", "Datacenters": []string{"dc1"},
		"TaskGroups": []any{map[string]any{"Name": "plugin", "Count": 1, "Tasks": []any{task}}},
	}}
}

// nomadCluster is a 3-server Nomad cluster and one client running the CSI
// plugin, each an agent process.
type nomadCluster struct {
	pc     *procCluster
	client *procServer
	// stateDir is the client's state_dir, outside the bench's data dir
	// for a short socket path; close removes it.
	stateDir string
	leader   *procServer
	// allocDir is the client's alloc_dir, which holds a dir per
	// allocation.
	allocDir string
	// jobRunning is set once the plugin job is submitted: close stops it
	// before the client, which leaves its tasks running when it exits.
	jobRunning bool
}

// startNomad starts the cluster from the Nomad binary bin with data dirs
// under dir, submits the plugin job (running volplaneBin's development
// plugin), and waits for a leader and a healthy plugin.
func startNomad(ctx context.Context, cfg *Config, bin, volplaneBin, dir string) (_ *nomadCluster, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	stateDir, err := os.MkdirTemp("", "vpn")
	if err != nil {
		return nil, err
	}
	nc := &nomadCluster{
		pc:       &procCluster{bin: bin, dir: dir, http: &http.Client{Timeout: callTimeout}},
		stateDir: stateDir,
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, nc.close(context.WithoutCancel(ctx)))
		}
	}()
	ports, err := freeLoopbackPorts(3 * (clusterSize + 1))
	if err != nil {
		return nil, err
	}
	for _, a := range nomadAgents(dir, stateDir, clusterSize, ports) {
		path := filepath.Join(dir, a.name+".hcl")
		if err := os.WriteFile(path, []byte(a.hcl()), 0o644); err != nil {
			return nil, err
		}
		s := &procServer{name: a.name, args: []string{"agent", "-config", path}, logPath: filepath.Join(dir, a.name+".log"),
			httpAddr: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(a.http)),
			rpcAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(a.rpc))}
		if a.server {
			nc.pc.servers = append(nc.pc.servers, s)
		} else {
			nc.client = s
			nc.allocDir = filepath.Join(a.dataDir, "alloc")
		}
		if err := nc.pc.start(s); err != nil {
			return nil, err
		}
	}
	if nc.leader, err = nc.waitLeader(ctx); err != nil {
		return nil, fmt.Errorf("nomad: %w (logs in %s)", err, dir)
	}
	cfg.progress("http-nomad: running the CSI plugin %q on the Nomad client", benchPlugin)
	body := nomadPluginJobBody(volplaneBin, filepath.Join(dir, "plugin-state"), benchPlugin)
	if err := nc.send(ctx, http.MethodPut, "/v1/jobs", body, nil); err != nil {
		return nil, fmt.Errorf("nomad: submitting the plugin job: %w", err)
	}
	nc.jobRunning = true
	if err := nc.waitPlugin(ctx); err != nil {
		return nil, fmt.Errorf("nomad: %w (logs in %s)", err, dir)
	}
	return nc, nil
}

// waitLeader waits until the servers agree on a leader that answers a
// default read.
func (nc *nomadCluster) waitLeader(ctx context.Context) (*procServer, error) {
	deadline := time.Now().Add(formTimeout)
	var last error
	for time.Now().Before(deadline) {
		leader, err := nc.pc.agreedLeader(ctx)
		if err == nil {
			if err = nc.pc.get(ctx, leader, "/v1/volumes?type=csi", nil); err == nil {
				return leader, nil
			}
		}
		last = err
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no leader within %s: %w", formTimeout, last)
}

// pluginWait bounds the wait for the plugin: the client's fingerprinting,
// the allocation's start and the plugin's first probe.
const pluginWait = 2 * time.Minute

// waitPlugin waits until the leader counts a healthy node of the plugin;
// on a timeout the error carries the plugin allocation's task events.
func (nc *nomadCluster) waitPlugin(ctx context.Context) error {
	deadline := time.Now().Add(pluginWait)
	for time.Now().Before(deadline) {
		var plugin struct{ NodesHealthy int }
		if err := nc.pc.get(ctx, nc.leader, "/v1/plugin/csi/"+benchPlugin, &plugin); err == nil && plugin.NodesHealthy > 0 {
			return nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the CSI plugin %q has no healthy node after %s; its allocations: %s", benchPlugin, pluginWait, nc.allocEvents(ctx))
}

// nomadAlloc is the part of an allocation stub the phase reads.
type nomadAlloc struct {
	ID           string
	ClientStatus string
	TaskStates   map[string]struct {
		State  string
		Events []struct{ Type, DisplayMessage string }
	}
}

func (nc *nomadCluster) allocs(ctx context.Context) ([]nomadAlloc, error) {
	var allocs []nomadAlloc
	err := nc.pc.get(ctx, nc.leader, "/v1/job/"+nomadPluginJob+"/allocations", &allocs)
	return allocs, err
}

// allocEvents describes the plugin job's allocations and their task events.
func (nc *nomadCluster) allocEvents(ctx context.Context) string {
	allocs, err := nc.allocs(ctx)
	if err != nil {
		return err.Error()
	}
	if len(allocs) == 0 {
		return "none (was the client registered?)"
	}
	var parts []string
	for _, a := range allocs {
		var events []string
		for _, ts := range a.TaskStates {
			for _, e := range ts.Events {
				events = append(events, e.Type+": "+e.DisplayMessage)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s [%s]", a.ID[:8], a.ClientStatus, strings.Join(events, "; ")))
	}
	return strings.Join(parts, ", ")
}

// send sends a JSON body to path on the leader and decodes the answer into
// out (nil discards it).
func (nc *nomadCluster) send(ctx context.Context, method, path string, body, out any) error {
	var r *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	} else {
		r = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(ctx, method, nc.leader.httpAddr+path, r)
	if err != nil {
		return err
	}
	resp, err := nc.pc.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(msg)))
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// jobStopWait bounds the wait for the plugin task to stop.
const jobStopWait = 30 * time.Second

// close stops the plugin job and waits for its task to end (a Nomad client
// that exits leaves its tasks running), then stops the agents.
func (nc *nomadCluster) close(ctx context.Context) error {
	var errs []error
	if nc.jobRunning {
		errs = append(errs, nc.stopJob(ctx))
	}
	if nc.client != nil {
		errs = append(errs, nc.pc.stop(nc.client))
	}
	for _, s := range nc.pc.servers {
		errs = append(errs, nc.pc.stop(s))
	}
	errs = append(errs, os.RemoveAll(nc.stateDir))
	return errors.Join(errs...)
}

func (nc *nomadCluster) stopJob(ctx context.Context) error {
	if err := nc.send(ctx, http.MethodDelete, "/v1/job/"+nomadPluginJob, nil, nil); err != nil {
		return fmt.Errorf("nomad: stopping the plugin job: %w", err)
	}
	deadline := time.Now().Add(jobStopWait)
	for time.Now().Before(deadline) {
		allocs, err := nc.allocs(ctx)
		running := err != nil
		for _, a := range allocs {
			for _, ts := range a.TaskStates {
				running = running || ts.State != "dead"
			}
		}
		if !running {
			nc.jobRunning = false
			return nc.collectAllocs(ctx, allocs, deadline)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("nomad: the plugin task did not stop within %s: %s", jobStopWait, nc.allocEvents(ctx))
}

// collectAllocs has the client collect the stopped allocations, which
// unmounts the secrets and private dirs it mounted (as root) in each
// allocation's task dir: until then the bench's data dir cannot be
// removed. It waits for each allocation's dir to go, until deadline.
func (nc *nomadCluster) collectAllocs(ctx context.Context, allocs []nomadAlloc, deadline time.Time) error {
	for _, a := range allocs {
		dir := filepath.Join(nc.allocDir, a.ID)
		for {
			// The client marks an allocation for collection once it is
			// terminal; until then the call finds nothing to collect.
			err := nc.pc.get(ctx, nc.client, "/v1/client/allocation/"+a.ID+"/gc", nil)
			if _, statErr := os.Stat(dir); errors.Is(statErr, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("nomad: the client did not collect allocation %s within %s (last answer: %v)", a.ID, jobStopWait, err)
			}
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// runHTTPNomad runs the http-nomad phase: a volplane cluster and a Nomad
// cluster side by side, each leader taking one-volume registers over HTTP
// at 1, 16 and 64 writers, interleaved in cfg.Rounds rounds.
func runHTTPNomad(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	nomadBin, missing, err := findNomadBinary(cfg.NomadBinary)
	if err != nil {
		return err
	}
	if nomadBin == "" {
		line := "http-nomad: skipped: no Nomad binary: " + missing
		cfg.progress("%s", line)
		rep.Notes = append(rep.Notes, line)
		return nil
	}
	volplaneBin := cfg.Binary
	if volplaneBin == "" {
		if volplaneBin, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the volplane binary: %w", err)
		}
	}
	cfg.progress("http-nomad: starting 3 volplane server agents as processes")
	pc, err := startProcCluster(ctx, volplaneBin, filepath.Join(dir, "http-nomad-volplane"), clusterSize, cfg.serverHCL(0))
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var heartbeats sync.WaitGroup
	var nc *nomadCluster
	defer func() {
		close(stop)
		heartbeats.Wait()
		cfg.progress("http-nomad: stopping the agents")
		if nc != nil {
			err = errors.Join(err, nc.close(context.WithoutCancel(ctx)))
		}
		err = errors.Join(err, pc.close())
	}()
	leader, err := pc.waitLeader(ctx)
	if err != nil {
		return err
	}
	if err := pc.registerNode(leader, stop, &heartbeats); err != nil {
		return err
	}
	cfg.progress("http-nomad: starting 3 Nomad server agents and a client from %s", nomadBin)
	if nc, err = startNomad(ctx, cfg, nomadBin, volplaneBin, filepath.Join(dir, "http-nomad-nomad")); err != nil {
		return err
	}

	// The bare Raft cluster, beside both, shows what the Raft stack that
	// both are built on does alone at each level, on this machine.
	entryBytes, err := registerEntryBytes()
	if err != nil {
		return err
	}
	cfg.progress("http-nomad: starting a 3-node bare raft cluster")
	base, err := startBaseline(ctx, cfg, filepath.Join(dir, "http-nomad-raft"), entryBytes)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, base.close()) }()

	next := map[string]int{"nomad": 1, "volplane": 1}
	registerSide := func(name, addr string, writers int, client *http.Client) *side {
		return &side{name: name, run: func(n int) ([]time.Duration, time.Duration, error) {
			first := next[name]
			next[name] += n
			return labelled(ctx, name, func(ctx context.Context) ([]time.Duration, time.Duration, error) {
				return drive(ctx, n, writers, func(i int) error { return httpRegister(ctx, client, addr, first+i) })
			})
		}}
	}
	for _, writers := range httpRegisterWriters {
		ops := cfg.HTTPRegisterOps
		if writers == 1 {
			ops = max(1, ops/4)
		}
		client := &http.Client{Timeout: callTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: writers}}
		bare := baselineSide(ctx, base, writers)
		bare.name = "bare raft"
		sides := []*side{registerSide("nomad", nc.leader.httpAddr, writers, client), registerSide("volplane", leader.httpAddr, writers, client), bare}
		before, metricsErr := pc.clusterMetrics(ctx)
		err := interleave(cfg, PhaseHTTPNomad, writers, ops, min(cfg.Rounds, ops), sides)
		// Each level's connections go: they count against the servers'
		// per-address limits.
		client.CloseIdleConnections()
		if err != nil {
			return err
		}
		rep.addNomad(writers, entryBytes, &sides[0].s, &sides[1].s, &sides[2].s)
		var after map[*procServer]metricTotals
		if metricsErr == nil {
			after, metricsErr = pc.clusterMetrics(ctx)
		}
		if metricsErr != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("http-nomad: no breakdown of volplane's writes with %d writers: reading its metrics: %v", writers, metricsErr))
		} else if res := rep.volplaneResult(PhaseHTTPNomad, writers); res != nil {
			res.Breakdown = writeBreakdown(leader, before, after)
		}
	}
	if now, err := pc.agreedLeader(ctx); err != nil || now != leader {
		rep.Notes = append(rep.Notes, "the volplane leader changed during the http-nomad phase: figures are skewed")
	}
	if now, err := nc.pc.agreedLeader(ctx); err != nil || now != nc.leader {
		rep.Notes = append(rep.Notes, "the Nomad leader changed during the http-nomad phase: figures are skewed")
	}
	return nil
}

// volplaneResult is the last result of phase at writers measured on
// volplane's side, nil when there is none.
func (r *Report) volplaneResult(phase string, writers int) *Result {
	for i := len(r.Results) - 1; i >= 0; i-- {
		if res := &r.Results[i]; res.Phase == phase && res.Concurrency == writers && res.Cluster == "volplane" {
			return res
		}
	}
	return nil
}

// addNomad adds an http-nomad level: Nomad's figures, then volplane's with
// its rate as a multiple of Nomad's (the median over the rounds of the two
// rates within a round), then the bare Raft cluster's the same way; only
// volplane's row at NomadTargetWriters has a target.
func (r *Report) addNomad(writers, entryBytes int, nomad, volplane, bare *series) {
	r.addPaired(PhaseHTTPNomad, writers, "nomad", nomad, "volplane", volplane, NomadTargetRatio,
		"PUT /v1/volume/csi/:id, one volume per request, to each cluster's leader")
	if writers != NomadTargetWriters {
		last := &r.Results[len(r.Results)-1]
		last.Target, last.Pass = "", nil
	}
	r.Results = append(r.Results, pairedResult(PhaseHTTPNomad, writers, nomad, "bare raft", bare, fmt.Sprintf(
		"raft.Apply of %d-byte entries (a register entry's size) on 3 bare raft + raft-%s nodes with a no-op state machine, "+
			"in the benchmark's process, on the same disk: what the Raft stack alone does at this concurrency", entryBytes, r.Config.RaftLogStore)))
}
