package scheduler

import "time"

// ReschedulePolicy is how long the slot of a failed allocation waits before
// it is placed again: Delay after the first failure under the job's current
// version, doubling with each further one, up to MaxDelay. Without it a
// workload that fails at once (a missing command, a crashing task) would be
// replaced as fast as the servers can place it, and every replacement would
// claim, attach and publish its volumes only to release them again. The
// zero policy replaces at once.
type ReschedulePolicy struct {
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultReschedulePolicy is Nomad's default for service jobs: 30 s,
// doubling, at most an hour.
var DefaultReschedulePolicy = ReschedulePolicy{BaseDelay: 30 * time.Second, MaxDelay: time.Hour}

// Delay is the wait after the given number of failures (at least one). A
// MaxDelay below BaseDelay keeps the delay at BaseDelay.
func (p ReschedulePolicy) Delay(failures int) time.Duration {
	limit := max(p.MaxDelay, p.BaseDelay)
	d := max(p.BaseDelay, 0)
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
