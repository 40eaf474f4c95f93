package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// A write acknowledged through the leader is seen by the default read that
// follows it on every follower, which answers it from its own state after
// a read-index check: linearizable without forwarding the read.
func TestReadIndex_FollowerSeesAcknowledgedWrite(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	fs := followers(servers, leader)

	for i := 0; i < 60; i++ {
		vol := mock.CSIVolume("dev")
		index := registerVolume(t, leader, vol)
		for _, f := range fs {
			var resp structs.CSIVolumeGetResponse
			must.NoError(t, f.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: vol.ID}, &resp))
			must.NotNil(t, resp.Volume, must.Sprintf("iteration %d: follower %s missed volume acknowledged at %d", i, f.NodeID(), index))
			must.GreaterEq(t, index, resp.Index)
			must.True(t, resp.KnownLeader)

			var list structs.CSIVolumeListResponse
			must.NoError(t, f.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &list))
			must.Len(t, i+1, list.Volumes, must.Sprintf("iteration %d: follower %s list", i, f.NodeID()))
		}
	}
}

// A follower answers a default read only once the leader has confirmed
// its read index: while the leader refuses (its barrier not applied), the
// follower refuses too.
func TestReadIndex_UnconfirmedNotAnswered(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, leader, vol)
	f := followers(servers, leader)[0]

	setReady := func(ready bool) {
		leader.leaderMu.Lock()
		defer leader.leaderMu.Unlock()
		leader.leaderReady = ready
	}
	f.config.RPCHoldTimeout = 200 * time.Millisecond
	setReady(false)
	var resp structs.CSIVolumeGetResponse
	err := f.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: vol.ID}, &resp)
	must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))
	setReady(true)
	must.NoError(t, f.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: vol.ID}, &resp))
	must.NotNil(t, resp.Volume)
}

// A follower that has lost its leader (here: the two other servers are
// gone, so no leader can be elected) does not answer a default read from
// its state, which may be stale; a stale read it still answers.
func TestReadIndex_NoLeaderNoDefaultRead(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) { c.RPCHoldTimeout = 500 * time.Millisecond })
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, leader, vol)
	fs := followers(servers, leader)
	alone := fs[0]
	// It has the volume in its own state before the others go (a default
	// read could have been forwarded: see TestReadIndex_BehindFollowerForwards).
	must.NotNil(t, getVolume(t, alone, vol.ID, false))
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return getVolume(t, alone, vol.ID, true) != nil, fmt.Errorf("the follower has not applied volume %s", vol.ID)
	})

	must.NoError(t, leader.Shutdown())
	must.NoError(t, fs[1].Shutdown())

	for i := 0; i < 3; i++ {
		var resp structs.CSIVolumeGetResponse
		err := alone.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: vol.ID}, &resp)
		must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))
		must.Nil(t, resp.Volume)

		var list structs.CSIVolumeListResponse
		err = alone.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &list)
		must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))
	}
	must.NotNil(t, getVolume(t, alone, vol.ID, true), must.Sprint("?stale is answered from local state"))
}

// A blocking query on a follower waits on the follower's own state after
// the read-index check, and returns once a later write is applied there.
func TestReadIndex_BlockingQueryOnFollower(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	f := followers(servers, leader)[0]

	var list structs.CSIVolumeListResponse
	must.NoError(t, f.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &list))

	type result struct {
		resp structs.CSIVolumeListResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		req := &structs.CSIVolumeListRequest{}
		req.MinQueryIndex = list.Index
		req.MaxQueryTime = 30 * time.Second
		r.err = f.RPC("CSIVolume.List", req, &r.resp)
		done <- r
	}()
	vol := mock.CSIVolume("dev")
	index := registerVolume(t, leader, vol)
	select {
	case r := <-done:
		must.NoError(t, r.err)
		must.Len(t, 1, r.resp.Volumes)
		must.Eq(t, index, r.resp.Index)
	case <-time.After(20 * time.Second):
		t.Fatal("blocking query on the follower did not return after the index moved")
	}
}

// waitForIndex returns once the state reaches the index, and fails with a
// no-leader error when it does not in time.
func TestReadIndex_WaitForIndex(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")
	latest, err := s.State().LatestIndex()
	must.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = s.waitForIndex(ctx, latest+1)
	must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))

	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		errc <- s.waitForIndex(ctx, latest+1)
	}()
	registerVolume(t, s, mock.CSIVolume("dev"))
	must.NoError(t, <-errc)
}

// Concurrent read-index requests share heartbeat rounds and all succeed.
func TestReadIndex_ConcurrentVerify(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reply structs.ReadIndexResponse
			errs <- leader.RPC("Status.ReadIndex", &structs.GenericRequest{}, &reply)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must.NoError(t, err)
	}
	// A follower refuses it: only the leader has a read index to give.
	var reply structs.ReadIndexResponse
	err := followers(servers, leader)[0].RPC("Status.ReadIndex", &structs.GenericRequest{}, &reply)
	must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))
}

// A confirmed leadership answers without another heartbeat round while its
// lease holds, within the same leadership term only.
func TestReadIndex_Lease(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	leader.leaderMu.Lock()
	term := leader.leaderDone
	leader.leaderMu.Unlock()

	var v leaderVerifier
	ctx := context.Background()
	must.NoError(t, v.verify(ctx, leader.raft, term, time.Hour))
	must.True(t, v.leaseUntil.After(time.Now().Add(30*time.Minute)))
	// Within the lease no round runs: a nil raft would panic if one did.
	must.NoError(t, v.verify(ctx, nil, term, time.Hour))

	// Another term's lease is no lease: a round runs, and on a follower
	// it fails.
	f := followers(servers, leader)[0]
	err := v.verify(ctx, f.raft, make(chan struct{}), time.Hour)
	must.Eq(t, structs.ErrCodeNoLeader, structs.CodeOf(err), must.Sprint(err))
	// A zero lease gives none.
	var z leaderVerifier
	must.NoError(t, z.verify(ctx, leader.raft, term, 0))
	must.True(t, z.leaseUntil.IsZero())
}

// A default read on the leader is answered once a quorum has confirmed its
// leadership (or within the lease of a recent confirmation), as a
// follower's read index is: a leader deposed while it was paused, and not
// yet aware of it, does not answer from a state the new leader has passed.
func TestReadIndex_LeaderConfirmsBeforeItReads(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, leader, vol)

	// lease returns the leader's lease, and replaces it with none.
	lease := func() time.Time {
		leader.leaderCheck.mu.Lock()
		defer leader.leaderCheck.mu.Unlock()
		until := leader.leaderCheck.leaseUntil
		leader.leaderCheck.leaseUntil = time.Time{}
		return until
	}
	lease()
	before := time.Now()
	must.NotNil(t, getVolume(t, leader, vol.ID, false))
	must.True(t, lease().After(before), must.Sprint("the read was answered without a heartbeat round"))

	// A stale read needs no confirmation.
	must.NotNil(t, getVolume(t, leader, vol.ID, true))
	must.True(t, lease().IsZero())
}

// A follower that holds a write but has not yet learned it is committed
// (the leader says so with its next append, which an idle leader sends
// once per commit timeout, here a minute) does not wait for that append:
// after followerReadWait it forwards the read, which the leader answers,
// so a read right after a write sees it at once.
func TestReadIndex_BehindFollowerForwards(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		c.RaftConfig.CommitTimeout = time.Minute
		c.followerReadWait = time.Millisecond
		c.RPCHoldTimeout = 5 * time.Second
	})
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	f := followers(servers, leader)[0]

	// Another write may tell the follower of the commit first (the node's
	// own writes, say): then the case did not arise, and a new volume is
	// tried.
	behind := 0
	for i := 0; i < 20 && behind < 3; i++ {
		vol := mock.CSIVolume("dev")
		registerVolume(t, leader, vol)
		if getVolume(t, f, vol.ID, true) != nil {
			continue
		}
		behind++
		must.NotNil(t, getVolume(t, f, vol.ID, false), must.Sprint("a default read on a follower behind the leader"))
	}
	must.Positive(t, behind, must.Sprint("the follower never lagged the leader's commit"))
}

// With the production commit timeout, a follower that holds a write but has
// not yet learned it is committed waits for the leader's next append (10-20
// ms when the leader is idle) and answers the read itself, instead of
// forwarding every read of those milliseconds to the leader. A read the
// follower serves carries its own LastContact; one the leader answered
// carries the leader's zero.
func TestReadIndex_FollowerWaitsOutTheIdleAppend(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		c.RaftConfig.CommitTimeout = baseRaftCommitTimeout
	})
	leader := WaitForLeader(t, servers...)
	registerNode(t, leader, "dev")
	f := followers(servers, leader)[0]
	must.Greater(t, 2*baseRaftCommitTimeout, f.followerReadWait(), must.Sprint("the wait covers the staggered append"))

	behind, local := 0, 0
	for i := 0; i < 40 && behind < 6; i++ {
		vol := mock.CSIVolume("dev")
		registerVolume(t, leader, vol)
		if getVolume(t, f, vol.ID, true) != nil {
			continue // the follower had caught up already
		}
		behind++
		var resp structs.CSIVolumeGetResponse
		must.NoError(t, f.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: vol.ID}, &resp))
		must.NotNil(t, resp.Volume, must.Sprint("a default read on a follower behind the leader"))
		if resp.LastContact > 0 {
			local++
		}
	}
	must.Positive(t, behind, must.Sprint("the follower never lagged the leader's commit"))
	// A stall of the test machine longer than the wait forwards a read;
	// most must stay local.
	must.Greater(t, behind/2, local, must.Sprintf("%d of %d reads behind the leader were answered by the follower", local, behind))
}
