package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/volplane/volplane/structs"
)

// WriteBreakdown is where the time of a level's registers went on the
// volplane cluster of the http-nomad phase, from the agents' own
// /v1/metrics read before and after the level: the group commit's entries
// and, per entry, Raft's figures. Only that level's registers write to the
// cluster meanwhile, so the differences are theirs.
type WriteBreakdown struct {
	// Entries is how many register entries the leader wrote, and
	// RequestsPerEntry the registers each carried on average.
	Entries          int     `json:"entries"`
	RequestsPerEntry float64 `json:"requests_per_entry"`
	// Lingered is the share of entries that waited for callers, and
	// LingerMs their mean wait.
	Lingered float64 `json:"lingered"`
	LingerMs float64 `json:"linger_ms"`
	// LeaderLogMs is the leader's write of an entry to its log
	// (raft.leader.dispatchLog), CommitMs the time from an entry's
	// dispatch to its commit (raft.commitTime), FollowerWaitMs the
	// difference, the wait for a follower once the leader's own write is
	// done (an append's round trip to the quicker follower, its log write
	// included), FollowerLogMs a follower's write of the entries an append
	// carried (raft.rpc.appendEntries.storeLogs, over both followers), and
	// ApplyMs the leader's state machine apply of a batch
	// (raft.fsm.applyBatch); all means in milliseconds. Raft's own append
	// round-trip timer is not used: it also counts the empty appends an
	// idle leader sends to pass on its commit index.
	LeaderLogMs    float64 `json:"leader_log_ms"`
	CommitMs       float64 `json:"commit_ms"`
	FollowerWaitMs float64 `json:"follower_wait_ms"`
	FollowerLogMs  float64 `json:"follower_log_ms"`
	ApplyMs        float64 `json:"apply_ms"`
}

// String is the breakdown as a sentence.
func (b *WriteBreakdown) String() string {
	return fmt.Sprintf("%d entries of %.1f registers, %.0f%% of them lingering %.2f ms for callers; per entry: "+
		"the leader's log write %.2f ms, then %.2f ms waiting for a follower (a follower's log write %.2f ms), "+
		"dispatch to commit %.2f ms, the leader's apply %.2f ms",
		b.Entries, b.RequestsPerEntry, 100*b.Lingered, b.LingerMs, b.LeaderLogMs, b.FollowerWaitMs, b.FollowerLogMs, b.CommitMs, b.ApplyMs)
}

// metricTotal is a sample's count and sum since it began.
type metricTotal struct {
	count int
	sum   float64
}

// metricTotals are one server's /v1/metrics samples by name and labels:
// name{label=value,...}, labels in order.
type metricTotals map[string]metricTotal

// clusterMetrics reads every server's /v1/metrics (Nomad's JSON form).
func (c *procCluster) clusterMetrics(ctx context.Context) (map[*procServer]metricTotals, error) {
	out := make(map[*procServer]metricTotals, len(c.servers))
	for _, s := range c.servers {
		var sum structs.MetricsSummary
		if err := c.get(ctx, s, "/v1/metrics", &sum); err != nil {
			return nil, err
		}
		t := metricTotals{}
		for _, v := range sum.Samples {
			key := v.Name
			if len(v.Labels) > 0 {
				labels := make([]string, 0, len(v.Labels))
				for _, l := range slices.Sorted(maps.Keys(v.Labels)) {
					labels = append(labels, l+"="+v.Labels[l])
				}
				key += "{" + strings.Join(labels, ",") + "}"
			}
			t[key] = metricTotal{v.Count, v.Sum}
		}
		out[s] = t
	}
	return out, nil
}

// writeBreakdown computes the breakdown of what the leader and the other
// servers counted between before and after.
func writeBreakdown(leader *procServer, before, after map[*procServer]metricTotals) *WriteBreakdown {
	// delta sums the count and sum differences of the samples whose key
	// starts with prefix on the servers for which on says so.
	delta := func(prefix string, on func(*procServer) bool) (count int, sum float64) {
		for s, a := range after {
			if !on(s) {
				continue
			}
			for key, v := range a {
				if key == prefix || strings.HasPrefix(key, prefix+"{") {
					b := before[s][key]
					count += v.count - b.count
					sum += v.sum - b.sum
				}
			}
		}
		return count, sum
	}
	isLeader := func(s *procServer) bool { return s == leader }
	isFollower := func(s *procServer) bool { return s != leader }
	mean := func(count int, sum float64) float64 {
		if count <= 0 {
			return 0
		}
		return sum / float64(count)
	}
	b := &WriteBreakdown{}
	var requests float64
	b.Entries, requests = delta(`volplane_raft_entry_requests{kind=register}`, isLeader)
	b.RequestsPerEntry = mean(b.Entries, requests)
	lingered, lingerS := delta(`volplane_raft_entry_linger_seconds{kind=register}`, isLeader)
	if b.Entries > 0 {
		b.Lingered = float64(lingered) / float64(b.Entries)
	}
	b.LingerMs = 1000 * mean(lingered, lingerS)
	b.LeaderLogMs = mean(delta("volplane_raft_leader_dispatchLog", isLeader))
	b.CommitMs = mean(delta("volplane_raft_commitTime", isLeader))
	if b.CommitMs > b.LeaderLogMs {
		b.FollowerWaitMs = b.CommitMs - b.LeaderLogMs
	}
	b.ApplyMs = mean(delta("volplane_raft_fsm_applyBatch", isLeader))
	b.FollowerLogMs = mean(delta("volplane_raft_rpc_appendEntries_storeLogs", isFollower))
	return b
}
