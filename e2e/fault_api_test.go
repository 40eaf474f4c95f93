package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// The API clients of the fault suite: nodes the test registers itself,
// whose allocations it claims volumes for over the RPC port exactly as a
// client agent does (CSIVolume.Claim with the node's secret), and the
// workers that compete for the claims.

// apiPlugin is the plugin of the volumes the API clients claim. Only the
// API nodes run it (a node-only instance each), so the placer puts the API
// jobs on them and no client agent ever claims those volumes: every claim
// of them is in the history.
const apiPlugin = "api"

// apiRPCTimeout bounds one call of an API client: long enough to ride out
// an election (a follower holds a write up to 5s waiting for a leader), so
// that most calls during faults still get a definite answer.
const apiRPCTimeout = 8 * time.Second

// apiNode is one node of the API clients. It registers, heartbeats to a
// running server (moving on when one fails), reports its allocations
// complete once the servers stop them, as a client whose tasks exit, and
// serves the servers' node detaches over its session. It publishes
// nothing (its claims are only claims), so a detach has nothing to undo;
// but a detach for an allocation whose stop was never asked for means the
// servers released a live claim, which is a violation.
type apiNode struct {
	node  *structs.Node
	pool  *rpc.ConnPool
	suite *faultSuite

	mu     sync.Mutex
	server string     // the server it talks to now
	rng    *rand.Rand // decides which detaches fail while faulting

	detaches, failedDetaches atomic.Int64
}

// apiNodeCSI is an API node's ClientCSI endpoint. Its exported methods are
// exactly the net/rpc methods.
type apiNodeCSI struct{ n *apiNode }

func (e apiNodeCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	e.n.detaches.Add(1)
	if !e.n.suite.stopAsked(args.AllocID) {
		e.n.suite.violation("node detach of volume %q for allocation %q on API node %s, whose stop was never asked for: the servers released a live claim",
			args.VolumeID, args.AllocID, e.n.node.ID)
	}
	// While the faults last, the node's storage is unreliable too: some
	// detaches fail (the release backs off and retries) and some hang a
	// while. Once healed, every detach succeeds at once.
	if e.n.suite.faulting.Load() {
		e.n.mu.Lock()
		roll := e.n.rng.IntN(8)
		hang := time.Duration(500+e.n.rng.IntN(1500)) * time.Millisecond
		e.n.mu.Unlock()
		switch roll {
		case 0, 1:
			e.n.failedDetaches.Add(1)
			return structs.NewError(structs.ErrCodeRetryable, "API node %s: the storage is busy (injected)", e.n.node.ID)
		case 2:
			time.Sleep(hang)
		}
	}
	return nil
}

// startAPINode registers a node with a node-only instance of apiPlugin and
// keeps it ready until ctx ends.
func (s *faultSuite) startAPINode(t *testing.T, ctx context.Context, wg *sync.WaitGroup, i int) *apiNode {
	t.Helper()
	node := mock.Node(apiPlugin)
	info := node.CSINodePlugins[apiPlugin]
	// At most 3 volumes a node, so that the placer (first fit by node ID)
	// spreads the allocations over the nodes and their sessions.
	info.Provider, info.NodeInfo.MaxVolumes, info.NodeInfo.RequiresNodeStageVolume = "api.e2e.volplane.io", 3, false
	n := &apiNode{node: node, suite: s, rng: s.rng(uint64(200 + i))}
	srv := netrpc.NewServer()
	if err := srv.RegisterName("ClientCSI", apiNodeCSI{n}); err != nil {
		t.Fatalf("API node: %v", err)
	}
	n.pool = rpc.NewPool(rpc.PoolConfig{
		CallTimeout: apiRPCTimeout / 2,
		AcceptStreams: func(conn net.Conn) {
			srv.ServeCodec(rpc.NewServerCodec(conn, 0))
		},
	})
	t.Cleanup(func() { n.pool.Close() })
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var resp structs.NodeUpdateResponse
		err := n.call("Node.Register", &structs.NodeRegisterRequest{Node: node}, &resp)
		return err == nil, err
	})
	wg.Add(2)
	go func() {
		defer wg.Done()
		n.heartbeat(ctx)
	}()
	go func() {
		defer wg.Done()
		n.completeStopped(ctx)
	}()
	return n
}

// call makes an RPC on the node's current server, moving to another
// running server when that one fails to answer.
func (n *apiNode) call(method string, args, reply any) error {
	n.mu.Lock()
	addr := n.server
	n.mu.Unlock()
	if addr == "" {
		addr = n.suite.anyServer()
	}
	err := n.pool.RPC(addr, method, args, reply)
	if err != nil && (rpc.IsConnError(err) || structs.CodeOf(err) == structs.ErrCodeNoLeader) {
		next := n.suite.anyServer()
		n.mu.Lock()
		n.server = next
		n.mu.Unlock()
	} else if err == nil {
		n.mu.Lock()
		n.server = addr
		n.mu.Unlock()
	}
	return err
}

// heartbeat keeps the node ready: every half second, well within the TTL,
// so that a failed server costs a heartbeat or two, never the node.
func (n *apiNode) heartbeat(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req := &structs.NodeUpdateStatusRequest{NodeID: n.node.ID, SecretID: n.node.SecretID, Status: structs.NodeStatusReady}
		_ = n.call("Node.UpdateStatus", req, &structs.NodeUpdateResponse{})
	}
}

// completeStopped watches the node's allocations (a blocking query, as a
// client agent does) and reports complete those the servers stopped.
func (n *apiNode) completeStopped(ctx context.Context) {
	var index uint64
	for ctx.Err() == nil {
		req := &structs.NodeClientAllocsRequest{NodeID: n.node.ID, SecretID: n.node.SecretID,
			QueryOptions: structs.QueryOptions{MinQueryIndex: index, MaxQueryTime: time.Second}}
		var resp structs.NodeClientAllocsResponse
		if err := n.call("Node.GetClientAllocs", req, &resp); err != nil {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		var done []*structs.AllocClientUpdate
		for _, a := range resp.Allocs {
			if a.ServerTerminal() && !a.ClientTerminal() {
				done = append(done, &structs.AllocClientUpdate{ID: a.ID, ClientStatus: structs.AllocClientStatusComplete,
					ClientDescription: "stopped by the servers"})
			}
		}
		if len(done) > 0 {
			err := n.call("Node.UpdateAlloc", &structs.NodeUpdateAllocRequest{NodeID: n.node.ID, SecretID: n.node.SecretID, Allocs: done},
				&structs.GenericResponse{})
			if err != nil {
				// Try again with the same index: they are still to report.
				sleepCtx(ctx, 200*time.Millisecond)
				continue
			}
		}
		index = resp.Index
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// apiVolumes are the volumes the API clients compete for: one or two of
// each access mode, and one whose first claim picks between two modes.
var apiVolumes = []*modelVolume{
	{ID: "api-snr", Caps: []structs.CSIVolumeAccessMode{snr}},
	{ID: "api-snw-1", Caps: []structs.CSIVolumeAccessMode{snw}},
	{ID: "api-snw-2", Caps: []structs.CSIVolumeAccessMode{snw}},
	{ID: "api-mnr", Caps: []structs.CSIVolumeAccessMode{mnr}},
	{ID: "api-mnsw", Caps: []structs.CSIVolumeAccessMode{mnsw}},
	{ID: "api-mnmw", Caps: []structs.CSIVolumeAccessMode{mnmw}},
	{ID: "api-mix", Caps: []structs.CSIVolumeAccessMode{snw, mnmw}},
}

func (v *modelVolume) volume() *structs.CSIVolume {
	vol := &structs.CSIVolume{ID: v.ID, Namespace: structs.DefaultNamespace, Name: v.ID, ExternalID: "ext-" + v.ID, PluginID: apiPlugin}
	for _, m := range v.Caps {
		vol.RequestedCapabilities = append(vol.RequestedCapabilities, &structs.CSIVolumeCapability{
			AccessMode: m, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		})
	}
	return vol
}

// apiWorker is one client of the API: round after round it registers a
// job whose one allocation asks for a volume, waits for its placement,
// claims the volume for it (retrying while the claim is refused), holds it
// a while, and stops the job. It reads volumes on the way. Every claim,
// stop and read is recorded.
type apiWorker struct {
	id    int
	suite *faultSuite
	rng   *rand.Rand
	// pool waits apiRPCTimeout for an answer; impatient gives up after
	// apiImpatience, as a client with a short deadline does, leaving its
	// call to complete, or not, after it stopped waiting.
	pool, impatient *rpc.ConnPool
	round           int
}

// apiImpatience is the deadline of an impatient call: shorter than an
// election, so calls during faults often end unknown.
const apiImpatience = 1500 * time.Millisecond

// pick chooses a volume and what the allocation asks of it.
func (w *apiWorker) pick() (*modelVolume, structs.CSIVolumeAccessMode, bool) {
	v := apiVolumes[w.rng.IntN(len(apiVolumes))]
	access := v.Caps[w.rng.IntN(len(v.Caps))]
	write := false
	switch access {
	case snw:
		write = w.rng.IntN(10) < 7
	case mnsw:
		write = w.rng.IntN(10) < 4
	case mnmw:
		write = w.rng.IntN(2) == 0
	}
	return v, access, write
}

// apiJob is a job of one allocation asking for the volume.
func apiJob(id string, v *modelVolume, access structs.CSIVolumeAccessMode, write bool) *structs.Job {
	return &structs.Job{ID: id, Namespace: structs.DefaultNamespace, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: 1,
			Volumes: map[string]*structs.VolumeRequest{"data": {
				Name: "data", Type: structs.VolumeTypeCSI, Source: v.ID, ReadOnly: !write,
				AccessMode: access, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
			}},
			Tasks: []*structs.Task{{Name: "t", Driver: structs.TaskDriverExec, Config: structs.TaskConfig{Command: "/bin/true"},
				VolumeMounts: []*structs.VolumeMount{{Volume: "data", Destination: "/data", ReadOnly: !write}}}},
		}}}
}

// call makes one RPC on a running server, one time in four impatiently.
func (w *apiWorker) call(method string, args, reply any) error {
	pool := w.pool
	if w.rng.IntN(4) == 0 {
		pool = w.impatient
	}
	return pool.RPC(w.suite.anyServer(), method, args, reply)
}

// run plays rounds until ctx ends.
func (w *apiWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		w.playRound(ctx)
	}
}

func (w *apiWorker) playRound(ctx context.Context) {
	w.round++
	v, access, write := w.pick()
	jobID := fmt.Sprintf("api-w%d-%d", w.id, w.round)
	job := apiJob(jobID, v, access, write)
	registered := false
	for try := 0; try < 5 && ctx.Err() == nil; try++ {
		err := w.call("Job.Register", &structs.JobRegisterRequest{Job: job}, &structs.JobRegisterResponse{})
		if err == nil || classify(err).Outcome == outUnknown {
			registered = true
			break
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	if !registered {
		return
	}
	alloc := w.waitAlloc(ctx, jobID, 4*time.Second)
	if alloc == nil {
		// Not placed in time (the volume is held): give up the job. An
		// allocation placed after this was never claimed by anyone.
		w.stopJob(context.Background(), jobID, nil, v)
		return
	}
	n := w.suite.hist.allocNum(alloc.ID)
	claim := claimInput{Kind: opClaim, Volume: v, Alloc: n, Write: write, Access: access}
	granted := false
	for attempt := 0; attempt < 12 && ctx.Err() == nil; attempt++ {
		out := w.claim(alloc, claim)
		w.maybeRead(v)
		if out.Outcome == outOK {
			granted = true
			break
		}
		sleepCtx(ctx, time.Duration(80+w.rng.IntN(250))*time.Millisecond)
	}
	if granted {
		hold := time.Now().Add(time.Duration(100+w.rng.IntN(900)) * time.Millisecond)
		for time.Now().Before(hold) && ctx.Err() == nil {
			if w.rng.IntN(3) == 0 {
				w.claim(alloc, claim) // a client retrying: a repeat
			}
			w.read(v)
			sleepCtx(ctx, time.Duration(50+w.rng.IntN(200))*time.Millisecond)
		}
	}
	// The stop is made even once the run ends, so that every claim is
	// released for the checks after healing.
	w.stopJob(context.Background(), jobID, alloc, v)
	if w.rng.IntN(5) == 0 {
		// A claim for a stopped allocation must be refused.
		w.claim(alloc, claim)
	}
	w.maybeRead(v)
}

// waitAlloc waits for the job's allocation to be placed.
func (w *apiWorker) waitAlloc(ctx context.Context, jobID string, timeout time.Duration) *structs.Allocation {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var resp structs.JobAllocationsResponse
		if err := w.call("Job.Allocations", &structs.JobSpecificRequest{JobID: jobID}, &resp); err == nil {
			for _, a := range resp.Allocations {
				if !a.Terminal() {
					return a
				}
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return nil
}

// claim takes the claim for the allocation on its node, as its client
// agent would, and records it.
func (w *apiWorker) claim(alloc *structs.Allocation, in claimInput) claimOutput {
	node := w.suite.apiNodeOf(alloc.NodeID)
	if node == nil {
		w.suite.violation("allocation %s was placed on node %s, which is no API node", alloc.ID, alloc.NodeID)
		return claimOutput{Outcome: outRefused}
	}
	mode := structs.CSIVolumeClaimRead
	if in.Write {
		mode = structs.CSIVolumeClaimWrite
	}
	req := &structs.CSIVolumeClaimRequest{
		VolumeID:     in.Volume.ID,
		NodeSecretID: node.node.SecretID,
		Claim: &structs.CSIVolumeClaim{
			AllocationID: alloc.ID, NodeID: node.node.ID, Mode: mode, AccessMode: in.Access,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem, ReadOnly: !in.Write,
			State: structs.CSIVolumeClaimStateTaken,
		},
		WriteRequest: structs.WriteRequest{Namespace: structs.DefaultNamespace},
	}
	call := w.suite.hist.now()
	out := classify(w.call("CSIVolume.Claim", req, &structs.CSIVolumeClaimResponse{}))
	w.suite.hist.record(w.id, in, call, out)
	return out
}

// stopJob stops the job, retrying until the servers say it happened or
// could not have. With the allocation known, each attempt is recorded.
func (w *apiWorker) stopJob(ctx context.Context, jobID string, alloc *structs.Allocation, v *modelVolume) {
	if alloc != nil {
		w.suite.askStop(alloc.ID)
	}
	for try := 0; try < 20 && ctx.Err() == nil; try++ {
		call := w.suite.hist.now()
		out := classify(w.call("Job.Deregister", &structs.JobDeregisterRequest{JobID: jobID,
			WriteRequest: structs.WriteRequest{Namespace: structs.DefaultNamespace}}, &structs.JobDeregisterResponse{}))
		if alloc != nil {
			w.suite.hist.record(w.id, claimInput{Kind: opStop, Volume: v, Alloc: w.suite.hist.allocNum(alloc.ID)}, call, out)
		}
		if out.Outcome == outOK || out.Outcome == outRefused {
			return
		}
		time.Sleep(time.Duration(100+w.rng.IntN(200)) * time.Millisecond)
	}
	w.suite.problem("worker %d could not stop job %s", w.id, jobID)
}

func (w *apiWorker) maybeRead(v *modelVolume) {
	if w.rng.IntN(3) == 0 {
		w.read(v)
	}
}

// read reads the volume through a running server (a consistent read,
// which the leader serves) and records what it showed. A read that fails
// shows nothing and is left out.
func (w *apiWorker) read(v *modelVolume) {
	call := w.suite.hist.now()
	var resp structs.CSIVolumeGetResponse
	err := w.call("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: v.ID,
		QueryOptions: structs.QueryOptions{Namespace: structs.DefaultNamespace}}, &resp)
	if err != nil {
		return
	}
	w.suite.hist.record(w.id, claimInput{Kind: opRead, Volume: v}, call, w.suite.hist.readOutput(resp.Volume))
}
