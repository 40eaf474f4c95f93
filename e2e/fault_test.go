package e2e

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

var (
	soakFlag = flag.Duration("soak", 0, "TestE2E_Faults: make faults for this long (a soak) instead of the short run's "+shortFaults.String())
	seedFlag = flag.Uint64("seed", 0, "TestE2E_Faults: the seed of the faults and the workload (0: a new one, printed)")
)

// Settings of the fault suite.
const (
	// shortFaults is how long the short run, part of every `go test`,
	// makes faults.
	shortFaults = 40 * time.Second
	// apiWorkers compete for the API volumes; apiNodes run their jobs.
	apiWorkers = 8
	apiNodes   = 3
	// faultReleaseCap caps the backoff of a failing release step.
	faultReleaseCap = 4 * time.Second
	// faultCallTimeout bounds each release call (csi_call_timeout).
	faultCallTimeout = 8 * time.Second
	// freeSlack is what freeing a claim may take beyond the backoff cap
	// once the cluster is healed: a stop's write, the client stopping the
	// tasks, the release's node and controller steps and their writes, on
	// a loaded machine.
	freeSlack = 15 * time.Second
)

// faultServerConfig: nodes are marked down within seconds, so a crashed
// machine's claims are released during the run, and a failing release is
// retried at least every faultReleaseCap.
//
// A call to a client agent that is frozen, or whose machine is gone,
// fails only at csi_call_timeout: the suite keeps that within the backoff
// cap, as an operator who wants releases resumed quickly would. (A retry
// whose leader died is not waited for: the next leader calls at once.)
//
// The servers' Raft log backend is picked by the seed, so that runs cover
// both: every server of a run on the same one.
func faultServerConfig(logStore string) string {
	return fmt.Sprintf("server {\n  heartbeat_ttl = %q\n  node_grace_period = %q\n  csi_release_max_delay = %q\n  csi_call_timeout = %q\n"+
		"  raft_logstore {\n    backend = %q\n  }\n}\n",
		faultHeartbeatTTL, faultNodeGrace, faultReleaseCap, faultCallTimeout, logStore)
}

// faultLogStores are the Raft log backends a seed picks from.
var faultLogStores = []string{"boltdb", "wal"}

// TestE2E_Faults is the fault suite: 3 servers, 3 client agents each with
// an instance of the development plugin, and 3 nodes of API clients; 8 API
// clients compete for claims on volumes of every access mode while the
// client agents run and stop jobs on volumes of the plugin, and a nemesis
// crashes, freezes and restarts servers, client agents and whole client
// machines. Then, healed:
//
//   - the API clients' history of claims, stops and reads is
//     linearizable against the claim rules (porcupine, claimModel);
//   - the servers never detached a claim whose allocation was not stopped;
//   - the plugin's call log never shows a volume published writable on
//     two nodes at once;
//   - once the jobs are stopped, every claim is freed within the release
//     backoff cap (and the time a release takes).
//
// The run is deterministic from its seed, printed at the start and on
// failure; -seed repeats one, -soak 10m makes a long run.
func TestE2E_Faults(t *testing.T) {
	t.Parallel()
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	faults := shortFaults
	if *soakFlag > 0 {
		faults = *soakFlag
	}
	logStore := faultLogStores[seed%uint64(len(faultLogStores))]
	t.Logf("fault suite: seed %d, faults for %s, Raft logs on %s", seed, faults, logStore)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fault suite failed with seed %d: go test ./e2e -run TestE2E_Faults -seed %d", seed, seed)
		}
	})
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: faultServerConfig(logStore)})
	s := newFaultSuite(t, c, seed)
	start := time.Now()

	// The API nodes stay up through the checks; the workers and the driver
	// stop when the faults do.
	nodesCtx, stopNodes := context.WithCancel(context.Background())
	var nodesWG sync.WaitGroup
	t.Cleanup(func() {
		stopNodes()
		nodesWG.Wait()
	})
	s.setup(t, nodesCtx, &nodesWG)
	t.Logf("set up in %s", time.Since(start).Round(time.Millisecond))

	ctx, stopLoad := context.WithCancel(context.Background())
	var loadWG sync.WaitGroup
	var workers []*apiWorker
	for i := range apiWorkers {
		w := &apiWorker{id: i, suite: s, rng: s.rng(uint64(i + 1)), pool: s.newPool(t, apiRPCTimeout),
			impatient: s.newPool(t, apiImpatience)}
		workers = append(workers, w)
		loadWG.Go(func() { w.run(ctx) })
	}
	driver := &agentDriver{suite: s, rng: s.rng(100), pool: s.newPool(t, apiRPCTimeout), jobs: agentJobs()}
	loadWG.Go(func() { driver.run(ctx) })

	// The nemesis runs here, on the test's goroutine, which may fail the
	// test.
	n := &nemesis{s: s, t: t, done: map[faultKind]int{}}
	plan := schedule(seed, faults)
	s.faulting.Store(true)
	n.run(context.Background(), plan)
	s.faulting.Store(false)
	healed := time.Now()
	total, kinds := n.summary()
	t.Logf("nemesis: %d faults in %s (%s)", total, healed.Sub(start).Round(time.Millisecond), kinds)
	for _, line := range n.log {
		t.Logf("fault %s", line)
	}

	stopLoad()
	waitGroupFor(t, &loadWG, 2*apiRPCTimeout*5, "the API clients to finish their rounds and stop their jobs")
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), time.Minute)
	defer cancelDrain()
	must.NoError(t, driver.stopAll(drainCtx))
	quiet := time.Now()
	t.Logf("load stopped %s after healing: %s; agent jobs run %d times, stopped %d times",
		quiet.Sub(healed).Round(time.Millisecond), s.hist.figures(), driver.runs, driver.stops)

	if freed, held := s.waitAllFree(t, quiet); len(held) > 0 {
		t.Errorf("claims still held %s after the last stop (the backoff cap is %s):\n%s",
			freed.Round(time.Millisecond), faultReleaseCap, strings.Join(held, "\n"))
		s.explainHeld(t)
	} else {
		t.Logf("every claim freed %s after the last stop (bound %s)", freed.Round(time.Millisecond), faultReleaseCap+freeSlack)
	}

	s.checkHistory(t, seed)
	s.checkCalls(t, n)
	s.report(t)
	if !t.Failed() {
		t.Logf("fault suite with seed %d: %d faults, %s, 0 violations, in %s", seed, total, s.hist.figures(),
			time.Since(start).Round(time.Second))
	}
}

// faultSuite is what the parts of the fault suite share.
type faultSuite struct {
	c        Cluster
	seed     uint64
	hist     *history
	stateDir string
	plugins  []Plugin
	clients  []Client
	apiNodes map[string]*apiNode // by node ID
	// faulting is set while the nemesis works.
	faulting atomic.Bool

	mu         sync.Mutex
	pick       *rand.Rand
	asked      map[string]bool // allocations whose stop was asked for
	violations []string
	problems   []string
	pools      []*rpc.ConnPool
}

func newFaultSuite(t *testing.T, c Cluster, seed uint64) *faultSuite {
	s := &faultSuite{c: c, seed: seed, hist: newHistory(), stateDir: t.TempDir(),
		apiNodes: map[string]*apiNode{}, pick: rand.New(rand.NewPCG(seed, 7)), asked: map[string]bool{}}
	t.Cleanup(func() {
		for _, p := range s.pools {
			p.Close()
		}
	})
	return s
}

// rng is a random source of its own for one part of the run, derived from
// the seed.
func (s *faultSuite) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(s.seed, stream))
}

func (s *faultSuite) newPool(t *testing.T, timeout time.Duration) *rpc.ConnPool {
	p := rpc.NewPool(rpc.PoolConfig{CallTimeout: timeout})
	s.mu.Lock()
	s.pools = append(s.pools, p)
	s.mu.Unlock()
	return p
}

// anyServer is the RPC address of a running server, at random.
func (s *faultSuite) anyServer() string {
	running := s.c.Running()
	if len(running) == 0 {
		running = s.c.Servers()
	}
	s.mu.Lock()
	i := s.pick.IntN(len(running))
	s.mu.Unlock()
	return running[i].RPCAddr()
}

// knownLeader is the leader a running server names, if it is running.
func (s *faultSuite) knownLeader() Server {
	for _, srv := range s.c.Running() {
		var addr string
		if err := getJSON(srv.HTTPAddr()+"/v1/status/leader?stale", &addr); err != nil || addr == "" {
			continue
		}
		for _, r := range s.c.Running() {
			if r.RPCAddr() == addr {
				return r
			}
		}
	}
	return nil
}

func (s *faultSuite) askStop(allocID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked[allocID] = true
}

func (s *faultSuite) stopAsked(allocID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[allocID]
}

func (s *faultSuite) apiNodeOf(nodeID string) *apiNode { return s.apiNodes[nodeID] }

// violation records a broken guarantee; problem something else that went
// wrong. Both fail the test at the end, with the seed.
func (s *faultSuite) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *faultSuite) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

// setup starts the client machines (a plugin instance and a client agent
// each, one storage system), the API nodes, and the volumes.
func (s *faultSuite) setup(t *testing.T, ctx context.Context, wg *sync.WaitGroup) {
	WaitForLeader(t, s.c)
	for i, name := range []string{"a", "b", "c"} {
		p := s.c.StartPlugin(t, PluginConfig{Name: "plugin-" + name, NodeID: "storage-" + name, StateDir: s.stateDir})
		s.plugins = append(s.plugins, p)
		cl := s.c.StartClient(t, ClientConfig{Name: fmt.Sprintf("c%d", i+1), Plugins: map[string]Plugin{pluginID: p}})
		s.clients = append(s.clients, cl)
		t.Cleanup(func() { killTasksUnder(t, cl.DataDir()) })
	}
	for i := range apiNodes {
		n := s.startAPINode(t, ctx, wg, i)
		s.apiNodes[n.node.ID] = n
	}
	pool := s.newPool(t, apiRPCTimeout)
	call := func(method string, args, reply any) func() (bool, error) {
		return func() (bool, error) {
			err := pool.RPC(s.anyServer(), method, args, reply)
			return err == nil, err
		}
	}
	// The development plugin healthy on every client machine, with a
	// controller to create its volumes.
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var resp structs.CSIPluginGetResponse
		if ok, err := call("CSIPlugin.Get", &structs.CSIPluginGetRequest{ID: pluginID}, &resp)(); !ok {
			return false, err
		}
		p := resp.Plugin
		if p == nil || p.ControllersHealthy != len(s.clients) || p.NodesHealthy != len(s.clients) {
			return false, fmt.Errorf("plugin %s is not healthy on every client yet: %+v", pluginID, p)
		}
		return true, nil
	})
	var vols []*structs.CSIVolume
	for _, v := range agentVolumes {
		vols = append(vols, &structs.CSIVolume{ID: v.id, Namespace: structs.DefaultNamespace, Name: v.id, PluginID: pluginID,
			RequestedCapabilities: []*structs.CSIVolumeCapability{{AccessMode: v.access, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}}})
	}
	testutil.WaitForResult(t, leaderTimeout, call("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: vols}, &structs.CSIVolumeCreateResponse{}))
	var apiVols []*structs.CSIVolume
	for _, v := range apiVolumes {
		apiVols = append(apiVols, v.volume())
	}
	testutil.WaitForResult(t, leaderTimeout, call("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: apiVols}, &structs.CSIVolumeRegisterResponse{}))
}

// allVolumeIDs are the volumes of the run.
func allVolumeIDs() []string {
	var ids []string
	for _, v := range apiVolumes {
		ids = append(ids, v.ID)
	}
	for _, v := range agentVolumes {
		ids = append(ids, v.id)
	}
	return ids
}

// waitAllFree waits until no volume has a claim of any kind and returns
// how long that took after since; or, when that takes longer than the
// backoff cap and the slack allow, the claims still held.
func (s *faultSuite) waitAllFree(t *testing.T, since time.Time) (time.Duration, []string) {
	t.Helper()
	pool := s.newPool(t, apiRPCTimeout)
	bound := faultReleaseCap + freeSlack
	for {
		var held []string
		for _, id := range allVolumeIDs() {
			var resp structs.CSIVolumeGetResponse
			err := pool.RPC(s.anyServer(), "CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: id,
				QueryOptions: structs.QueryOptions{Namespace: structs.DefaultNamespace}}, &resp)
			switch {
			case err != nil:
				held = append(held, fmt.Sprintf("%s: %v", id, err))
			case resp.Volume == nil:
				held = append(held, id+": not found")
			case resp.Volume.InUse():
				held = append(held, describeClaims(resp.Volume))
			}
		}
		if len(held) == 0 || time.Since(since) > bound {
			return time.Since(since), held
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// explainHeld shows, for every allocation that still holds a claim of an
// API volume, the allocation as the servers have it, its operations in the
// history, and what the agents logged about it.
func (s *faultSuite) explainHeld(t *testing.T) {
	t.Helper()
	pool := s.newPool(t, apiRPCTimeout)
	s.hist.mu.Lock()
	nums := maps.Clone(s.hist.allocs)
	s.hist.mu.Unlock()
	ops := s.hist.operations()
	logs := s.c.Logs(t)
	for _, v := range apiVolumes {
		var resp structs.CSIVolumeGetResponse
		if err := pool.RPC(s.anyServer(), "CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: v.ID,
			QueryOptions: structs.QueryOptions{Namespace: structs.DefaultNamespace}}, &resp); err != nil || resp.Volume == nil {
			continue
		}
		for _, m := range []map[string]*structs.CSIVolumeClaim{resp.Volume.ReadClaims, resp.Volume.WriteClaims} {
			for id := range m {
				var a structs.SingleAllocResponse
				err := pool.RPC(s.anyServer(), "Alloc.GetAlloc", &structs.AllocSpecificRequest{AllocID: id}, &a)
				var mine []porcupine.Operation
				for _, op := range ops {
					if in := op.Input.(claimInput); in.Volume.ID == v.ID && in.Alloc == nums[id] && in.Kind != opRead {
						mine = append(mine, op)
					}
				}
				var lines []string
				for name, log := range logs {
					for _, l := range strings.Split(log, "\n") {
						if strings.Contains(l, id) {
							lines = append(lines, name+": "+l)
						}
					}
				}
				if len(lines) > 40 {
					lines = append(lines[:20], append([]string{"..."}, lines[len(lines)-20:]...)...)
				}
				t.Logf("allocation %s (a%d) holds a claim of %s; the servers have it as %+v (%v); its operations:\n%slogged:\n%s",
					id, nums[id], v.ID, a.Alloc, err, describeOps(mine), strings.Join(lines, "\n"))
			}
		}
	}
}

// describeClaims shows a volume's claims for a failure report.
func describeClaims(v *structs.CSIVolume) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s):", v.ID, v.AccessMode)
	for kind, m := range map[string]map[string]*structs.CSIVolumeClaim{"read": v.ReadClaims, "write": v.WriteClaims, "past": v.PastClaims} {
		for id, c := range m {
			fmt.Fprintf(&b, " %s %s on %s (%s, attempts %d, next %s, error %q, note %q);", kind, id, c.NodeID, c.State,
				c.Attempts, time.Unix(0, c.NextAttempt).Format("15:04:05.000"), c.LastError, c.Note)
		}
	}
	return b.String()
}

// checkHistory checks the API clients' history, volume by volume, and on a
// violation shows the operations of the volume and writes porcupine's
// visualization.
func (s *faultSuite) checkHistory(t *testing.T, seed uint64) {
	t.Helper()
	ops := s.hist.operations()
	must.Positive(t, len(ops))
	started := time.Now()
	byVolume := claimModel.Partition(ops)
	var perVolume []string
	for _, part := range byVolume {
		vol := part[0].Input.(claimInput).Volume.ID
		granted, refused := 0, 0
		for _, op := range part {
			if op.Input.(claimInput).Kind != opClaim {
				continue
			}
			switch op.Output.(claimOutput).Outcome {
			case outOK:
				granted++
			case outRefused:
				refused++
			}
		}
		perVolume = append(perVolume, fmt.Sprintf("%s %d ops, %d claims granted, %d refused", vol, len(part), granted, refused))
		res, info := porcupine.CheckOperationsVerbose(claimModel, part, 2*time.Minute)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			t.Errorf("volume %s: the linearizability check of %d operations timed out", vol, len(part))
			continue
		}
		path := filepath.Join(os.TempDir(), fmt.Sprintf("volplane-faults-%d-%s.html", seed, vol))
		if err := porcupine.VisualizePath(claimModel, info, path); err != nil {
			t.Logf("writing the visualization: %v", err)
		}
		t.Errorf("volume %s: the history of %d operations is not linearizable against the claim rules (visualization: %s); operations by invocation:\n%s",
			vol, len(part), path, describeOps(part))
	}
	t.Logf("linearizability check of %d operations on %d volumes took %s: %s", len(ops), len(byVolume),
		time.Since(started).Round(time.Millisecond), strings.Join(perVolume, "; "))
}

// describeOps lists operations by invocation, with times in milliseconds
// since the run began.
func describeOps(ops []porcupine.Operation) string {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	var b strings.Builder
	for _, op := range sorted {
		ret := "∞"
		if op.Return != 1<<63-1 {
			ret = fmt.Sprintf("%.3f", float64(op.Return)/1e9)
		}
		fmt.Fprintf(&b, "  [%.3f, %s] client %d: %s\n", float64(op.Call)/1e9, ret, op.ClientId,
			claimModel.DescribeOperation(op.Input, op.Output))
	}
	return b.String()
}

// storageCleanTimeout bounds how long the client agents take, once every
// claim is freed, to have undone everything in the storage system: a
// machine that crashed finds its orphaned volumes on a sweep, retried
// every few seconds.
const storageCleanTimeout = 30 * time.Second

// checkCalls checks the storage system's call log: no volume published
// writable on two nodes at once, and, once the jobs are stopped and the
// claims freed, every publication and staging undone.
func (s *faultSuite) checkCalls(t *testing.T, n *nemesis) {
	t.Helper()
	var calls []devplugin.Call
	var left []string
	deadline := time.Now().Add(storageCleanTimeout)
	for {
		var err error
		calls, err = devplugin.ReadCallLog(s.stateDir)
		must.NoError(t, err)
		if left = leftInStorage(calls); len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%s after the jobs stopped and the claims were freed, the storage system still has:\n%s",
			storageCleanTimeout, strings.Join(left, "\n"))
	}
	published, problems := checkPublications(calls, n.downs)
	t.Logf("call log: %d calls, %d writable publications", len(calls), published)
	for _, p := range problems {
		vol := strings.Fields(p)[2]
		t.Errorf("%s\ncalls of the volume:\n%s", p, describeCalls(calls, vol))
	}
}

// report fails the test with every violation and problem recorded.
func (s *faultSuite) report(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.violations {
		t.Errorf("violation: %s", v)
	}
	for _, p := range s.problems {
		t.Errorf("problem: %s", p)
	}
	for _, n := range s.apiNodes {
		t.Logf("API node %s served %d node detaches (%d failed on purpose)", n.node.ID, n.detaches.Load(), n.failedDetaches.Load())
	}
}

// waitGroupFor waits for wg, failing the test after timeout.
func waitGroupFor(t *testing.T, wg *sync.WaitGroup, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("waited %s for %s", timeout, what)
	}
}
