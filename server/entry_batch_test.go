package server

import (
	"bytes"
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

// holdFirstEntry makes b's first write wait until the test calls the
// function it returns, which waits until n-1 more requests are queued
// behind that write and lets it go: they then share the next entry.
func holdFirstEntry(t *testing.T, b *entryBatcher, n int) (release func()) {
	write := b.groupCommit.write
	gate := make(chan struct{})
	var once sync.Once
	b.groupCommit.write = func(items []*pendingEntry) []error {
		once.Do(func() { <-gate })
		return write(items)
	}
	return func() {
		t.Helper()
		defer close(gate)
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.pending) == n-1, fmt.Errorf("%d requests queued", len(b.pending))
		})
	}
}

// entriesSince counts the leader's log entries of type single and batch
// after index before, checking that each carries as many requests as
// callers were answered with its index (perIndex), and that none holds
// secret.
func entriesSince(t *testing.T, s *Server, before uint64, single, batch structs.MessageType, perIndex map[uint64]int, secret string) (singles, batches, batched int) {
	t.Helper()
	for idx := before + 1; idx <= s.raft.LastIndex(); idx++ {
		var l raft.Log
		must.NoError(t, s.raftStore.logs.GetLog(idx, &l))
		if l.Type != raft.LogCommand {
			continue
		}
		must.False(t, bytes.Contains(l.Data, []byte(secret)), must.Sprintf("entry %d holds a caller's token", idx))
		switch structs.MessageType(l.Data[0]) {
		case single:
			singles++
			must.Eq(t, 1, perIndex[idx], must.Sprintf("callers answered with index %d", idx))
		case batch:
			var b structs.EntryBatchRequest
			must.NoError(t, structs.Decode(l.Data[1:], &b))
			batches++
			batched += len(b.Requests)
			must.Eq(t, len(b.Requests), perIndex[idx], must.Sprintf("callers answered with index %d", idx))
		}
	}
	return singles, batches, batched
}

func settled(t *testing.T, s *Server) uint64 {
	t.Helper()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return s.raft.AppliedIndex() == s.raft.LastIndex(), fmt.Errorf("raft log not settled")
	})
	return s.raft.LastIndex()
}

// TestRegister_ConcurrentRegistersShareEntries: registers that arrive
// while one is being committed go out together in one batch entry, each
// caller answered with the index of the entry that carried its volume;
// the callers' tokens stay out of the log; a lone register is the single
// entry it always was.
func TestRegister_ConcurrentRegistersShareEntries(t *testing.T) {
	const n = 24
	const token = "a-token-that-must-not-be-logged"
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	connectAgent(t, leader, mock.NodeWithController("dev"), &agentEndpoint{})
	before := settled(t, leader)
	// Half through a follower, which forwards to the leader.
	indexes := registerHeld(t, leader, n, "grp", token, func(i int) *Server {
		if i%2 == 1 {
			return followers(servers, leader)[0]
		}
		return leader
	})

	perIndex := map[uint64]int{}
	for i := range n {
		v := getVolume(t, leader, fmt.Sprintf("grp[%d]", i), false)
		must.Eq(t, indexes[i], v.CreateIndex, must.Sprintf("register %d answers the index that wrote its volume", i))
		perIndex[indexes[i]]++
	}
	singles, batches, batched := entriesSince(t, leader, before,
		structs.CSIVolumeRegisterRequestType, structs.CSIVolumeRegisterBatchRequestType, perIndex, token)
	t.Logf("%d registers: %d single entries, %d batch entries carrying %d requests", n, singles, batches, batched)
	must.Eq(t, n, singles+batched)
	must.Eq(t, 1, singles, must.Sprint("the held first register is alone"))
	must.Eq(t, 1, batches, must.Sprint("the others share one entry"))
}

// TestClaim_ConcurrentClaimsShareEntries: claims of different volumes
// that arrive while one is being committed share the next entry; each
// claimant is answered with its claim's index and its claim is in the
// state; a claim refused by the FSM in a batch does not refuse the others
// (the FSM tests cover that; here every claim is valid).
func TestClaim_ConcurrentClaimsShareEntries(t *testing.T) {
	const n = 12
	servers := TestCluster(t, 1, nil)
	leader := WaitForLeader(t, servers...)
	node := mock.Node("dev") // a node-only plugin: one write per claim
	connectAgent(t, leader, node, &agentEndpoint{})
	for i := range n {
		registerVolume(t, leader, namedVolume(fmt.Sprintf("cl[%d]", i)))
	}
	req := &structs.VolumeRequest{Source: "cl", PerAlloc: true, AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, leader, volumeJob("cl", n, &structs.VolumeRequest{Source: "cl", PerAlloc: true,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	allocs := waitPlaced(t, leader, "cl", n)
	before := settled(t, leader)
	release := holdFirstEntry(t, leader.claims, n)

	var wg sync.WaitGroup
	var mu sync.Mutex
	indexes := map[string]uint64{}
	errs := map[string]error{}
	for _, a := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := claimFor(t, leader, node, a, req.VolumeID(a.Name), req)
			mu.Lock()
			indexes[a.ID], errs[a.ID] = resp.Index, err
			mu.Unlock()
		}()
	}
	release()
	wg.Wait()
	for _, a := range allocs {
		must.NoError(t, errs[a.ID], must.Sprintf("claim of %s", a.Name))
	}

	perIndex := map[uint64]int{}
	for _, a := range allocs {
		v := getVolume(t, leader, req.VolumeID(a.Name), false)
		must.MapContainsKey(t, v.WriteClaims, a.ID)
		must.Eq(t, indexes[a.ID], v.ModifyIndex, must.Sprintf("the claim of %s answers the index that wrote it", a.Name))
		perIndex[indexes[a.ID]]++
	}
	singles, batches, batched := entriesSince(t, leader, before,
		structs.CSIVolumeClaimRequestType, structs.CSIVolumeClaimBatchRequestType, perIndex, node.SecretID)
	t.Logf("%d claims: %d single entries, %d batch entries carrying %d claims", n, singles, batches, batched)
	must.Eq(t, n, singles+batched)
	must.Eq(t, 1, singles)
	must.Eq(t, 1, batches)
}

// TestRegister_NoBatchEntriesUntilEveryServerAppliesThem: with a server
// of an older build in the configuration, one that does not announce the
// batch types, concurrent registers go out one entry each (its FSM would
// stop on a batch entry), and all succeed.
func TestRegister_NoBatchEntriesUntilEveryServerAppliesThem(t *testing.T) {
	const n = 8
	servers := TestCluster(t, 3, func(i int, c *Config) {
		if i == 2 {
			c.maxMessageType = structs.CSIVolumeCheckpointBatchRequestType
		}
	})
	leader := WaitForLeader(t, servers...)
	must.Eq(t, structs.CSIVolumeCheckpointBatchRequestType, leader.clusterMaxMessageType())
	connectAgent(t, leader, mock.NodeWithController("dev"), &agentEndpoint{})
	before := settled(t, leader)
	indexes := registerHeld(t, leader, n, "old", "", func(int) *Server { return leader })
	perIndex := map[uint64]int{}
	for _, idx := range indexes {
		perIndex[idx]++
	}
	singles, batches, _ := entriesSince(t, leader, before,
		structs.CSIVolumeRegisterRequestType, structs.CSIVolumeRegisterBatchRequestType, perIndex, "no-token")
	must.Eq(t, n, singles)
	must.Zero(t, batches)
}

// registerHeld registers n volumes named prefix[i] at once, register i
// through via(i) with the token, while the leader's first register entry is
// held until the rest are queued (holdFirstEntry); it checks that each
// succeeds and returns the index each was answered with.
func registerHeld(t *testing.T, leader *Server, n int, prefix, token string, via func(i int) *Server) []uint64 {
	t.Helper()
	release := holdFirstEntry(t, leader.registers, n)
	indexes := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{namedVolume(fmt.Sprintf("%s[%d]", prefix, i))}}
			req.AuthToken = token
			var resp structs.CSIVolumeRegisterResponse
			errs[i] = via(i).RPC("CSIVolume.Register", req, &resp)
			indexes[i] = resp.Index
		}()
	}
	release()
	wg.Wait()
	for i, err := range errs {
		must.NoError(t, err, must.Sprintf("register %d", i))
	}
	return indexes
}
