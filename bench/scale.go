package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"
)

// stuckTimeout bounds the wait for the first failed release attempt of
// every stuck past claim.
const stuckTimeout = time.Minute

// runScale measures whether the cost of registering and claiming grows
// with the number of volumes. Two 3-server clusters of their own run side
// by side, the same but for their volumes: the empty one has none besides
// those the phase measures with, the loaded one cfg.ScaleVolumes more,
// cfg.ScaleStuck of which carry past claims whose node detach keeps failing,
// so their releases back off and retry all along. Registers, then claims,
// are measured with cfg.Writers callers on both clusters in cfg.ScaleRounds
// interleaved rounds, so that the disk's slow minutes hit both alike; what
// is judged is the loaded cluster's rate as a share of the empty one's in
// the same round, the median over the rounds: the disk's stalls, which
// can triple a round's time, then decide nothing.
func runScale(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	var empty, loaded *volplane
	defer func() {
		cfg.progress("scale: shutting its clusters down")
		for _, vp := range []*volplane{empty, loaded} {
			if vp != nil {
				err = errors.Join(err, vp.close())
			}
		}
	}()
	cfg.progress("scale: starting two 3-server volplane clusters, one to stay empty, one to load")
	if empty, err = startScaleCluster(ctx, cfg, dir, "scale-empty"); err != nil {
		return err
	}
	if loaded, err = startScaleCluster(ctx, cfg, dir, "scale-loaded"); err != nil {
		return err
	}
	if err := loaded.load(ctx, cfg); err != nil {
		return err
	}

	// The stuck claims' failed retries that fell within the loaded
	// cluster's timed chunks.
	failures := &loaded.agents[0].csi.nodeDetachFailures
	var regRetries, claimRetries int64
	sides := []*side{
		scaleSide(ctx, "empty", nil, nil, empty.registerChunk(ctx, cfg)),
		scaleSide(ctx, "loaded", failures, &regRetries, loaded.registerChunk(ctx, cfg)),
	}
	if err := interleave(cfg, PhaseScaleRegister, cfg.Writers, cfg.ScaleOps, cfg.ScaleRounds, sides); err != nil {
		return err
	}
	rep.addScale(PhaseScaleRegister, cfg.Writers, cfg.ScaleVolumes, &sides[0].s, &sides[1].s,
		fmt.Sprintf("%d failed retries of the stuck claims in its timed chunks", regRetries))

	total := warmupOps(cfg.Writers) + cfg.ScaleClaimOps
	var fixtures [2]*claimFixture
	for i, vp := range []*volplane{empty, loaded} {
		if fixtures[i], err = vp.setupClaims(ctx, cfg, PhaseScaleClaim+" ("+sides[i].name+")", total, 0); err != nil {
			return err
		}
	}
	sides = []*side{
		scaleSide(ctx, "empty", nil, nil, empty.claimChunk(ctx, cfg, fixtures[0])),
		scaleSide(ctx, "loaded", failures, &claimRetries, loaded.claimChunk(ctx, cfg, fixtures[1])),
	}
	if err := interleave(cfg, PhaseScaleClaim, cfg.Writers, cfg.ScaleClaimOps, cfg.ScaleRounds, sides); err != nil {
		return err
	}
	rep.addScale(PhaseScaleClaim, cfg.Writers, cfg.ScaleVolumes, &sides[0].s, &sides[1].s,
		fmt.Sprintf("%d failed retries of the stuck claims in its timed chunks", claimRetries))
	for _, vp := range []*volplane{empty, loaded} {
		if !vp.stillLeader() {
			rep.Notes = append(rep.Notes, "a volplane leader changed during the scale phase: figures are skewed")
		}
	}
	return nil
}

// startScaleCluster starts a cluster for the scale phase with the
// benchmark node (a node-only plugin: registers and claims need no agent)
// and one agent with a monolith plugin whose node detaches fail, on the
// leader. Both clusters get the same, so they differ only by volumes.
func startScaleCluster(ctx context.Context, cfg *Config, dir, name string) (_ *volplane, err error) {
	vp, err := startVolplane(ctx, cfg, filepath.Join(dir, name), name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, vp.close())
		}
	}()
	if err := vp.registerNode(); err != nil {
		return nil, err
	}
	a, err := startAgent(ctx, cfg, name+"-agent", vp.leader.RPCAddr())
	if err != nil {
		return nil, err
	}
	vp.agents = append(vp.agents, a)
	a.csi.failNodeDetach.Store(true)
	return vp, nil
}

// load registers cfg.ScaleVolumes volumes: all but cfg.ScaleStuck of the
// benchmark plugin, in batches; those of the agent's plugin, claimed by
// allocations of per_alloc jobs placed on the agent's node, which are then
// stopped. The agent fails every node detach, so each of their claims stays
// a past claim whose release backs off; load returns once each has failed
// once.
func (vp *volplane) load(ctx context.Context, cfg *Config) error {
	plain := cfg.ScaleVolumes - cfg.ScaleStuck
	cfg.progress("scale: registering %d volumes in the loaded cluster, %d per request", plain, cfg.ListBatch)
	if err := vp.registerMany(ctx, plain, cfg.ListBatch); err != nil {
		return err
	}
	vp.registered = nil
	a := vp.agents[0]
	jobs, vols := perAllocJobs("stuck", "svol", agentPlugin, cfg.ScaleStuck)
	cfg.progress("scale: registering %d more, claimed by the allocations of %d jobs, then stopped; their releases will fail",
		len(vols), len(jobs))
	if err := vp.registerVolumes(ctx, vols, cfg.ListBatch); err != nil {
		return err
	}
	if err := vp.registerJobs(ctx, jobs); err != nil {
		return err
	}
	slots, err := vp.placedSlots(ctx, jobs)
	if err != nil {
		return err
	}
	reqs := vp.claimRequests(slots)
	if _, _, err := drive(ctx, len(reqs), cfg.Writers, func(i int) error { return vp.claim(reqs[i]) }); err != nil {
		return fmt.Errorf("claiming the stuck volumes: %w", err)
	}
	if err := vp.stopJobs(ctx, jobs, len(jobs)); err != nil {
		return err
	}
	deadline := time.Now().Add(stuckTimeout)
	for a.csi.nodeDetachFailures.Load() < int64(len(slots)) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d stuck claims have had a release attempt after %s",
				a.csi.nodeDetachFailures.Load(), len(slots), stuckTimeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// scaleSide is one cluster's side of a scale level. While the loaded
// side's chunks are timed, the stuck claims' failed retries (failures) are
// added to retries.
func scaleSide(ctx context.Context, name string, failures *atomic.Int64, retries *int64,
	chunk func(n int) ([]time.Duration, time.Duration, error)) *side {
	return &side{name: name, run: func(n int) ([]time.Duration, time.Duration, error) {
		var before int64
		if failures != nil {
			before = failures.Load()
		}
		samples, wall, err := labelled(ctx, "volplane", func(context.Context) ([]time.Duration, time.Duration, error) {
			return chunk(n)
		})
		if failures != nil {
			*retries += failures.Load() - before
		}
		return samples, wall, err
	}}
}

// registerChunk returns the register side of vp: n one-volume registers
// with cfg.Writers writers, the volumes deregistered afterwards, untimed,
// so the empty cluster stays empty and the loaded one keeps its load.
func (vp *volplane) registerChunk(ctx context.Context, cfg *Config) func(n int) ([]time.Duration, time.Duration, error) {
	return func(n int) ([]time.Duration, time.Duration, error) {
		reqs := vp.registerRequests(n)
		vp.registered = nil
		samples, wall, err := drive(ctx, n, cfg.Writers, func(i int) error { return vp.register(reqs[i]) })
		if err != nil {
			return nil, 0, err
		}
		ids := make([]string, n)
		for i, r := range reqs {
			ids[i] = r.Volumes[0].ID
		}
		return samples, wall, vp.deregister(ctx, ids, cfg.ListBatch)
	}
}

// claimChunk returns the claim side of vp: n claims of fx's next slots
// with cfg.Writers claimers.
func (vp *volplane) claimChunk(ctx context.Context, cfg *Config, fx *claimFixture) func(n int) ([]time.Duration, time.Duration, error) {
	return func(n int) ([]time.Duration, time.Duration, error) {
		slots, err := fx.take(n)
		if err != nil {
			return nil, 0, err
		}
		reqs := vp.claimRequests(slots)
		return drive(ctx, n, cfg.Writers, func(i int) error { return vp.claim(reqs[i]) })
	}
}
