package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// The nemesis of the fault suite: one fault at a time, each healed before
// the next, drawn from a seeded random source, so that a seed names the
// same schedule of faults every time (which process a fault hits by role,
// "the leader", depends on the run; the log says which it was).

// faultKind is one kind of fault.
type faultKind string

const (
	// A server crashes (SIGKILL) and is restarted after a while.
	faultKillServer faultKind = "kill-server"
	// A server freezes (SIGSTOP), as in a long GC pause, then thaws.
	faultPauseServer faultKind = "pause-server"
	// A server is stopped gracefully (SIGTERM) and restarted.
	faultRestartServer faultKind = "restart-server"
	// One server crashes and another freezes: no quorum for a while.
	faultNoQuorum faultKind = "no-quorum"
	// A client agent crashes and comes back before its node is marked
	// down; its tasks and plugin keep running, as on a real node.
	faultKillClient faultKind = "kill-client"
	// A client agent freezes, shorter than the node's TTL and grace.
	faultPauseClient faultKind = "pause-client"
	// A client agent is stopped gracefully and restarted.
	faultRestartClient faultKind = "restart-client"
	// A client's machine crashes: its agent, its tasks and its plugin die,
	// for longer than the node's TTL and grace, so the servers mark it
	// down and release its claims without the node step.
	faultCrashMachine faultKind = "crash-machine"
)

// faultKinds are every kind, in a fixed order; the schedule visits them in
// rounds, shuffled by the seed, so a short run sees every kind.
var faultKinds = []faultKind{faultKillServer, faultPauseServer, faultRestartServer, faultNoQuorum,
	faultKillClient, faultPauseClient, faultRestartClient, faultCrashMachine}

// fault is one planned fault.
type fault struct {
	Kind faultKind
	// Leader: a server fault hits the leader (else a follower, Pick among
	// them); a client fault hits client Pick.
	Leader bool
	Pick   int
	// Down is how long the fault lasts; Gap the quiet time before it.
	Down, Gap time.Duration
}

func (f fault) String() string {
	target := fmt.Sprintf("#%d", f.Pick)
	if f.Leader {
		target = "the leader"
	}
	return fmt.Sprintf("%s %s for %s (after %s)", f.Kind, target, f.Down.Round(time.Millisecond), f.Gap.Round(time.Millisecond))
}

// nodeDeadline is how long a silent node stays ready in the fault suite:
// the servers' heartbeat TTL plus the grace period.
const (
	faultHeartbeatTTL = 3 * time.Second
	faultNodeGrace    = 3 * time.Second
	nodeDeadline      = faultHeartbeatTTL + faultNodeGrace
)

// schedule returns the seed's faults, as many as fit in d.
func schedule(seed uint64, d time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	var out []fault
	var total time.Duration
	for {
		kinds := append([]faultKind(nil), faultKinds...)
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			f := fault{Kind: k, Leader: rng.IntN(2) == 0, Pick: rng.IntN(3), Gap: between(300*time.Millisecond, 1500*time.Millisecond)}
			switch k {
			case faultKillServer, faultRestartServer:
				f.Down = between(200*time.Millisecond, 3*time.Second)
			case faultPauseServer:
				f.Down = between(500*time.Millisecond, 4*time.Second)
			case faultNoQuorum:
				f.Down = between(time.Second, 3*time.Second)
			case faultKillClient, faultRestartClient:
				f.Leader = false
				f.Down = between(100*time.Millisecond, time.Second)
			case faultPauseClient:
				f.Leader = false
				// Within the node's deadline, counting a heartbeat interval
				// (TTL/2) before the pause and a restart's start-up after.
				f.Down = between(300*time.Millisecond, 2*time.Second)
			case faultCrashMachine:
				f.Leader = false
				f.Down = between(nodeDeadline+2*time.Second, nodeDeadline+4*time.Second)
			}
			total += f.Gap + f.Down
			if total > d {
				return out
			}
			out = append(out, f)
		}
	}
}

// nemesis runs a schedule against the suite's cluster.
type nemesis struct {
	s     *faultSuite
	t     *testing.T
	mu    sync.Mutex
	done  map[faultKind]int
	log   []string
	downs []machineDown // when each client machine was down, for the publication check
}

// machineDown is a crashed machine's plugin instance and when it died.
type machineDown struct {
	instance string
	at       time.Time
}

// run applies the faults in order, each healed before the next, until
// they run out or ctx ends; it returns once the last fault is healed.
func (n *nemesis) run(ctx context.Context, faults []fault) {
	for _, f := range faults {
		sleepCtx(ctx, f.Gap)
		if ctx.Err() != nil {
			return
		}
		what := n.apply(ctx, f)
		n.mu.Lock()
		n.done[f.Kind]++
		n.log = append(n.log, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05.000"), f, what))
		n.mu.Unlock()
	}
}

// apply makes one fault and heals it, and says what it hit.
func (n *nemesis) apply(ctx context.Context, f fault) string {
	c, t := n.s.c, n.t
	switch f.Kind {
	case faultKillServer, faultPauseServer, faultRestartServer:
		victim := n.server(f)
		switch f.Kind {
		case faultKillServer:
			c.Kill(t, victim)
			sleepCtx(ctx, f.Down)
			c.Restart(t, victim)
		case faultPauseServer:
			c.Pause(t, victim)
			sleepCtx(ctx, f.Down)
			c.Resume(t, victim)
		default:
			_ = c.Stop(t, victim)
			sleepCtx(ctx, f.Down)
			c.Restart(t, victim)
		}
		return victim.Name()
	case faultNoQuorum:
		killed := n.server(f)
		var frozen Server
		for _, s := range c.Running() {
			if s != killed {
				frozen = s
				break
			}
		}
		c.Kill(t, killed)
		if frozen != nil {
			c.Pause(t, frozen)
		}
		sleepCtx(ctx, f.Down)
		if frozen != nil {
			c.Resume(t, frozen)
		}
		c.Restart(t, killed)
		if frozen == nil {
			return killed.Name() + " killed"
		}
		return killed.Name() + " killed, " + frozen.Name() + " frozen"
	}
	i := f.Pick % len(n.s.clients)
	cl, plugin := n.s.clients[i], n.s.plugins[i]
	switch f.Kind {
	case faultKillClient:
		c.Kill(t, cl)
		sleepCtx(ctx, f.Down)
		c.Restart(t, cl)
	case faultPauseClient:
		c.Pause(t, cl)
		sleepCtx(ctx, f.Down)
		c.Resume(t, cl)
	case faultRestartClient:
		_ = c.Stop(t, cl)
		sleepCtx(ctx, f.Down)
		c.Restart(t, cl)
	case faultCrashMachine:
		c.Kill(t, cl)
		killTasksUnder(t, cl.DataDir())
		c.Kill(t, plugin)
		n.mu.Lock()
		n.downs = append(n.downs, machineDown{instance: plugin.NodeID(), at: time.Now()})
		n.mu.Unlock()
		sleepCtx(ctx, f.Down)
		c.Restart(t, plugin)
		c.Restart(t, cl)
	}
	return cl.Name()
}

// server picks the fault's server: the leader as the running servers see
// it, or a follower; any running server when no leader is known.
func (n *nemesis) server(f fault) Server {
	running := n.s.c.Running()
	leader := n.s.knownLeader()
	var followers []Server
	for _, s := range running {
		if s != leader {
			followers = append(followers, s)
		}
	}
	if f.Leader && leader != nil {
		return leader
	}
	if len(followers) == 0 {
		return running[f.Pick%len(running)]
	}
	return followers[f.Pick%len(followers)]
}

// summary says how many faults of each kind were made.
func (n *nemesis) summary() (int, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	total := 0
	for k, v := range n.done {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
		total += v
	}
	sort.Strings(parts)
	return total, strings.Join(parts, ", ")
}
