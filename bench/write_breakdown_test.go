package bench

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestWriteBreakdown_FromMetricDifferences(t *testing.T) {
	leader, f1, f2 := &procServer{name: "s1"}, &procServer{name: "s2"}, &procServer{name: "s3"}
	before := map[*procServer]metricTotals{
		leader: {
			"volplane_raft_entry_requests{kind=register}":       {10, 30},
			"volplane_raft_entry_requests{kind=claim}":          {5, 5},
			"volplane_raft_entry_linger_seconds{kind=register}": {2, 0.002},
			"volplane_raft_leader_dispatchLog":                  {10, 10},
			"volplane_raft_commitTime":                          {10, 20},
		},
		f1: {"volplane_raft_rpc_appendEntries_storeLogs": {10, 10}},
		f2: {},
	}
	after := map[*procServer]metricTotals{
		leader: {
			// 4 entries carrying 40 registers; the claims' entries are not
			// the registers'.
			"volplane_raft_entry_requests{kind=register}":       {14, 70},
			"volplane_raft_entry_requests{kind=claim}":          {9, 50},
			"volplane_raft_entry_linger_seconds{kind=register}": {4, 0.006}, // 2 waited, 2 ms each
			"volplane_raft_leader_dispatchLog":                  {14, 16},
			"volplane_raft_commitTime":                          {14, 32},
			"volplane_raft_fsm_applyBatch":                      {4, 2}, // new since before
			// A follower's figure on the leader (from when it followed)
			// is not the leader's.
			"volplane_raft_rpc_appendEntries_storeLogs": {100, 1000},
		},
		f1: {"volplane_raft_rpc_appendEntries_storeLogs": {14, 18}},
		f2: {"volplane_raft_rpc_appendEntries_storeLogs": {4, 16}},
	}
	b := writeBreakdown(leader, before, after)
	must.Eq(t, &WriteBreakdown{
		Entries: 4, RequestsPerEntry: 10, Lingered: 0.5, LingerMs: 2,
		LeaderLogMs: 1.5, CommitMs: 3, FollowerWaitMs: 1.5, ApplyMs: 0.5,
		FollowerLogMs: 3, // (8 + 16) ms over 4 + 4 writes
	}, b)
	must.StrContains(t, b.String(), "4 entries of 10.0 registers, 50% of them lingering 2.00 ms")

	// Nothing written: no division by zero.
	must.Eq(t, &WriteBreakdown{}, writeBreakdown(leader, before, before))
}
