//go:build !unix

package bench

import (
	"runtime/metrics"
	"time"
)

// processCPU is the Go runtime's estimate of the CPU time the process has
// used so far (busy minus idle), where getrusage is not available.
func processCPU() (time.Duration, bool) {
	s := []metrics.Sample{{Name: "/cpu/classes/total:cpu-seconds"}, {Name: "/cpu/classes/idle:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 || s[1].Value.Kind() != metrics.KindFloat64 {
		return 0, false
	}
	return time.Duration((s[0].Value.Float64() - s[1].Value.Float64()) * float64(time.Second)), true
}
