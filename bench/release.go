package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
)

const (
	// releaseTimeout bounds the wait for the volumes of a release to be
	// free.
	releaseTimeout = 2 * time.Minute
	// sampleInterval paces the goroutine samples and the polls of the
	// agents' counters while releases run.
	sampleInterval = 5 * time.Millisecond
	// freePollInterval paces CSIVolume.List, once the agents have seen
	// the last controller detach, until the list shows every volume free.
	freePollInterval = 10 * time.Millisecond
	// backoffWindow is how long the process's CPU is measured while the
	// releases of a stopped agent back off; idleWindow how long it is
	// measured with nothing to do, as the reference.
	backoffWindow = 2 * time.Second
	idleWindow    = time.Second
	// releaseVolumePrefix starts the IDs of the release phase's volumes,
	// so one list with that prefix shows them all.
	releaseVolumePrefix = "rvol"
)

// runRelease measures the leader's release of claims in a 3-server cluster
// of its own, with two agents each running a monolith instance of
// agentPlugin: cfg.ReleaseVolumes allocations of per_alloc jobs, spread
// over the two nodes, each claim their volume (a controller publish each);
// then every job is stopped at once, and the phase measures the time until
// every volume is free, with the process's CPU and goroutines meanwhile.
// Then the jobs are run and their volumes claimed again, one agent is
// stopped, and every job is stopped again: the process's CPU while the
// dead agent's releases back off must stay a small fraction of a core.
func runRelease(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	n := cfg.ReleaseVolumes
	cfg.progress("release: starting a 3-server volplane cluster")
	vp, err := startVolplane(ctx, cfg, filepath.Join(dir, "release"), "release")
	if err != nil {
		return err
	}
	defer func() {
		cfg.progress("release: shutting its cluster down")
		err = errors.Join(err, vp.close())
	}()
	// Agents talk to any server: the first holds its session with a
	// follower, so the leader's calls to it are forwarded one hop (it is
	// the one stopped later, and its node sorts first among the plugin's
	// controllers, so the leader tries it first and moves on); the second
	// holds its session with the leader.
	for i, s := range []*server.Server{vp.follower(), vp.leader} {
		a, err := startAgent(ctx, cfg, fmt.Sprintf("agent%d", i+1), s.RPCAddr())
		if err != nil {
			return err
		}
		vp.agents = append(vp.agents, a)
	}

	jobs, vols := perAllocJobs("release", releaseVolumePrefix, agentPlugin, n)
	cfg.progress("release: registering %d volumes of %s, %d per request (a controller validates each)", n, agentPlugin, cfg.ListBatch)
	if err := vp.registerVolumes(ctx, vols, cfg.ListBatch); err != nil {
		return err
	}
	slots, err := vp.placeAndClaim(ctx, cfg, jobs)
	if err != nil {
		return err
	}
	run, err := vp.releaseAll(ctx, cfg, jobs, slots)
	if err != nil {
		return err
	}
	rep.addRelease(n, len(jobs), perNode(vp, slots), run)
	if !vp.stillLeader() {
		rep.Notes = append(rep.Notes, "the volplane leader changed during the release phase: figures are skewed")
	}

	// The same volumes, claimed again by allocations of new jobs.
	jobs, _ = perAllocJobs("release2", releaseVolumePrefix, agentPlugin, n)
	if slots, err = vp.placeAndClaim(ctx, cfg, jobs); err != nil {
		return err
	}
	down, err := vp.releaseAgentDown(ctx, cfg, jobs, slots)
	if err != nil {
		return err
	}
	rep.addReleaseAgentDown(down)
	return nil
}

// placeAndClaim registers jobs, waits until every allocation is placed on
// an agent's node, with both agents holding some, and has each claim its
// volume with its node's secret, cfg.Writers at once, as the agents would.
func (vp *volplane) placeAndClaim(ctx context.Context, cfg *Config, jobs []*structs.Job) ([]claimSlot, error) {
	cfg.progress("release: registering %d per_alloc jobs and waiting for their allocations to be placed", len(jobs))
	if err := vp.registerJobs(ctx, jobs); err != nil {
		return nil, err
	}
	slots, err := vp.placedSlots(ctx, jobs)
	if err != nil {
		return nil, err
	}
	counts := perNode(vp, slots)
	if len(slots) >= len(vp.agents) && slices.Contains(counts, 0) {
		return nil, fmt.Errorf("the placer left an agent without allocations (%v per agent): the release would not be spread", counts)
	}
	cfg.progress("release: %d allocations placed (%v per agent); claiming their volumes, %d claimers", len(slots), counts, cfg.Writers)
	reqs := vp.claimRequests(slots)
	if _, _, err := drive(ctx, len(reqs), cfg.Writers, func(i int) error { return vp.claim(reqs[i]) }); err != nil {
		return nil, fmt.Errorf("claiming the release volumes: %w", err)
	}
	stubs, err := vp.volumeStubs(releaseVolumePrefix)
	if err != nil {
		return nil, err
	}
	for _, s := range slots {
		if st := stubs[s.volumeID]; st == nil || st.CurrentWriters != 1 {
			return nil, fmt.Errorf("volume %s is not claimed after its claim", s.volumeID)
		}
	}
	return slots, nil
}

// perNode counts slots per agent, in the order of vp.agents.
func perNode(vp *volplane, slots []claimSlot) []int {
	out := make([]int, len(vp.agents))
	for _, s := range slots {
		for i, a := range vp.agents {
			if s.node == a.node {
				out[i]++
			}
		}
	}
	return out
}

// releaseRun is what one release of every volume took.
type releaseRun struct {
	// elapsed is from the first stop sent until a list shows every volume
	// free; stops the time the Job.Deregister calls took.
	elapsed, stops time.Duration
	// cpu is the process's CPU time over elapsed (cpuOK false when the
	// platform cannot tell).
	cpu   time.Duration
	cpuOK bool
	// goroutines are sampled from just before the stops: peak is the most
	// after every stop call returned, peakAll including them.
	goroutinesBefore, peak, peakAll int
	// The agents' calls during the release.
	nodeDetaches, controllerDetaches int64
	// toDetach is, per volume, the time from the first stop to its
	// controller detach, the last plugin call of its release;
	// firstNodeDetach the time from the first stop to the first node
	// detach any agent received.
	toDetach        []time.Duration
	firstNodeDetach time.Duration
	// raftEntries is what the leader's Raft log gained from the stops
	// until every volume was free: the stops, the allocations' updates
	// and the release checkpoints.
	raftEntries uint64
}

// releaseAll stops every job at once and waits until every volume of slots
// is free, sampling the process's CPU and goroutines.
func (vp *volplane) releaseAll(ctx context.Context, cfg *Config, jobs []*structs.Job, slots []claimSlot) (*releaseRun, error) {
	cfg.progress("release: waiting for the leader's Raft log to settle")
	if _, err := vp.settledIndex(ctx); err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, s := range slots {
		ids[s.volumeID] = true
	}
	var nodeBefore, ctlBefore int64
	for _, a := range vp.agents {
		nodeBefore += a.csi.nodeDetaches.Load()
		ctlBefore += a.csi.controllerDetaches.Load()
		a.csi.record()
	}
	cfg.progress("release: stopping %d jobs at once; %d claims to release", len(jobs), len(slots))

	run := &releaseRun{}
	idx0 := vp.leader.Raft().LastIndex()
	g := startGoroutines()
	u0 := markUsage()
	stopped := make(chan error, 1)
	go func() { stopped <- vp.stopJobs(ctx, jobs, len(jobs)) }()
	stopping := true
	// The stops' goroutine is waited for on every path.
	defer func() {
		if stopping {
			<-stopped
		}
	}()
	deadline := u0.at.Add(releaseTimeout)
	var lastPoll time.Time
	for {
		g.sample()
		if stopping {
			select {
			case err := <-stopped:
				stopping = false
				if err != nil {
					return nil, err
				}
				run.stops = time.Since(u0.at)
				run.peakAll, g.peak = g.peak, g.before
			default:
			}
		}
		var ctl int64
		for _, a := range vp.agents {
			ctl += a.csi.controllerDetaches.Load()
		}
		if !stopping && ctl-ctlBefore >= int64(len(slots)) && time.Since(lastPoll) >= freePollInterval {
			lastPoll = time.Now()
			free, _, err := vp.freeCount(ids)
			if err != nil {
				return nil, err
			}
			if free == len(ids) {
				break
			}
		}
		if time.Now().After(deadline) {
			free, past, _ := vp.freeCount(ids)
			return nil, fmt.Errorf("%d of %d volumes free (%d with past claims) %s after the jobs were stopped",
				free, len(ids), past, releaseTimeout)
		}
		if err := sleep(ctx, sampleInterval); err != nil {
			return nil, err
		}
	}
	u1 := markUsage()
	idx1 := vp.leader.Raft().LastIndex()
	run.raftEntries = idx1 - min(idx0, idx1)
	run.elapsed = u1.at.Sub(u0.at)
	run.cpu, run.cpuOK = u1.cpu-u0.cpu, u0.cpuOK && u1.cpuOK
	run.goroutinesBefore, run.peak = g.before, g.peak
	run.peakAll = max(run.peakAll, run.peak)
	for _, a := range vp.agents {
		run.nodeDetaches += a.csi.nodeDetaches.Load()
		run.controllerDetaches += a.csi.controllerDetaches.Load()
		detached, firstNode := a.csi.recorded()
		for _, t := range detached {
			run.toDetach = append(run.toDetach, t.Sub(u0.at))
		}
		if d := firstNode.Sub(u0.at); !firstNode.IsZero() && (run.firstNodeDetach == 0 || d < run.firstNodeDetach) {
			run.firstNodeDetach = d
		}
	}
	run.nodeDetaches -= nodeBefore
	run.controllerDetaches -= ctlBefore
	cfg.progress("release: %d volumes free %v after the stops (%v to send them)", len(ids),
		run.elapsed.Round(time.Millisecond), run.stops.Round(time.Millisecond))
	return run, nil
}

// agentDownRun is what the check with a stopped agent measured.
type agentDownRun struct {
	// backingOff is the number of claims of the stopped agent's node; up
	// the number on the other node, which were released meanwhile, in
	// upTook from the first stop.
	backingOff, up int
	upTook         time.Duration
	// window is the measured stretch after the live node's releases were
	// done; cpu the process's CPU over it, idleCPU over idleWindow before
	// anything was stopped.
	window, cpu time.Duration
	idle        time.Duration
	idleCPU     time.Duration
	cpuOK       bool
	// goroutines is the count at the window's start, peak the most in it.
	goroutines, peak int
	// raftEntries is what the leader's Raft log gained in the window: the
	// checkpoints of failed attempts.
	raftEntries uint64
	// After the window: the attempts the dead node's claims have made in
	// all, the claims never tried yet, and one's last error.
	attempts, neverTried int
	lastError            string
}

// releaseAgentDown stops the first agent, as a client that dies, then
// every job at once. Once the live agent's volumes are free, it measures
// the process's CPU and goroutines for backoffWindow while the dead
// agent's releases fail and back off, and the Raft entries written
// meanwhile, which are the failed attempts' checkpoints.
func (vp *volplane) releaseAgentDown(ctx context.Context, cfg *Config, jobs []*structs.Job, slots []claimSlot) (*agentDownRun, error) {
	dead, live := vp.agents[0], vp.agents[1]
	deadIDs, liveIDs := map[string]bool{}, map[string]bool{}
	for _, s := range slots {
		if s.node == dead.node {
			deadIDs[s.volumeID] = true
		} else {
			liveIDs[s.volumeID] = true
		}
	}
	run := &agentDownRun{backingOff: len(deadIDs), up: len(liveIDs)}
	cfg.progress("release: stopping agent %s, which holds %d of the claims", dead.name, len(deadIDs))
	if err := dead.close(); err != nil {
		return nil, fmt.Errorf("closing agent %s: %w", dead.name, err)
	}
	if _, err := vp.settledIndex(ctx); err != nil {
		return nil, err
	}
	u0 := markUsage()
	if err := sleep(ctx, idleWindow); err != nil {
		return nil, err
	}
	u1 := markUsage()
	run.idle, run.idleCPU = u1.at.Sub(u0.at), u1.cpu-u0.cpu

	// The stopped agent's allocations are reported stopped on its behalf,
	// as if its client had stopped their tasks and reported it just before
	// it died: their claims then need a node step, which fails until its
	// node is marked down. (A claim whose client never reported would
	// wait, with nothing tried, until then.)
	cfg.progress("release: stopping %d jobs at once", len(jobs))
	ctlBefore := live.csi.controllerDetaches.Load()
	start := time.Now()
	if err := vp.stopJobs(ctx, jobs, len(jobs)); err != nil {
		return nil, err
	}
	deadline := start.Add(releaseTimeout)
	for {
		if live.csi.controllerDetaches.Load()-ctlBefore >= int64(len(liveIDs)) {
			free, _, err := vp.freeCount(liveIDs)
			if err != nil {
				return nil, err
			}
			if free == len(liveIDs) {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the live agent's %d volumes are not free %s after the jobs were stopped", len(liveIDs), releaseTimeout)
		}
		if err := sleep(ctx, freePollInterval); err != nil {
			return nil, err
		}
	}
	run.upTook = time.Since(start)

	cfg.progress("release: %s's %d volumes free after %v; measuring the process for %v while %s's %d releases back off",
		live.name, len(liveIDs), run.upTook.Round(time.Millisecond), backoffWindow, dead.name, len(deadIDs))
	idx0 := vp.leader.Raft().LastIndex()
	g := startGoroutines()
	w0 := markUsage()
	for time.Since(w0.at) < backoffWindow {
		g.sample()
		if err := sleep(ctx, sampleInterval); err != nil {
			return nil, err
		}
	}
	w1 := markUsage()
	idx1 := vp.leader.Raft().LastIndex()
	run.window, run.cpu, run.cpuOK = w1.at.Sub(w0.at), w1.cpu-w0.cpu, u0.cpuOK && w1.cpuOK
	run.goroutines, run.peak = g.before, g.peak
	run.raftEntries = idx1 - min(idx0, idx1)

	// Every claim of the dead node must still be there: its node step
	// cannot have succeeded. Its attempts so far are reported.
	free, _, err := vp.freeCount(deadIDs)
	if err != nil {
		return nil, err
	}
	if free > 0 {
		return nil, fmt.Errorf("%d volumes of the stopped agent %s were freed: their node step cannot have succeeded", free, dead.name)
	}
	for id := range deadIDs {
		var reply structs.CSIVolumeGetResponse
		if err := vp.call("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: id}, &reply); err != nil {
			return nil, fmt.Errorf("reading volume %s: %w", id, err)
		}
		if reply.Volume == nil {
			return nil, fmt.Errorf("volume %s is gone", id)
		}
		for _, c := range reply.Volume.PastClaims {
			run.attempts += c.Attempts
			if c.Attempts == 0 {
				run.neverTried++
			}
			if run.lastError == "" {
				run.lastError = c.LastError
			}
		}
	}
	return run, nil
}

// volumeStubs lists the volumes whose IDs start with prefix, by ID.
func (vp *volplane) volumeStubs(prefix string) (map[string]*structs.CSIVolListStub, error) {
	var reply structs.CSIVolumeListResponse
	req := &structs.CSIVolumeListRequest{QueryOptions: structs.QueryOptions{Prefix: prefix}}
	if err := vp.call("CSIVolume.List", req, &reply); err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	out := make(map[string]*structs.CSIVolListStub, len(reply.Volumes))
	for _, s := range reply.Volumes {
		out[s.ID] = s
	}
	return out, nil
}

// freeCount lists the release volumes and counts those of ids that are
// free (no read, write or past claim) and those with past claims.
func (vp *volplane) freeCount(ids map[string]bool) (free, past int, err error) {
	stubs, err := vp.volumeStubs(releaseVolumePrefix)
	if err != nil {
		return 0, 0, err
	}
	for id := range ids {
		s := stubs[id]
		switch {
		case s == nil:
			return 0, 0, fmt.Errorf("volume %s is gone", id)
		case s.PastClaims > 0:
			past++
		case s.CurrentReaders == 0 && s.CurrentWriters == 0:
			free++
		}
	}
	return free, past, nil
}

// usageMark is the process's CPU time at one moment.
type usageMark struct {
	at    time.Time
	cpu   time.Duration
	cpuOK bool
}

func markUsage() usageMark {
	cpu, ok := processCPU()
	return usageMark{at: time.Now(), cpu: cpu, cpuOK: ok}
}

// goroutineSamples tracks the most goroutines the process ran since it
// started.
type goroutineSamples struct{ before, peak int }

func startGoroutines() *goroutineSamples {
	n := runtime.NumGoroutine()
	return &goroutineSamples{before: n, peak: n}
}

func (g *goroutineSamples) sample() { g.peak = max(g.peak, runtime.NumGoroutine()) }
