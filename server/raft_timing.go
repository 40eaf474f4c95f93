package server

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Raft's timing at raft_multiplier 1, tuned for servers on one LAN. Raft's
// own defaults (1 s heartbeat and election timeouts) put the first write
// after a leader dies 1.7–2.5 s away on loopback; at 300 ms a follower
// notices a dead leader within 300–600 ms and the cluster writes again
// within about a second (the failover bench phase measures it), while a
// scheduling stall of a loaded 2-core machine (tens of ms) stays well
// below the timeouts. The leader lease equals the heartbeat timeout
// rather than raft's half of it: it decides only how soon a leader that
// cannot reach a quorum steps down, and a short one makes leaders step
// down on a stall. Across a WAN, or on machines that stall for longer,
// raise raft_multiplier (as Nomad's: 1 for LAN, 5 Nomad's suggestion for
// production on shared hardware, up to 10).
const (
	baseRaftHeartbeatTimeout   = 300 * time.Millisecond
	baseRaftElectionTimeout    = 300 * time.Millisecond
	baseRaftLeaderLeaseTimeout = 300 * time.Millisecond
	// The commit timeout is how often an idle leader sends each follower
	// an append, which is how a follower learns that the entries it holds
	// are committed and applies them (a heartbeat does not carry the
	// commit index). Raft's 50 ms left followers 50-100 ms behind after
	// every lone write: their blocking queries woke that late, and a
	// default read on a follower right after a write waited for it (see
	// Server.followerReadWait). At 10 ms an idle leader sends each
	// follower 65-100 empty appends a second, 3-5 KB/s of loopback or
	// LAN traffic.
	baseRaftCommitTimeout = 10 * time.Millisecond

	// MinRaftMultiplier and MaxRaftMultiplier bound raft_multiplier, as
	// Nomad's.
	MinRaftMultiplier = 1
	MaxRaftMultiplier = 10
)

// ValidRaftMultiplier checks a raft_multiplier setting, with Nomad's
// message.
func ValidRaftMultiplier(m int) error {
	if m < MinRaftMultiplier || m > MaxRaftMultiplier {
		return fmt.Errorf("raft_multiplier cannot be %d. Must be between %d and %d", m, MinRaftMultiplier, MaxRaftMultiplier)
	}
	return nil
}

// SetRaftMultiplier sets rc's heartbeat, election, leader-lease and commit
// timeouts to the base timings times m, as Nomad's raft_multiplier does.
func SetRaftMultiplier(rc *raft.Config, m int) error {
	if err := ValidRaftMultiplier(m); err != nil {
		return err
	}
	d := time.Duration(m)
	rc.HeartbeatTimeout = baseRaftHeartbeatTimeout * d
	rc.ElectionTimeout = baseRaftElectionTimeout * d
	rc.LeaderLeaseTimeout = baseRaftLeaderLeaseTimeout * d
	rc.CommitTimeout = baseRaftCommitTimeout * d
	return nil
}
