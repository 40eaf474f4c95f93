package e2e

import (
	"testing"

	"github.com/shoenig/test/must"
)

// TestE2E_PausedLeader freezes the leader (SIGSTOP) as a long GC pause or a
// stalled VM would: the others elect a new leader and take writes, and the
// old leader, thawed, steps down and catches up instead of disrupting them.
func TestE2E_PausedLeader(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3})
	testPausedLeader(t, c)
}

func testPausedLeader(t *testing.T, c Cluster) {
	leader := WaitForLeader(t, c)
	registerNodes(t, c, leader, 1, "dev")
	secret := newSecret(t)
	dir := t.TempDir()

	c.Pause(t, leader)
	frozen := leader
	leader = WaitForLeader(t, c)
	must.NotEq(t, frozen.Name(), leader.Name())
	id := "vol-while-frozen"
	res := c.CLI(t, Followers(c, leader)[0], "volume register", writeVolumeSpec(t, dir, id, secret))
	must.Zero(t, res.Code, must.Sprint(res))

	c.Resume(t, frozen)
	leader = WaitForLeader(t, c)
	// Its log lacks the write, so it cannot have won an election since.
	must.NotEq(t, frozen.Name(), leader.Name())
	checkVolume(t, "stale read on "+frozen.Name(), id, waitVolume(t, frozen, id, secret))
	// And it forwards a consistent read to the new leader.
	checkVolume(t, "read through "+frozen.Name(), id, getVolume(t, frozen, id, "", secret))
}
