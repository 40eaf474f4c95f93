package bench

import (
	"fmt"
	"slices"
	"time"
)

// Failover phases and their targets.
const (
	// PhaseFailover is the failover of a 3-server process cluster whose
	// leader is killed (PhaseFailoverKill) or frozen (PhaseFailoverStop).
	PhaseFailover     = "failover"
	PhaseFailoverKill = "failover-kill"
	PhaseFailoverStop = "failover-stop"

	// FailoverTargetKill is the most the first successful write may take
	// after SIGKILL of the leader, and FailoverTargetStop after SIGSTOP.
	FailoverTargetKill = time.Second
	FailoverTargetStop = 2 * time.Second
)

// addFailover adds the rounds of one kind of failover, judged by their
// slowest: every round must be within target.
func (r *Report) addFailover(phase string, rounds []time.Duration, target time.Duration, multiplier int, what string) {
	if len(rounds) == 0 {
		return
	}
	sorted := slices.Clone(rounds)
	slices.Sort(sorted)
	res := Result{
		Phase: phase, Ops: len(rounds), Concurrency: 1,
		P50: Millis(sorted[len(sorted)/2]), P99: Millis(sorted[len(sorted)-1]), Max: Millis(sorted[len(sorted)-1]),
		Target: fmt.Sprintf("max <= %s", target),
	}
	var total time.Duration
	for _, d := range rounds {
		total += d
	}
	res.Elapsed = Seconds(total)
	m := multiplier
	if m == 0 {
		m = 1
	}
	res.Detail = fmt.Sprintf("%s, %d rounds, raft_multiplier %d: p50 %s, max %s", what, len(rounds), m,
		sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
	pass := sorted[len(sorted)-1] <= target
	res.Pass = &pass
	r.Results = append(r.Results, res)
}
