package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/structs"
)

// runRegister measures one-volume registrations against baseline applies of
// the same size, first with one writer, then with cfg.Writers. Each level
// runs in cfg.Rounds rounds of a baseline chunk and a volplane chunk (and,
// with cfg.Breakdown, a chunk of raw applies on the volplane leader), the
// order rotating between rounds.
func runRegister(ctx context.Context, cfg *Config, vp *volplane, base *baseline, rep *Report) error {
	levels := []struct{ writers, ops int }{{1, cfg.SerialOps}, {cfg.Writers, cfg.Ops}}
	for _, lv := range levels {
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
		sides := []*side{baselineSide(ctx, base, lv.writers), {name: PhaseRegister, run: vpChunk}}
		if cfg.Breakdown {
			sides = append(sides, &side{name: PhaseApply, run: applyChunk})
		}
		if err := interleave(cfg, PhaseRegister, lv.writers, lv.ops, cfg.Rounds, sides); err != nil {
			return err
		}
		var apply *stats
		if cfg.Breakdown {
			st := sides[2].s.stats()
			apply = &st
		}
		rep.addCompared(PhaseRegister, lv.writers, cfg.Writers, TargetThroughputRatio, sides[0].s.stats(), sides[1].s.stats(), apply)
		if !vp.stillLeader() {
			rep.Notes = append(rep.Notes, fmt.Sprintf(
				"the volplane leader changed during the %d-writer register level: requests were forwarded, figures are skewed", lv.writers))
		}
	}
	return nil
}

// runClaim measures CSIVolume.Claim, each claim taking a volume of its own
// for an allocation of a per_alloc group placed on the benchmark node,
// against baseline applies of the size of a claim entry, with one claimer
// and with cfg.Writers, interleaved in rounds as the register phase is.
// Then it sends cfg.RefusedClaims claims for volumes already claimed, from
// allocations of rival jobs, which the leader must refuse with max claims
// without writing to its Raft log.
func runClaim(ctx context.Context, cfg *Config, vp *volplane, base *baseline, rep *Report) error {
	levels := []struct{ claimers, ops int }{{1, cfg.ClaimSerialOps}, {cfg.Writers, cfg.ClaimOps}}
	total := 0
	for _, lv := range levels {
		total += warmupOps(lv.claimers) + lv.ops
	}
	fx, err := vp.setupClaims(ctx, cfg, PhaseClaim, total, cfg.RefusedClaims)
	if err != nil {
		return err
	}
	entryBytes, err := vp.claimEntryBytes(fx.slots[len(fx.slots)-1])
	if err != nil {
		return err
	}
	rep.ClaimEntryBytes, rep.ClaimJobs, rep.ClaimAllocs = entryBytes, fx.jobs, fx.allocs
	base.setEntryBytes(entryBytes)

	for _, lv := range levels {
		vpChunk := func(n int) ([]time.Duration, time.Duration, error) {
			slots, err := fx.take(n)
			if err != nil {
				return nil, 0, err
			}
			reqs := vp.claimRequests(slots)
			return labelled(ctx, "volplane", func(ctx context.Context) ([]time.Duration, time.Duration, error) {
				return drive(ctx, n, lv.claimers, func(i int) error { return vp.claim(reqs[i]) })
			})
		}
		sides := []*side{baselineSide(ctx, base, lv.claimers), {name: PhaseClaim, run: vpChunk}}
		if err := interleave(cfg, PhaseClaim, lv.claimers, lv.ops, cfg.Rounds, sides); err != nil {
			return err
		}
		rep.addCompared(PhaseClaim, lv.claimers, cfg.Writers, ClaimTargetThroughputRatio, sides[0].s.stats(), sides[1].s.stats(), nil)
		if !vp.stillLeader() {
			rep.Notes = append(rep.Notes, fmt.Sprintf(
				"the volplane leader changed during the %d-claimer claim level: requests were forwarded, figures are skewed", lv.claimers))
		}
	}
	return runRefused(ctx, cfg, vp, fx, rep)
}

// runRefused sends the rivals' claims, each for a volume a measured claim
// took, and counts the entries the leader's Raft log gained from before
// the first to after the last, once it has settled on both ends.
func runRefused(ctx context.Context, cfg *Config, vp *volplane, fx *claimFixture, rep *Report) error {
	n := len(fx.rivals)
	cfg.progress("claim-refused: waiting for the leader's Raft log to settle")
	before, err := vp.settledIndex(ctx)
	if err != nil {
		return err
	}
	reqs := vp.claimRequests(fx.rivals)
	samples, wall, err := labelled(ctx, "volplane", func(ctx context.Context) ([]time.Duration, time.Duration, error) {
		return drive(ctx, n, cfg.Writers, func(i int) error {
			err := vp.claim(reqs[i])
			switch structs.CodeOf(err) {
			case structs.ErrCodeMaxClaims:
				return nil
			case "":
				return fmt.Errorf("volume %s: the claim of rival allocation %s was granted: the volume has two writers",
					reqs[i].VolumeID, reqs[i].Claim.AllocationID)
			}
			return fmt.Errorf("volume %s: the claim of rival allocation %s was refused, but not for max claims: %w",
				reqs[i].VolumeID, reqs[i].Claim.AllocationID, err)
		})
	})
	if err != nil {
		return fmt.Errorf("refused claims: %w", err)
	}
	// Settling again counts an entry a refusal might cause later, say a
	// placer pass it woke, as well as one it wrote.
	after, err := vp.settledIndex(ctx)
	if err != nil {
		return err
	}
	var s series
	s.add(samples, wall)
	st := s.stats()
	cfg.progress("claim-refused, %d claimer(s): %d claims refused in %v, Raft index %d before, %d after",
		cfg.Writers, n, wall.Round(time.Millisecond), before, after)
	rep.addRefused(cfg.Writers, st, before, after)
	return nil
}

// side is one cluster's part of an interleaved level: run makes n calls at
// the level's concurrency and returns each one's latency and the wall time.
type side struct {
	name string
	s    series
	run  func(n int) ([]time.Duration, time.Duration, error)
}

// baselineSide is the side of raft.Apply on the baseline cluster, with conc
// concurrent appliers.
func baselineSide(ctx context.Context, base *baseline, conc int) *side {
	return &side{name: PhaseBaseline, run: func(n int) ([]time.Duration, time.Duration, error) {
		// A leader that lost its lead between two runs (a node starved of
		// CPU by the other side's load missed its heartbeats) is replaced
		// before the run, outside its timing.
		if base.leader.State() != raft.Leader {
			if err := base.waitForLeader(ctx); err != nil {
				return nil, 0, err
			}
		}
		return labelled(ctx, "baseline", func(ctx context.Context) ([]time.Duration, time.Duration, error) {
			return drive(ctx, n, conc, func(int) error { return base.apply() })
		})
	}}
}

// warmupOps is the number of unmeasured calls each side makes before a
// level with conc concurrent callers.
func warmupOps(conc int) int { return max(2*conc, 20) }

// interleave runs one level of phase: an unmeasured warm-up on every side
// (connections dialed, pipelines and caches filled), then ops calls on each
// side in rounds rounds, every round running each side once, the order
// rotating between rounds, so that a slow minute of the disk hits every
// side alike. Each side's series holds its measured calls, round by round.
func interleave(cfg *Config, phase string, conc, ops, rounds int, sides []*side) error {
	cfg.progress("%s, %d caller(s): warming up", phase, conc)
	for _, sd := range sides {
		if _, _, err := sd.run(warmupOps(conc)); err != nil {
			return fmt.Errorf("%s warm-up: %w", sd.name, err)
		}
	}
	for r, n := range splitOps(ops, rounds) {
		for k := range sides {
			sd := sides[(r+k)%len(sides)]
			before := readGC()
			samples, wall, err := sd.run(n)
			if err != nil {
				return fmt.Errorf("%s, %d caller(s), round %d: %w", sd.name, conc, r+1, err)
			}
			sd.s.gc.add(readGC().sub(before))
			sd.s.add(samples, wall)
			cfg.progress("%s, %d caller(s), round %d/%d: %-8s %5d ops in %v",
				phase, conc, r+1, rounds, sd.name, n, wall.Round(time.Millisecond))
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
