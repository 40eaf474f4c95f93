package bench

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		name    string
		sorted  []time.Duration
		q       float64
		want    time.Duration
		comment string
	}{
		{"empty", nil, 0.5, 0, ""},
		{"one", ms(7), 0.99, 7 * time.Millisecond, ""},
		{"p50 of 1..100", ms(hundred...), 0.50, 50 * time.Millisecond, "the 50th of 100"},
		{"p99 of 1..100", ms(hundred...), 0.99, 99 * time.Millisecond, "the 99th of 100"},
		{"p99 of 50", ms(hundred[:50]...), 0.99, 50 * time.Millisecond, "the largest: no interpolation"},
		{"p50 of 4", ms(1, 2, 3, 4), 0.50, 2 * time.Millisecond, "a sample, not the mean of 2 and 3"},
	} {
		if got := percentile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("%s: got %v, want %v %s", tc.name, got, tc.want, tc.comment)
		}
	}
}

func TestSplitOps(t *testing.T) {
	for _, tc := range []struct {
		ops, rounds int
		want        []int
	}{
		{10, 3, []int{4, 3, 3}},
		{9, 3, []int{3, 3, 3}},
		{5, 5, []int{1, 1, 1, 1, 1}},
	} {
		if got := splitOps(tc.ops, tc.rounds); !slices.Equal(got, tc.want) {
			t.Errorf("splitOps(%d, %d) = %v, want %v", tc.ops, tc.rounds, got, tc.want)
		}
	}
}

func TestDrive(t *testing.T) {
	var calls atomic.Int64
	samples, wall, err := drive(context.Background(), 100, 8, func(int) error {
		calls.Add(1)
		time.Sleep(time.Millisecond)
		return nil
	})
	if err != nil || calls.Load() != 100 || len(samples) != 100 || wall <= 0 {
		t.Fatalf("got %d calls, %d samples, wall %v, err %v", calls.Load(), len(samples), wall, err)
	}
	for i, s := range samples {
		if s < time.Millisecond {
			t.Fatalf("sample %d is %v, shorter than the call", i, s)
		}
	}

	// The first error stops every writer and names the op.
	boom := errors.New("boom")
	calls.Store(0)
	_, _, err = drive(context.Background(), 1000, 4, func(i int) error {
		calls.Add(1)
		if i == 10 {
			return boom
		}
		time.Sleep(100 * time.Microsecond)
		return nil
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "op 11 of 1000") {
		t.Errorf("got %v, want boom at op 11", err)
	}
	if n := calls.Load(); n > 100 {
		t.Errorf("%d ops ran despite the error at the 11th", n)
	}
}

func TestConfigNormalize(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults", Config{}, ""},
		{"decreasing sizes", Config{ListSizes: []int{100, 10}}, "increasing"},
		{"unknown phase", Config{Phases: []string{"write"}}, `unknown phase "write"`},
		{"more rounds than ops", Config{Ops: 2, SerialOps: 2, Rounds: 3}, "rounds"},
		{"more rounds than claims", Config{Phases: []string{PhaseClaim}, ClaimOps: 2, ClaimSerialOps: 9, Rounds: 3}, "claim counts"},
		{"rounds checked only for the phases that run", Config{Phases: []string{PhaseList}, ClaimOps: 2, Ops: 2, Rounds: 3}, ""},
		{"more refused claims than claims", Config{ClaimOps: 10, ClaimSerialOps: 10, RefusedClaims: 21}, "refused claims (21)"},
	} {
		err := tc.cfg.normalize()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error about %q", tc.name, err, tc.want)
		}
	}
}

func TestPairedRatios(t *testing.T) {
	// Each round pairs the loaded side's chunk with the empty side's; a
	// stall in one round (the third) moves the median of the ratios
	// little, where it drags the overall rate down.
	var empty, loaded series
	for _, walls := range [][2]time.Duration{{100, 110}, {100, 90}, {100, 400}, {120, 120}, {100, 100}} {
		empty.add(make([]time.Duration, 100), walls[0]*time.Millisecond)
		loaded.add(make([]time.Duration, 100), walls[1]*time.Millisecond)
	}
	ratios := loaded.pairedRatios(&empty)
	if len(ratios) != 5 {
		t.Fatalf("got %d ratios, want one per round: %v", len(ratios), ratios)
	}
	if got := median(ratios); got != 1 {
		t.Errorf("median of %v = %v, want 1 (the rounds at equal speed)", ratios, got)
	}
	if overall := loaded.stats().opsPerSec / empty.stats().opsPerSec; overall > 0.7 {
		t.Errorf("overall ratio %v: the stalled round should weigh on it", overall)
	}
	if got := median([]float64{3, 1, 2, 4}); got != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", got)
	}
	if got := median(nil); got != 0 {
		t.Errorf("median of none = %v, want 0", got)
	}
}
