package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestCheckpointBatcher_GroupsWaitingCheckpoints: checkpoints that arrive
// while an entry is being written share the next entry, and each caller
// hears its own checkpoint's answer; a lone checkpoint is the single entry
// it always was.
func TestCheckpointBatcher_GroupsWaitingCheckpoints(t *testing.T) {
	log := newHeldLog()
	refused := structs.ErrNotFound("no such claim")
	apply := func(mt structs.MessageType, msg any) (any, uint64, error) {
		log.record(mt, msg)
		switch req := msg.(type) {
		case *structs.CSIVolumeClaimRequest:
			must.Eq(t, structs.CSIVolumeClaimRequestType, mt)
			return nil, 1, nil
		case *structs.CSIVolumeCheckpointBatchRequest:
			must.Eq(t, structs.CSIVolumeCheckpointBatchRequestType, mt)
			out := make([]error, len(req.Checkpoints))
			for i, c := range req.Checkpoints {
				if c.Claim.AllocationID == "bad" {
					out[i] = refused
				}
			}
			return out, 2, nil
		}
		return nil, 0, fmt.Errorf("unexpected %T", msg)
	}
	b := newCheckpointBatcher(apply, func(structs.MessageType) bool { return true }, 4)
	claim := func(alloc string) *structs.CSIVolumeClaim {
		return &structs.CSIVolumeClaim{AllocationID: alloc, NodeID: "n", State: structs.CSIVolumeClaimStateNodeDetached}
	}
	now := time.Unix(100, 0)

	firstDone := make(chan error, 1)
	go func() { firstDone <- b.Checkpoint("default", "v0", claim("a0"), now) }()
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return log.len() == 1, fmt.Errorf("%d entries", log.len())
	})

	// Six more arrive while the first is written: they wait, then go out
	// as a batch of 4 and one of 2 (the bound), in arrival order.
	allocs := []string{"a1", "a2", "bad", "a3", "a4", "a5"}
	errs := make([]error, len(allocs))
	var wg sync.WaitGroup
	for i, a := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Checkpoint("default", "v"+a, claim(a), now.Add(time.Duration(i)*time.Second))
		}()
		testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.pending) == i+1, fmt.Errorf("%d pending", len(b.pending))
		})
	}
	close(log.release)
	must.NoError(t, <-firstDone)
	wg.Wait()
	for i, a := range allocs {
		if a == "bad" {
			must.ErrorIs(t, errs[i], refused)
		} else {
			must.NoError(t, errs[i], must.Sprintf("checkpoint of %s", a))
		}
	}
	entries := log.msgs
	must.Len(t, 3, entries)
	_, single := entries[0].(*structs.CSIVolumeClaimRequest)
	must.True(t, single, must.Sprint("a lone checkpoint is a single claim entry"))
	b1 := entries[1].(*structs.CSIVolumeCheckpointBatchRequest)
	b2 := entries[2].(*structs.CSIVolumeCheckpointBatchRequest)
	must.Len(t, 4, b1.Checkpoints)
	must.Len(t, 2, b2.Checkpoints)
	must.Eq(t, "a1", b1.Checkpoints[0].Claim.AllocationID)
	must.Eq(t, "vbad", b1.Checkpoints[2].VolumeID)
	must.Eq(t, now.Add(3*time.Second).UnixNano(), b1.Timestamp, must.Sprint("a batch carries its latest time"))
}

// TestRelease_ManyClaimsShareRaftEntries: a job of many allocations, each
// with a volume of its own, is stopped at once; every claim is released
// (node detach, controller detach) and freed with one checkpoint each (the
// node step shares the free's write), in fewer Raft entries than claims.
func TestRelease_ManyClaimsShareRaftEntries(t *testing.T) {
	const n = 24
	servers := TestCluster(t, 1, fastRelease)
	leader := WaitForLeader(t, servers...)
	node := mock.NodeWithController("dev")
	ep := &agentEndpoint{}
	connectAgent(t, leader, node, ep)
	for i := range n {
		registerVolume(t, leader, namedVolume(fmt.Sprintf("rel[%d]", i)))
	}
	req := &structs.VolumeRequest{Source: "rel", PerAlloc: true, AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, leader, volumeJob("many", n, &structs.VolumeRequest{Source: "rel", PerAlloc: true,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	for _, a := range waitPlaced(t, leader, "many", n) {
		_, err := claimFor(t, leader, node, a, req.VolumeID(a.Name), req)
		must.NoError(t, err)
	}

	must.NoError(t, leader.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "many"}, &structs.JobDeregisterResponse{}))
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return leader.raft.AppliedIndex() == leader.raft.LastIndex(), fmt.Errorf("raft log not settled")
	})
	before := leader.raft.LastIndex()
	reportStopped(t, leader, node, "many")
	for i := range n {
		waitFreed(t, leader, fmt.Sprintf("rel[%d]", i))
	}
	must.Len(t, n, ep.callsWith("node-detach"))
	must.Len(t, n, ep.callsWith("controller-detach"))

	// Count the release checkpoints among the entries written since.
	var singles, batches, batched int
	for idx := before + 1; idx <= leader.raft.LastIndex(); idx++ {
		var l raft.Log
		must.NoError(t, leader.raftStore.logs.GetLog(idx, &l))
		if l.Type != raft.LogCommand {
			continue
		}
		switch structs.MessageType(l.Data[0]) {
		case structs.CSIVolumeClaimRequestType:
			singles++
		case structs.CSIVolumeCheckpointBatchRequestType:
			var b structs.CSIVolumeCheckpointBatchRequest
			must.NoError(t, structs.Decode(l.Data[1:], &b))
			batches++
			batched += len(b.Checkpoints)
		}
	}
	t.Logf("%d claims released: %d single checkpoint entries, %d batch entries carrying %d checkpoints", n, singles, batches, batched)
	must.Eq(t, n, singles+batched, must.Sprint("one checkpoint per claim: node-detached and free in one"))
	must.Less(t, n, singles+batches, must.Sprint("fewer entries than claims"))
}

// TestCheckpointBatcher_SinglesUntilEveryServerAppliesBatches: while some
// server does not announce the batch type, checkpoints that queue behind
// an entry still go out, each as its own claim entry.
func TestCheckpointBatcher_SinglesUntilEveryServerAppliesBatches(t *testing.T) {
	log := newHeldLog()
	apply := func(mt structs.MessageType, msg any) (any, uint64, error) {
		log.record(mt, msg)
		return nil, 1, nil
	}
	b := newCheckpointBatcher(apply, func(structs.MessageType) bool { return false }, 4)
	claim := &structs.CSIVolumeClaim{AllocationID: "a", NodeID: "n", State: structs.CSIVolumeClaimStateNodeDetached}
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Checkpoint("default", fmt.Sprintf("v%d", i), claim, time.Unix(100, 0))
		}()
		if i == 0 {
			testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
				return log.len() == 1, fmt.Errorf("%d entries", log.len())
			})
		}
	}
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.pending) == 3, fmt.Errorf("%d pending", len(b.pending))
	})
	close(log.release)
	wg.Wait()
	for i, err := range errs {
		must.NoError(t, err, must.Sprintf("checkpoint %d", i))
	}
	must.Eq(t, []structs.MessageType{structs.CSIVolumeClaimRequestType, structs.CSIVolumeClaimRequestType,
		structs.CSIVolumeClaimRequestType, structs.CSIVolumeClaimRequestType}, log.types)
}

// heldLog records the entries a test's apply function is given, and holds
// the first until release is closed, so that others queue behind it.
type heldLog struct {
	mu      sync.Mutex
	types   []structs.MessageType
	msgs    []any
	release chan struct{}
}

func newHeldLog() *heldLog { return &heldLog{release: make(chan struct{})} }

func (l *heldLog) record(mt structs.MessageType, msg any) {
	l.mu.Lock()
	l.types = append(l.types, mt)
	l.msgs = append(l.msgs, msg)
	first := len(l.msgs) == 1
	l.mu.Unlock()
	if first {
		<-l.release
	}
}

func (l *heldLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.msgs)
}
