package server

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestForward_UnconfirmedLeaderAnswersNoWrite: a leader cut off from both
// followers (their connections frozen) still believes it leads until Raft's
// lease check steps it down. Once the lease of its last confirmed
// leadership has run out, another leader may have been elected and written
// since, so a write sent to it is not answered from its state: a job stop
// of a job it does not know would be "not found", a definite answer, while
// the new leader may know the job. It waits for a quorum to confirm its
// leadership instead, which never comes, and the caller hears that there is
// no leader.
func TestForward_UnconfirmedLeaderAnswersNoWrite(t *testing.T) {
	servers := TestCluster(t, 3, func(i int, c *Config) {
		c.pausable = true
		c.RPCHoldTimeout = time.Second
		// Raft steps a leader without a quorum down after 2 s; the lease
		// of a confirmed leadership is half the heartbeat timeout, 1 s.
		c.RaftConfig.HeartbeatTimeout = 2 * time.Second
		c.RaftConfig.ElectionTimeout = 2 * time.Second
		c.RaftConfig.LeaderLeaseTimeout = 2 * time.Second
	})
	leader := WaitForLeader(t, servers...)
	// A first write: the leader's barrier and a confirmed leadership.
	registerNode(t, leader, "dev")

	for _, f := range followers(servers, leader) {
		f.pause()
		defer f.resume()
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		leader.leaderCheck.mu.Lock()
		defer leader.leaderCheck.mu.Unlock()
		return time.Now().After(leader.leaderCheck.leaseUntil), nil
	})
	// Still the leader as far as it knows, with no lease to answer by.
	must.Eq(t, raft.Leader, leader.raft.State())
	err := leader.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "unknown-job",
		WriteRequest: structs.WriteRequest{Namespace: structs.DefaultNamespace}}, &structs.JobDeregisterResponse{})
	must.Error(t, err)
	must.StrNotContains(t, err.Error(), "not found", must.Sprint("answered from an unconfirmed leader's state"))
	must.ErrorIs(t, err, structs.ErrNoLeader)
}

// TestForward_CommitConfirmsLeadership: a write the leader commits renews
// the lease of its confirmed leadership from the moment it was written,
// with no heartbeat round of its own, so under writes requests are not
// held for rounds; and a lease within a leadership answers without one.
func TestForward_CommitConfirmsLeadership(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	s.leaderCheck.mu.Lock()
	s.leaderCheck.leaseTerm, s.leaderCheck.leaseUntil = nil, time.Time{}
	s.leaderCheck.mu.Unlock()

	before := time.Now()
	_, _, err := s.raftApply(structs.NamespaceUpsertRequestType, &structs.NamespaceUpsertRequest{
		Namespaces: []*structs.Namespace{{Name: "lease"}}})
	must.NoError(t, err)
	s.leaderCheck.mu.Lock()
	until, term := s.leaderCheck.leaseUntil, s.leaderCheck.leaseTerm
	s.leaderCheck.mu.Unlock()
	must.True(t, until.After(before.Add(s.readLease()-time.Millisecond)),
		must.Sprintf("lease until %v, write begun %v", until, before))
	s.leaderMu.Lock()
	must.Eq[any](t, s.leaderDone, term)
	s.leaderMu.Unlock()

	// Within a lease, verify answers without a round: a nil Raft would
	// panic if it started one.
	var v leaderVerifier
	v.extend("term-1", time.Now(), time.Hour)
	must.NoError(t, v.verify(t.Context(), nil, "term-1", time.Hour))
}
