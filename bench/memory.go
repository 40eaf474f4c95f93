package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
)

// The memory phase: what a server's state costs, built live and restored
// from a snapshot.
const (
	// PhaseMemory registers Config.MemoryVolumes volumes on a one-server
	// cluster, measures the heap (and the process's RSS), takes a Raft
	// snapshot, restarts the server from its data dir (the snapshot is
	// restored) and measures again.
	PhaseMemory = "memory"
	// MemoryTargetRatio is the most the restored server's heap may be, as
	// a multiple of the heap of the server that built the state live.
	MemoryTargetRatio = 1.2
)

// memSample is the process's memory at one point.
type memSample struct {
	// rss is the resident set as found, before any collection forced
	// here: what an operator sees (0 where the platform does not tell).
	rss uint64
	// heapInuse is the heap in use after a full collection.
	heapInuse uint64
}

// sampleMemory reads the resident set, then collects garbage, returns
// what is free to the OS (so the next sample's RSS starts from here), and
// reads the heap in use.
func sampleMemory() memSample {
	rss := processRSS()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heapInuse: ms.HeapInuse, rss: rss}
}

// processRSS is the resident set of this process from /proc (Linux); 0
// elsewhere.
func processRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// runMemory runs the memory phase. It runs in this process, on a server of
// its own once every other phase's cluster is shut down, so the heap it
// measures (after a full GC, less the heap before the server started) is
// that server's.
func runMemory(ctx context.Context, cfg *Config, dir string, rep *Report) error {
	dataDir := filepath.Join(dir, "memory", "srv")
	n := cfg.MemoryVolumes
	// Baselines start from a collected heap whose free pages went back.
	baseline := func() memSample {
		debug.FreeOSMemory()
		return sampleMemory()
	}
	base := baseline()

	cfg.progress("memory: starting a one-server cluster and registering %d volumes, %d per request", n, cfg.ListBatch)
	live, err := startMemoryServer(ctx, cfg, dataDir)
	if err != nil {
		return err
	}
	if err := fillMemoryServer(ctx, cfg, live, n); err != nil {
		return errors.Join(err, live.Shutdown())
	}
	built := sampleMemory()
	cfg.progress("memory: taking a snapshot and restarting the server from it")
	if err := live.Raft().Snapshot().Error(); err != nil {
		return errors.Join(fmt.Errorf("taking a snapshot: %w", err), live.Shutdown())
	}
	if err := live.Shutdown(); err != nil {
		return err
	}
	// The stopped server's state stays reachable until the next server
	// starts (the metrics package keeps the latest server's gauges), so
	// both servers are measured over the heap before the first started:
	// were the stopped one's state still held, the restored figure would
	// count it too, and the target would be missed, not met, by it.
	restarted, err := startMemoryServer(ctx, cfg, dataDir)
	if err != nil {
		return err
	}
	defer restarted.Shutdown()
	last := benchVolume(int64(n)).ID
	if v, err := restarted.State().CSIVolumeByID(nil, structs.DefaultNamespace, last); err != nil || v == nil {
		return fmt.Errorf("the restarted server lacks volume %s (%v)", last, err)
	}
	if idx := restarted.Raft().Stats()["last_snapshot_index"]; idx == "0" {
		return errors.New("the restarted server has no snapshot")
	}
	restored := sampleMemory()

	liveHeap := int64(built.heapInuse) - int64(base.heapInuse)
	restoredHeap := int64(restored.heapInuse) - int64(base.heapInuse)
	add := func(name string, heap int64, rss uint64, rssBase uint64) *Result {
		res := Result{Phase: PhaseMemory, Cluster: name, Volumes: n, Concurrency: 1}
		res.HeapMB = round3(float64(heap) / (1 << 20))
		res.HeapBytesPerVolume = heap / int64(n)
		if rss > 0 && rssBase > 0 {
			res.RSSMB = round3(float64(int64(rss)-int64(rssBase)) / (1 << 20))
		}
		rep.Results = append(rep.Results, res)
		return &rep.Results[len(rep.Results)-1]
	}
	add("live", liveHeap, built.rss, base.rss)
	r := add("restored", restoredHeap, restored.rss, base.rss)
	if liveHeap > 0 {
		r.HeapRatio = round3(float64(restoredHeap) / float64(liveHeap))
	}
	pass := liveHeap > 0 && float64(restoredHeap) <= MemoryTargetRatio*float64(liveHeap)
	r.Target = fmt.Sprintf("heap <= %gx live", MemoryTargetRatio)
	r.Pass = &pass
	r.Detail = fmt.Sprintf("heap in use after a full GC, over the process's before the server started: live %.1f MB (%d B/volume), "+
		"restored from the snapshot %.1f MB (%d B/volume), %.2fx; RSS growth as found once ready: live %.1f MB, restored %.1f MB",
		float64(liveHeap)/(1<<20), liveHeap/int64(n), float64(restoredHeap)/(1<<20), restoredHeap/int64(n),
		float64(restoredHeap)/float64(max(liveHeap, 1)), rep.Results[len(rep.Results)-2].RSSMB, r.RSSMB)
	cfg.progress("memory: %s", r.Detail)
	return nil
}

// startMemoryServer starts a one-server cluster on dataDir and waits until
// it leads and has applied its barrier.
func startMemoryServer(ctx context.Context, cfg *Config, dataDir string) (*server.Server, error) {
	c := server.DefaultConfig()
	c.NodeName = "memory-srv"
	c.DataDir = dataDir
	c.RPCAddr = "127.0.0.1:0"
	c.HTTPAddr = "127.0.0.1:0"
	c.BootstrapExpect = 1
	c.RetryJoinInterval = joinInterval
	c.Logger = cfg.Logger.Named(c.NodeName)
	s, err := server.NewServer(c)
	if err != nil {
		return nil, fmt.Errorf("starting the memory phase's server: %w", err)
	}
	deadline := time.Now().Add(formTimeout)
	for {
		if s.Raft().State() == raft.Leader {
			var reply structs.CSIVolumeListResponse
			req := &structs.CSIVolumeListRequest{}
			req.PerPage = 1
			if err := s.RPC("CSIVolume.List", req, &reply); err == nil {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("the memory phase's server did not lead within %s", formTimeout), s.Shutdown())
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, errors.Join(err, s.Shutdown())
		}
	}
}

// fillMemoryServer registers the benchmark node and n volumes on s.
func fillMemoryServer(ctx context.Context, cfg *Config, s *server.Server, n int) error {
	node := benchNode()
	var nr structs.NodeUpdateResponse
	if err := s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: node}, &nr); err != nil {
		return fmt.Errorf("registering the benchmark node: %w", err)
	}
	// The node must stay up while its plugin's volumes are registered.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { heartbeat(stop, node, nr.HeartbeatTTL, s.RPC, cfg.Logger, "memory phase node") })
	defer func() {
		close(stop)
		wg.Wait()
	}()
	for first := 1; first <= n; first += cfg.ListBatch {
		if err := ctx.Err(); err != nil {
			return err
		}
		var vols []*structs.CSIVolume
		for i := first; i <= min(n, first+cfg.ListBatch-1); i++ {
			vols = append(vols, benchVolume(int64(i)))
		}
		var reply structs.CSIVolumeRegisterResponse
		if err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: vols}, &reply); err != nil {
			return fmt.Errorf("registering volumes %d to %d: %w", first, first+len(vols)-1, err)
		}
	}
	return nil
}
