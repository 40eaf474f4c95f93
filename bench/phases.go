package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"time"
)

// runRegister measures one-volume registrations against baseline applies of
// the same size, first with one writer, then with cfg.Writers. Each level
// runs in cfg.Rounds rounds of a baseline chunk and a volplane chunk (and,
// with cfg.Breakdown, a chunk of raw applies on the volplane leader), the
// order rotating between rounds.
func runRegister(ctx context.Context, cfg *Config, vp *volplane, base *baseline, rep *Report) error {
	levels := []struct{ writers, ops int }{{1, cfg.SerialOps}, {cfg.Writers, cfg.Ops}}
	for _, lv := range levels {
		baseChunk := func(n int) ([]time.Duration, time.Duration, error) {
			return labelled(ctx, "baseline", func(ctx context.Context) ([]time.Duration, time.Duration, error) {
				return drive(ctx, n, lv.writers, func(int) error { return base.apply() })
			})
		}
		vpChunk := func(n int) ([]time.Duration, time.Duration, error) {
			reqs := vp.registerRequests(n)
			return labelled(ctx, "volplane", func(ctx context.Context) ([]time.Duration, time.Duration, error) {
				return drive(ctx, n, lv.writers, func(i int) error { return vp.register(reqs[i]) })
			})
		}

		applyChunk := func(n int) ([]time.Duration, time.Duration, error) {
			entries, err := vp.applyEntries(n)
			if err != nil {
				return nil, 0, err
			}
			return labelled(ctx, "volplane", func(ctx context.Context) ([]time.Duration, time.Duration, error) {
				return drive(ctx, n, lv.writers, func(i int) error { return vp.apply(entries[i]) })
			})
		}
		type side struct {
			name string
			s    series
			run  func(int) ([]time.Duration, time.Duration, error)
		}
		sides := []*side{{name: PhaseBaseline, run: baseChunk}, {name: PhaseRegister, run: vpChunk}}
		if cfg.Breakdown {
			sides = append(sides, &side{name: PhaseApply, run: applyChunk})
		}

		// Unmeasured warm-up: connections dialed, pipelines and caches
		// filled, on every side.
		cfg.progress("register, %d writer(s): warming up", lv.writers)
		for _, sd := range sides {
			if _, _, err := sd.run(max(2*lv.writers, 20)); err != nil {
				return fmt.Errorf("%s warm-up: %w", sd.name, err)
			}
		}

		for r, n := range splitOps(lv.ops, cfg.Rounds) {
			for k := range sides {
				sd := sides[(r+k)%len(sides)]
				samples, wall, err := sd.run(n)
				if err != nil {
					return fmt.Errorf("%s, %d writer(s), round %d: %w", sd.name, lv.writers, r+1, err)
				}
				sd.s.add(samples, wall)
				cfg.progress("register, %d writer(s), round %d/%d: %-8s %5d ops in %v",
					lv.writers, r+1, cfg.Rounds, sd.name, n, wall.Round(time.Millisecond))
			}
		}
		var apply *stats
		if cfg.Breakdown {
			st := sides[2].s.stats()
			apply = &st
		}
		rep.addRegister(lv.writers, cfg.Writers, sides[0].s.stats(), sides[1].s.stats(), apply)
		if !vp.stillLeader() {
			rep.Notes = append(rep.Notes, fmt.Sprintf(
				"the volplane leader changed during the %d-writer level: requests were forwarded, figures are skewed", lv.writers))
		}
	}
	return nil
}

// labelled runs f with a pprof label naming the side being measured, which
// the goroutines it starts inherit.
func labelled[T, U any](ctx context.Context, side string, f func(context.Context) (T, U, error)) (t T, u U, err error) {
	pprof.Do(ctx, pprof.Labels("cluster", side), func(ctx context.Context) {
		t, u, err = f(ctx)
	})
	return t, u, err
}

// runList fills the state up to each list size, in batches of
// cfg.ListBatch volumes per request, and times cfg.ListRequests sequential
// GET /v1/volumes against the leader at each size.
func runList(ctx context.Context, cfg *Config, vp *volplane, rep *Report) error {
	if len(vp.registered) > 0 {
		cfg.progress("list: deregistering the %d volumes of the register phase", len(vp.registered))
		if err := vp.deregisterRegistered(ctx, cfg.ListBatch); err != nil {
			return err
		}
	}
	have := 0
	for _, size := range cfg.ListSizes {
		cfg.progress("list: registering volumes %d to %d, %d per request", have+1, size, cfg.ListBatch)
		if err := vp.registerMany(ctx, size-have, cfg.ListBatch); err != nil {
			return err
		}
		have = size
		// The warm-up request checks the count as well.
		got, err := vp.listVolumes(ctx, true)
		if err != nil {
			return err
		}
		if got != size {
			return fmt.Errorf("the list has %d volumes, want %d", got, size)
		}
		samples, wall, err := drive(ctx, cfg.ListRequests, 1, func(int) error {
			_, err := vp.listVolumes(ctx, false)
			return err
		})
		if err != nil {
			return fmt.Errorf("listing %d volumes: %w", size, err)
		}
		var s series
		s.add(samples, wall)
		st := s.stats()
		cfg.progress("list, %d volumes: %d requests, p50 %v", size, st.ops, st.p50)
		rep.addList(size, st)
	}
	return nil
}
