package bench

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
)

// TestBaselineSide_FollowsANewLeader: a run of the bare raft side after its
// leader lost the lead (as a node starved of CPU by another side's load
// does) applies through the new leader instead of failing with "node is
// not the leader".
func TestBaselineSide_FollowsANewLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Logger = hclog.NewNullLogger()
	base, err := startBaseline(ctx, &cfg, t.TempDir(), 100)
	must.NoError(t, err)
	t.Cleanup(func() { _ = base.close() })
	sd := baselineSide(ctx, base, 4)
	_, _, err = sd.run(20)
	must.NoError(t, err)

	old := base.leader
	must.NoError(t, old.LeadershipTransfer().Error())
	_, _, err = sd.run(20)
	must.NoError(t, err)
	must.True(t, old != base.leader, must.Sprint("the side applied through the old leader"))
}
