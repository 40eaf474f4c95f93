package bench

import (
	"context"
	"fmt"
	"math"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/volplane/volplane/structs"
)

// noLeaderRetryFor bounds how long drive sends an op again that was
// answered "no leader".
const noLeaderRetryFor = 30 * time.Second

// drive makes ops calls of op from conc goroutines, each taking the next
// op number until none is left, and returns each call's latency (by op
// number) and the wall time from the first call to the last answer. The
// first error stops every goroutine and is returned, naming the op.
func drive(ctx context.Context, ops, conc int, op func(i int) error) ([]time.Duration, time.Duration, error) {
	samples := make([]time.Duration, ops)
	var (
		next     atomic.Int64
		stop     atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop.Store(true)
	}
	start := time.Now()
	for range min(conc, ops) {
		wg.Go(func() {
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				if i >= ops {
					return
				}
				if err := ctx.Err(); err != nil {
					fail(err)
					return
				}
				t0 := time.Now()
				region := trace.StartRegion(ctx, "bench op") // for -trace; free without it
				err := op(i)
				region.End()
				// An election while the load runs (a leader that lost its
				// quorum on a loaded machine) answers "no leader": nothing
				// was committed, and a client sends the call again. The
				// wait counts in the op's latency.
				for structs.CodeOf(err) == structs.ErrCodeNoLeader && time.Since(t0) < noLeaderRetryFor &&
					sleep(ctx, 20*time.Millisecond) == nil {
					err = op(i)
				}
				samples[i] = time.Since(t0)
				if err != nil {
					fail(fmt.Errorf("op %d of %d: %w", i+1, ops, err))
					return
				}
			}
		})
	}
	wg.Wait()
	return samples, time.Since(start), firstErr
}

// series accumulates the samples and wall time of one measured level over
// several rounds, each round's throughput, and the heap allocation and
// garbage collections of the process during its rounds.
type series struct {
	samples []time.Duration
	wall    time.Duration
	rates   []float64
	gc      gcCounts
}

// gcCounts are the process's heap bytes allocated and GC cycles ended,
// cumulative (readGC) or over a window (sub). The benchmark's process
// holds both sides, so what a side's rounds allocate decides how many
// collections land in them: their mark phases are most of the slowest
// 1% of calls with one caller.
type gcCounts struct {
	allocBytes, cycles uint64
}

var gcMetrics = []string{"/gc/heap/allocs:bytes", "/gc/cycles/total:gc-cycles"}

// readGC reads the process's gcCounts so far.
func readGC() gcCounts {
	samples := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var c gcCounts
	if samples[0].Value.Kind() == metrics.KindUint64 {
		c.allocBytes = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		c.cycles = samples[1].Value.Uint64()
	}
	return c
}

func (c gcCounts) sub(o gcCounts) gcCounts {
	return gcCounts{allocBytes: c.allocBytes - o.allocBytes, cycles: c.cycles - o.cycles}
}

func (c *gcCounts) add(o gcCounts) {
	c.allocBytes += o.allocBytes
	c.cycles += o.cycles
}

func (s *series) add(samples []time.Duration, wall time.Duration) {
	s.samples = append(s.samples, samples...)
	s.wall += wall
	if wall > 0 {
		s.rates = append(s.rates, float64(len(samples))/wall.Seconds())
	}
}

// pairedRatios returns, round by round, s's throughput as a share of
// base's, for the rounds both measured.
func (s *series) pairedRatios(base *series) []float64 {
	var out []float64
	for i := range min(len(s.rates), len(base.rates)) {
		if base.rates[i] > 0 {
			out = append(out, s.rates[i]/base.rates[i])
		}
	}
	return out
}

// median returns the middle of fs (the mean of the two middle ones for an
// even count), 0 for none.
func median(fs []float64) float64 {
	if len(fs) == 0 {
		return 0
	}
	sorted := slices.Clone(fs)
	slices.Sort(sorted)
	m := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[m]
	}
	return (sorted[m-1] + sorted[m]) / 2
}

// stats are the figures of a series.
type stats struct {
	ops       int
	wall      time.Duration
	opsPerSec float64
	p50, p99  time.Duration
	max       time.Duration
	// gc is the process's allocation and collections during the series'
	// rounds; zero where they were not counted.
	gc gcCounts
}

func (s *series) stats() stats {
	sorted := slices.Clone(s.samples)
	slices.Sort(sorted)
	st := stats{
		ops:  len(sorted),
		wall: s.wall,
		p50:  percentile(sorted, 0.50),
		p99:  percentile(sorted, 0.99),
		gc:   s.gc,
	}
	if len(sorted) > 0 {
		st.max = sorted[len(sorted)-1]
	}
	if s.wall > 0 {
		st.opsPerSec = float64(len(sorted)) / s.wall.Seconds()
	}
	return st
}

// percentile returns the nearest-rank q-quantile of sorted samples: the
// smallest sample with at least q of all samples at or below it. With 50
// samples, p99 is the largest one; it is never an interpolation between
// samples that no call actually took.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// splitOps divides ops into rounds chunks whose sizes differ by at most one.
func splitOps(ops, rounds int) []int {
	out := make([]int, rounds)
	for i := range out {
		out[i] = ops / rounds
		if i < ops%rounds {
			out[i]++
		}
	}
	return out
}

// sleep waits d, or until ctx ends, and then returns ctx's error.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
