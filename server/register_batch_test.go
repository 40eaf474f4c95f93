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
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return leader.raft.AppliedIndex() == leader.raft.LastIndex(), fmt.Errorf("raft log not settled")
	})
	before := leader.raft.LastIndex()

	// Hold the first entry until every other register is queued behind it.
	write := leader.registers.groupCommit.write
	gate := make(chan struct{})
	var once sync.Once
	leader.registers.groupCommit.write = func(items []*pendingRegister) []error {
		once.Do(func() { <-gate })
		return write(items)
	}

	indexes := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half through a follower, which forwards to the leader.
			s := leader
			if i%2 == 1 {
				s = followers(servers, leader)[0]
			}
			req := &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{namedVolume(fmt.Sprintf("grp[%d]", i))}}
			req.AuthToken = token
			var resp structs.CSIVolumeRegisterResponse
			errs[i] = s.RPC("CSIVolume.Register", req, &resp)
			indexes[i] = resp.Index
		}()
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		leader.registers.mu.Lock()
		defer leader.registers.mu.Unlock()
		return len(leader.registers.pending) == n-1, fmt.Errorf("%d registers queued", len(leader.registers.pending))
	})
	close(gate)
	wg.Wait()

	counts := map[uint64]int{}
	for i := range n {
		must.NoError(t, errs[i], must.Sprintf("register %d", i))
		v := getVolume(t, leader, fmt.Sprintf("grp[%d]", i), false)
		must.Eq(t, indexes[i], v.CreateIndex, must.Sprintf("register %d answers the index that wrote its volume", i))
		counts[indexes[i]]++
	}

	var singles, batches, batched int
	for idx := before + 1; idx <= leader.raft.LastIndex(); idx++ {
		var l raft.Log
		must.NoError(t, leader.raftStore.bolt.GetLog(idx, &l))
		if l.Type != raft.LogCommand {
			continue
		}
		must.False(t, bytes.Contains(l.Data, []byte(token)), must.Sprintf("entry %d holds the caller's token", idx))
		switch structs.MessageType(l.Data[0]) {
		case structs.CSIVolumeRegisterRequestType:
			singles++
			must.Eq(t, 1, counts[idx])
		case structs.CSIVolumeRegisterBatchRequestType:
			var b structs.CSIVolumeRegisterBatchRequest
			must.NoError(t, structs.Decode(l.Data[1:], &b))
			batches++
			batched += len(b.Requests)
			must.Eq(t, len(b.Requests), counts[idx])
		}
	}
	t.Logf("%d registers: %d single entries, %d batch entries carrying %d requests", n, singles, batches, batched)
	must.Eq(t, n, singles+batched)
	must.Eq(t, 1, singles, must.Sprint("the held first register is alone"))
	must.Eq(t, 1, batches, must.Sprint("the others share one entry"))
}
