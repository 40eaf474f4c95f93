package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is the outcome of one run; it is what -json prints.
type Report struct {
	Started time.Time `json:"started"`
	Elapsed Seconds   `json:"elapsed_s"`
	Config  RunConfig `json:"config"`
	// EntryBytes is the size of each Raft entry of the register phase, on
	// both sides.
	EntryBytes int `json:"entry_bytes,omitempty"`
	// ClaimEntryBytes is the size of a claim's Raft entry, which the
	// claim phase's baseline applies (claims for volume IDs with more
	// digits are a byte or two longer).
	ClaimEntryBytes int `json:"claim_entry_bytes,omitempty"`
	// ClaimJobs and ClaimAllocs are the jobs and allocations the claim
	// phase set up (rivals included): the leader's placer goes over all of
	// them after each claim, so the claim figures depend on them.
	ClaimJobs   int `json:"claim_jobs,omitempty"`
	ClaimAllocs int `json:"claim_allocs,omitempty"`
	// ReleaseJobs is the number of per_alloc jobs whose allocations held
	// the release phase's claims, ReleasePerAgent how many of those
	// allocations each agent's node ran.
	ReleaseJobs     int      `json:"release_jobs,omitempty"`
	ReleasePerAgent []int    `json:"release_per_agent,omitempty"`
	Results         []Result `json:"results"`
	// Notes are events that make figures less trustworthy.
	Notes []string `json:"notes,omitempty"`
	// Pass is true when no result has a missed target.
	Pass bool `json:"pass"`
}

// RunConfig is the part of Config worth reporting.
type RunConfig struct {
	Ops            int      `json:"ops"`
	SerialOps      int      `json:"serial_ops"`
	Writers        int      `json:"writers"`
	Rounds         int      `json:"rounds"`
	ListSizes      []int    `json:"list_sizes"`
	ListRequests   int      `json:"list_requests"`
	ListBatch      int      `json:"list_batch"`
	ClaimOps       int      `json:"claim_ops"`
	ClaimSerialOps int      `json:"claim_serial_ops"`
	RefusedClaims  int      `json:"refused_claims"`
	ReleaseVolumes int      `json:"release_volumes"`
	ScaleVolumes   int      `json:"scale_volumes"`
	ScaleStuck     int      `json:"scale_stuck"`
	ScaleOps       int      `json:"scale_ops"`
	ScaleClaimOps  int      `json:"scale_claim_ops"`
	ScaleRounds    int      `json:"scale_rounds"`
	ACLOps         int      `json:"acl_ops"`
	ACLListVolumes int      `json:"acl_list_volumes"`
	ACLListReqs    int      `json:"acl_list_requests"`
	ACLRounds      int      `json:"acl_rounds"`
	Phases         []string `json:"phases"`
	Breakdown      bool     `json:"breakdown,omitempty"`
	// RaftLogStore is the Raft log backend every cluster ran on.
	RaftLogStore string `json:"raft_logstore"`
	// GCTuning is how this process's collector ran (Config.GCHeapBudget).
	GCTuning string `json:"gc_tuning,omitempty"`
}

func reportConfig(c Config) RunConfig {
	return RunConfig{
		Ops: c.Ops, SerialOps: c.SerialOps, Writers: c.Writers, Rounds: c.Rounds,
		ListSizes: c.ListSizes, ListRequests: c.ListRequests, ListBatch: c.ListBatch,
		ClaimOps: c.ClaimOps, ClaimSerialOps: c.ClaimSerialOps, RefusedClaims: c.RefusedClaims,
		ReleaseVolumes: c.ReleaseVolumes, ScaleVolumes: c.ScaleVolumes, ScaleStuck: c.ScaleStuck,
		ScaleOps: c.ScaleOps, ScaleClaimOps: c.ScaleClaimOps, ScaleRounds: c.ScaleRounds,
		ACLOps: c.ACLOps, ACLListVolumes: c.ACLListVolumes, ACLListReqs: c.ACLListRequests, ACLRounds: c.ACLRounds,
		Phases: c.Phases, Breakdown: c.Breakdown, RaftLogStore: c.logStore(),
	}
}

// Result is one measured level: a phase at one concurrency (and, for the
// list, one volume count), or one figure of the release phase.
type Result struct {
	// Phase is "baseline", "register", "raft+fsm" (with Config.Breakdown),
	// "claim", "claim-refused", "list", "release", "release-goroutines",
	// "release-agent-down", "scale-register" or "scale-claim".
	Phase string `json:"phase"`
	// PairedWith is, for a baseline result, the phase it is the baseline
	// of: "register" or "claim".
	PairedWith string `json:"paired_with,omitempty"`
	// Cluster names the side of a phase measured on two clusters: "empty"
	// or "loaded" (scale-*), "plaintext" or "tls" (tls-*), "nomad" or
	// "volplane" (http-nomad).
	Cluster string `json:"cluster,omitempty"`
	// Volumes is the number of volumes listed (list), released (release),
	// backing off (release-agent-down), or in the loaded cluster beyond
	// the empty one's (scale-*).
	Volumes     int     `json:"volumes,omitempty"`
	Concurrency int     `json:"concurrency"`
	Ops         int     `json:"ops"`
	Elapsed     Seconds `json:"elapsed_s"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50         Millis  `json:"p50_ms"`
	P99         Millis  `json:"p99_ms"`
	Max         Millis  `json:"max_ms"`
	// ThroughputRatio and P99Ratio compare a register, raft+fsm or claim
	// result with its baseline at the same concurrency.
	ThroughputRatio float64 `json:"throughput_ratio,omitempty"`
	P99Ratio        float64 `json:"p99_ratio,omitempty"`
	// RaftIndexBefore and RaftIndexAfter are the leader's last Raft index
	// before and after the refused claims; RaftEntriesAdded is how many
	// entries they added, which must be none.
	RaftIndexBefore  uint64  `json:"raft_index_before,omitempty"`
	RaftIndexAfter   uint64  `json:"raft_index_after,omitempty"`
	RaftEntriesAdded *uint64 `json:"raft_entries_added,omitempty"`
	// CPUSeconds is the whole process's CPU time (user and system) over
	// the result's window, CPUCores the same per second of it and
	// CPUMsPerOp per operation; IdleCores is the process's CPU per second
	// with nothing to do. The process holds every server, the agents and
	// the benchmark, so these bound the leader's.
	// Breakdown is, for volplane's side of the http-nomad phase, where
	// its registers' time went, from its agents' metrics.
	Breakdown  *WriteBreakdown `json:"write_breakdown,omitempty"`
	CPUSeconds float64         `json:"cpu_s,omitempty"`
	CPUCores   float64         `json:"cpu_cores,omitempty"`
	CPUMsPerOp float64         `json:"cpu_ms_per_op,omitempty"`
	IdleCores  float64         `json:"idle_cores,omitempty"`
	// AllocKBPerOp is the heap the whole process allocated during the
	// result's rounds per operation, and GCCycles the collections that
	// ended in them (interleaved phases only): both sides share the
	// process, so a side's allocation sets how many collections, and their
	// mark phases, land in its rounds.
	AllocKBPerOp float64 `json:"alloc_kb_per_op,omitempty"`
	GCCycles     *uint64 `json:"gc_cycles,omitempty"`
	// GoroutinesBefore is the process's goroutine count just before the
	// window, GoroutinesPeak the most sampled in it.
	GoroutinesBefore int `json:"goroutines_before,omitempty"`
	GoroutinesPeak   int `json:"goroutines_peak,omitempty"`
	// FailedAttempts is the number of failed release attempts in the
	// window: the checkpoints they wrote to the leader's Raft log.
	FailedAttempts *uint64 `json:"failed_attempts,omitempty"`
	// HeapMB is the heap in use that the memory phase's server added
	// (after a full GC), HeapBytesPerVolume the same per volume, and RSSMB
	// the process's resident set growth with it; HeapRatio is the restored
	// server's heap over the live one's.
	HeapMB             float64 `json:"heap_mb,omitempty"`
	HeapBytesPerVolume int64   `json:"heap_bytes_per_volume,omitempty"`
	RSSMB              float64 `json:"rss_mb,omitempty"`
	HeapRatio          float64 `json:"heap_ratio,omitempty"`
	// Detail says in words what the figures of the release and scale
	// phases are.
	Detail string `json:"detail,omitempty"`
	// Target says what the result must reach; Pass whether it did (nil
	// when there is no target).
	Target string `json:"target,omitempty"`
	Pass   *bool  `json:"pass,omitempty"`
}

// Seconds is a duration that JSON shows in seconds.
type Seconds time.Duration

func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(round3(time.Duration(s).Seconds()))
}

// Millis is a duration that JSON shows in milliseconds.
type Millis time.Duration

func (m Millis) MarshalJSON() ([]byte, error) {
	return json.Marshal(round3(float64(m) / float64(time.Millisecond)))
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func newResult(phase string, conc int, st stats) Result {
	res := Result{
		Phase: phase, Concurrency: conc, Ops: st.ops, Elapsed: Seconds(st.wall),
		OpsPerSec: math.Round(st.opsPerSec), P50: Millis(st.p50), P99: Millis(st.p99), Max: Millis(st.max),
	}
	if st.gc.allocBytes > 0 && st.ops > 0 {
		res.AllocKBPerOp = round3(float64(st.gc.allocBytes) / 1024 / float64(st.ops))
		res.GCCycles = &st.gc.cycles
	}
	return res
}

// addCompared adds a baseline level, the level of phase (register or
// claim) paired with it and, when measured, the raft+fsm level. With
// targetWriters callers, the phase's throughput must reach targetRatio of
// the baseline's; at every level its p99 must stay within TargetP99Ratio of
// the baseline's.
func (r *Report) addCompared(phase string, writers, targetWriters int, targetRatio float64, base, vp stats, apply *stats) {
	compared := func(phase string, st stats) Result {
		res := newResult(phase, writers, st)
		if base.opsPerSec > 0 {
			res.ThroughputRatio = round3(st.opsPerSec / base.opsPerSec)
		}
		if base.p99 > 0 {
			res.P99Ratio = round3(float64(st.p99) / float64(base.p99))
		}
		return res
	}
	v := compared(phase, vp)
	pass := v.P99Ratio <= TargetP99Ratio
	v.Target = fmt.Sprintf("p99 <= %gx", TargetP99Ratio)
	if writers == targetWriters && writers > 1 {
		pass = pass && v.ThroughputRatio >= targetRatio
		v.Target = fmt.Sprintf("ops/s >= %gx, ", targetRatio) + v.Target
	}
	v.Pass = &pass
	b := newResult(PhaseBaseline, writers, base)
	b.PairedWith = phase
	r.Results = append(r.Results, b, v)
	if apply != nil {
		r.Results = append(r.Results, compared(PhaseApply, *apply))
	}
}

// addRefused adds the refused claims, sent with conc claimers, judged by
// the entries the leader's Raft log gained from before to after them.
func (r *Report) addRefused(conc int, st stats, before, after uint64) {
	res := newResult(PhaseClaimRefused, conc, st)
	res.RaftIndexBefore, res.RaftIndexAfter = before, after
	added := after - min(before, after)
	res.RaftEntriesAdded = &added
	pass := added == 0
	res.Target = "0 Raft entries"
	res.Pass = &pass
	r.Results = append(r.Results, res)
}

// addList adds the list level of size volumes, judged by its p50.
func (r *Report) addList(size int, st stats) {
	l := newResult(PhaseList, 1, st)
	l.Volumes = size
	if t := ListTargetP50(size); t > 0 {
		pass := st.p50 < t
		l.Target = "p50 < " + t.String()
		l.Pass = &pass
	}
	r.Results = append(r.Results, l)
}

// addRelease adds the release of n claims held by the allocations of jobs
// jobs, perAgent on each agent's node: its rate, judged by
// ReleaseTargetRate, with the process's CPU; and its goroutines, judged by
// ReleaseTargetGoroutines.
func (r *Report) addRelease(n, jobs int, perAgent []int, run *releaseRun) {
	r.ReleaseJobs, r.ReleasePerAgent = jobs, perAgent
	var s series
	s.add(run.toDetach, run.elapsed)
	st := s.stats()
	st.ops = n
	st.opsPerSec = float64(n) / run.elapsed.Seconds()
	rel := newResult(PhaseRelease, jobs, st)
	rel.Volumes = n
	pass := st.opsPerSec >= ReleaseTargetRate
	rel.Target = fmt.Sprintf("ops/s >= %g", ReleaseTargetRate)
	rel.Pass = &pass
	rel.GoroutinesBefore, rel.GoroutinesPeak = run.goroutinesBefore, run.peak
	entries := run.raftEntries
	rel.RaftEntriesAdded = &entries
	rel.Detail = fmt.Sprintf("all free %.2fs after the stops; first node detach at %dms; %d node + %d controller detaches; "+
		"%d Raft entries (%.3f per release)", run.elapsed.Seconds(), run.firstNodeDetach.Milliseconds(),
		run.nodeDetaches, run.controllerDetaches, run.raftEntries, float64(run.raftEntries)/float64(max(n, 1)))
	if run.cpuOK {
		rel.CPUSeconds = round3(run.cpu.Seconds())
		rel.CPUCores = round3(run.cpu.Seconds() / run.elapsed.Seconds())
		rel.CPUMsPerOp = round3(float64(run.cpu) / float64(time.Millisecond) / float64(n))
		rel.Detail += fmt.Sprintf("; process CPU %.2fs: %.2f ms per release, %.2f cores",
			rel.CPUSeconds, rel.CPUMsPerOp, rel.CPUCores)
	}

	delta := run.peak - run.goroutinesBefore
	g := Result{
		Phase: PhaseReleaseGoroutines, Volumes: n, Concurrency: jobs, Ops: n, Elapsed: Seconds(run.elapsed),
		GoroutinesBefore: run.goroutinesBefore, GoroutinesPeak: run.peak,
		Target: fmt.Sprintf("peak +%d at most", ReleaseTargetGoroutines),
		Detail: fmt.Sprintf("+%d at the peak over %d before, once the stops returned (+%d counting the %d stop call(s))",
			delta, run.goroutinesBefore, run.peakAll-run.goroutinesBefore, jobs),
	}
	gpass := delta <= ReleaseTargetGoroutines
	g.Pass = &gpass
	r.Results = append(r.Results, rel, g)
}

// addReleaseAgentDown adds the process's CPU while a stopped agent's
// releases back off, judged by ReleaseTargetBackoffCores.
func (r *Report) addReleaseAgentDown(d *agentDownRun) {
	res := Result{
		Phase: PhaseReleaseAgentDown, Volumes: d.backingOff, Elapsed: Seconds(d.window),
		GoroutinesBefore: d.goroutines, GoroutinesPeak: d.peak, FailedAttempts: &d.raftEntries,
		Target: fmt.Sprintf("cpu < %g cores", ReleaseTargetBackoffCores),
	}
	res.Detail = fmt.Sprintf("%d claims backing off; in %.1fs: %d failed attempts (%.1f per claim), goroutines +%d",
		d.backingOff, d.window.Seconds(), d.raftEntries, float64(d.raftEntries)/float64(max(d.backingOff, 1)), d.peak-d.goroutines)
	if d.cpuOK {
		res.CPUSeconds = round3(d.cpu.Seconds())
		res.CPUCores = round3(d.cpu.Seconds() / d.window.Seconds())
		res.IdleCores = round3(d.idleCPU.Seconds() / d.idle.Seconds())
		pass := res.CPUCores < ReleaseTargetBackoffCores
		res.Pass = &pass
		res.Detail = fmt.Sprintf("%.3f cores (idle: %.3f); ", res.CPUCores, res.IdleCores) + res.Detail
	}
	res.Detail += fmt.Sprintf("; %d attempts so far (%d claims not yet tried); the other agent's %d freed in %.2fs",
		d.attempts, d.neverTried, d.up, d.upTook.Seconds())
	if d.lastError != "" {
		res.Detail += "; last error: " + shorten(d.lastError, 140)
	}
	r.Results = append(r.Results, res)
}

// addScale adds a scale level: the empty cluster's figures, then the
// loaded cluster's, with extra more volumes, judged against
// ScaleTargetRatio (see addPaired).
func (r *Report) addScale(phase string, conc, extra int, empty, loaded *series, detail string) {
	r.addPaired(phase, conc, "empty", empty, "loaded", loaded, ScaleTargetRatio, detail)
	r.Results[len(r.Results)-1].Volumes = extra
}

// addPaired adds a level measured on two clusters side by side: the
// reference's figures, then the other's. The other's throughput ratio is
// the median over the rounds of its rate as a share of the reference's in
// the same round, and must reach target.
func (r *Report) addPaired(phase string, conc int, refName string, ref *series, otherName string, other *series, target float64, detail string) {
	e := newResult(phase, conc, ref.stats())
	e.Cluster = refName
	l := pairedResult(phase, conc, ref, otherName, other, detail)
	pass := l.ThroughputRatio >= target
	l.Target = fmt.Sprintf("ops/s >= %gx", target)
	l.Pass = &pass
	r.Results = append(r.Results, e, l)
}

// pairedResult is the result of other, with its rate as a multiple of
// ref's (the median over the rounds of the two rates within a round).
func pairedResult(phase string, conc int, ref *series, otherName string, other *series, detail string) Result {
	es, ls := ref.stats(), other.stats()
	l := newResult(phase, conc, ls)
	l.Cluster = otherName
	ratios := other.pairedRatios(ref)
	l.ThroughputRatio = round3(median(ratios))
	if es.p99 > 0 {
		l.P99Ratio = round3(float64(ls.p99) / float64(es.p99))
	}
	l.Detail = fmt.Sprintf("round ratios %.2f-%.2f, overall %.2fx; %s",
		slices.Min(ratios), slices.Max(ratios), ls.opsPerSec/es.opsPerSec, detail)
	return l
}

// addACL adds an ACL level: the cluster with ACLs off, then the one with
// ACLs on, judged by the median over the rounds of on's rate as a share of
// off's in the same round.
func (r *Report) addACL(phase string, conc, volumes int, off, on *series, detail string) {
	r.addPaired(phase, conc, "acl-off", off, "acl-on", on, ACLTargetRatio, detail)
	r.Results[len(r.Results)-2].Volumes = volumes
	r.Results[len(r.Results)-1].Volumes = volumes
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func (r *Report) allPass() bool {
	for _, res := range r.Results {
		if res.Pass != nil && !*res.Pass {
			return false
		}
	}
	return true
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	// Targets read "p99 <= 2x", not "p99 \u003c= 2x".
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteTable writes the report as an aligned table with a short header.
func (r *Report) WriteTable(w io.Writer) error {
	if r.Config.GCTuning != "" {
		fmt.Fprintf(w, "collector of this process: %s\n", r.Config.GCTuning)
	}
	if r.EntryBytes > 0 {
		fmt.Fprintln(w, "register: CSIVolume.Register, one volume per call, over RPC to the leader of 3 volplane servers")
		fmt.Fprintf(w, "  its baseline: raft.Apply of %d-byte entries (a register entry's size) on 3 bare raft + raft-%s nodes\n", r.EntryBytes, r.Config.RaftLogStore)
		if r.Config.Breakdown {
			fmt.Fprintln(w, "raft+fsm: raft.Apply of register entries on the volplane leader (state machine in, RPC and endpoint out)")
		}
	}
	if r.ClaimEntryBytes > 0 {
		fmt.Fprintln(w, "claim: CSIVolume.Claim with the node's secret, a distinct single-node-writer volume per call, over RPC to")
		fmt.Fprintf(w, "  the leader (node-only plugin: no controller publish); the state holds %d jobs with %d allocations\n",
			r.ClaimJobs, r.ClaimAllocs)
		fmt.Fprintf(w, "  its baseline: raft.Apply of %d-byte entries (a claim entry's size) on the 3 bare raft + raft-%s nodes\n", r.ClaimEntryBytes, r.Config.RaftLogStore)
		fmt.Fprintln(w, "claim-refused: claims by another job's allocations for volumes already claimed, refused with max claims;")
		fmt.Fprintln(w, "  raft + is the entries the leader's Raft log gained meanwhile")
	}
	if r.EntryBytes > 0 || r.ClaimEntryBytes > 0 {
		fmt.Fprintf(w, "each baseline ran interleaved with its phase in %d rounds; ratios are volplane / baseline at the same concurrency\n", r.Config.Rounds)
	}
	if r.has(PhaseRelease) {
		fmt.Fprintf(w, "release: %d allocations of %d per_alloc jobs on 2 stand-in agents (%s) each claimed a volume of a monolith\n",
			r.Config.ReleaseVolumes, r.ReleaseJobs, joinInts(r.ReleasePerAgent, " + "))
		fmt.Fprintln(w, "  plugin (controller publish), in a 3-server cluster of its own; then every job was stopped at once (conc: the")
		fmt.Fprintln(w, "  Job.Deregister calls in flight). ops/s is releases/s until a list shows every volume free, each release a node")
		fmt.Fprintln(w, "  and a controller detach over the agents' yamux sessions (agent1's through a follower) and 1 checkpoint,")
		fmt.Fprintln(w, "  which concurrent releases share Raft entries for (message type 27);")
		fmt.Fprintln(w, "  p50/p99: from the stops to a volume's controller detach, its last plugin call. CPU and goroutines are the")
		fmt.Fprintln(w, "  whole process's (3 servers, 2 agents, the benchmark), which bounds the leader's; raft + is the entries the")
		fmt.Fprintln(w, "  leader's Raft log gained from the stops until all were free (the stops, allocation updates, checkpoints)")
		fmt.Fprintln(w, "release-agent-down: the volumes claimed again, agent1 stopped, every job stopped; the process's CPU over the")
		fmt.Fprintln(w, "  2s after agent2's releases are done, while agent1's back off")
	}
	if r.has(PhaseScaleRegister) || r.has(PhaseScaleClaim) {
		fmt.Fprintf(w, "scale-register, scale-claim: one-volume registers and claims (node-only plugin) with %d callers on an empty\n", r.Config.Writers)
		fmt.Fprintf(w, "  cluster and on one with %d more volumes (%d of them with past claims backing off), interleaved in %d rounds;\n",
			r.Config.ScaleVolumes, r.Config.ScaleStuck, r.Config.ScaleRounds)
		fmt.Fprintln(w, "  each round's registered volumes are deregistered after it; each cluster holds the volumes it claims. The ops/s")
		fmt.Fprintln(w, "  ratio is the median over the rounds of loaded / empty in the same round; p99 ratio is loaded / empty")
	}
	if r.has(PhaseTLSRegister) || r.has(PhaseTLSClaim) {
		fmt.Fprintf(w, "tls-register, tls-claim: one-volume registers and claims with %d callers on a 3-server cluster without TLS\n", r.Config.Writers)
		fmt.Fprintf(w, "  and on one with tls.rpc (every connection mutual TLS 1.3, certificates checked), interleaved in %d rounds;\n", r.Config.ScaleRounds)
		fmt.Fprintln(w, "  the ops/s ratio is the median over the rounds of tls / plaintext in the same round")
	}
	if r.has(PhaseHTTPNomad) {
		fmt.Fprintln(w, "http-nomad: PUT /v1/volume/csi/:id, one volume per request, over HTTP to the leader of 3 volplane server agents")
		fmt.Fprintln(w, "  and of 3 Nomad server agents (with a client running the node-only CSI plugin), interleaved in rounds; the")
		fmt.Fprintf(w, "  ops/s ratio is the median over the rounds of volplane / nomad in the same round, judged at %d writers;\n", NomadTargetWriters)
		fmt.Fprintf(w, "  bare raft: raft.Apply of entries of a register's size on 3 bare raft + raft-%s nodes (no-op state\n", r.Config.RaftLogStore)
		fmt.Fprintln(w, "  machine, in the benchmark's process, same disk) in the same rounds: what the Raft stack alone does")
	}
	if len(r.Results) > 0 && (r.EntryBytes > 0 || r.ClaimEntryBytes > 0 || r.has(PhaseRelease) || r.has(PhaseScaleRegister) ||
		r.has(PhaseTLSRegister) || r.has(PhaseHTTPNomad)) {
		fmt.Fprintln(w)
	}
	rows := [][]string{{"phase", "volumes", "conc", "ops", "ops/s", "p50", "p99", "ops/s ratio", "p99 ratio", "alloc/op (GCs)", "raft +", "target", "result"}}
	for _, res := range r.Results {
		entries := "-"
		if res.RaftEntriesAdded != nil {
			entries = strconv.FormatUint(*res.RaftEntriesAdded, 10)
		}
		phase := res.Phase
		if strings.HasPrefix(res.Phase, "tls-") || strings.HasPrefix(res.Phase, "http-") || res.Phase == PhaseMemory {
			phase += " (" + res.Cluster + ")"
		}
		rows = append(rows, []string{
			phase, intOrDash(res.Volumes), intOrDash(res.Concurrency), intOrDash(res.Ops),
			floatOrDash(res.OpsPerSec), durationOrDash(time.Duration(res.P50)), durationOrDash(time.Duration(res.P99)),
			ratioOrDash(res.ThroughputRatio), ratioOrDash(res.P99Ratio), allocOrDash(res), entries, orDash(res.Target), verdict(res.Pass),
		})
	}
	// Names and verdicts read best left-aligned, numbers right-aligned.
	if err := writeColumns(w, rows, map[int]bool{0: true, 11: true, 12: true}); err != nil {
		return err
	}
	// The release and scale rows' details are sentences: they go under
	// the table, not in a column as wide as the longest.
	for _, res := range r.Results {
		if res.Detail == "" || res.Pass == nil {
			continue
		}
		name := res.Phase
		switch {
		case strings.HasPrefix(res.Phase, "scale-"):
			name = fmt.Sprintf("%s (%d more volumes)", res.Phase, res.Volumes)
		case res.Cluster != "":
			name = fmt.Sprintf("%s (%s)", res.Phase, res.Cluster)
		}
		fmt.Fprintf(w, "%s: %s\n", name, res.Detail)
	}
	for _, res := range r.Results {
		if res.Breakdown != nil {
			fmt.Fprintf(w, "%s (%s) with %d writers: %s\n", res.Phase, res.Cluster, res.Concurrency, res.Breakdown)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	v := "every target met"
	if !r.Pass {
		v = "MISSED targets: " + strings.Join(r.missed(), "; ")
	}
	_, err := fmt.Fprintf(w, "\n%s (run took %s)\n", v, time.Duration(r.Elapsed).Round(100*time.Millisecond))
	return err
}

// allocOrDash is a result's allocation per op and collections: "98.2KB (3)".
func allocOrDash(res Result) string {
	if res.GCCycles == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fKB (%d)", res.AllocKBPerOp, *res.GCCycles)
}

func (r *Report) missed() []string {
	var out []string
	for _, res := range r.Results {
		if res.Pass != nil && !*res.Pass {
			name := fmt.Sprintf("%s with %d caller(s)", res.Phase, res.Concurrency)
			switch res.Phase {
			case PhaseList:
				name = fmt.Sprintf("list of %d volumes", res.Volumes)
			case PhaseHTTPList:
				name = fmt.Sprintf("http list of %d volumes on the %s", res.Volumes, res.Cluster)
			case PhaseMemory:
				name = fmt.Sprintf("memory of %d volumes restored", res.Volumes)
			case PhaseRelease, PhaseReleaseGoroutines:
				name = fmt.Sprintf("%s of %d claims", res.Phase, res.Volumes)
			case PhaseReleaseAgentDown:
				name = fmt.Sprintf("%s with %d claims backing off", res.Phase, res.Volumes)
			case PhaseScaleRegister, PhaseScaleClaim:
				name = fmt.Sprintf("%s with %d more volumes", res.Phase, res.Volumes)
			}
			out = append(out, name+" ("+res.Target+")")
		}
	}
	return out
}

// fmtDuration prints a latency with three significant digits in ms or µs.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', decimals(float64(d)/float64(time.Millisecond)), 64) + "ms"
	default:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + "µs"
	}
}

func decimals(f float64) int {
	switch {
	case f >= 100:
		return 0
	case f >= 10:
		return 1
	}
	return 2
}

// has reports whether the report holds a result of phase.
func (r *Report) has(phase string) bool {
	return slices.ContainsFunc(r.Results, func(res Result) bool { return res.Phase == phase })
}

func floatOrDash(f float64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}

func durationOrDash(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmtDuration(d)
}

func joinInts(ns []int, sep string) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}

func intOrDash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func ratioOrDash(f float64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 2, 64) + "x"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func verdict(p *bool) string {
	switch {
	case p == nil:
		return "-"
	case *p:
		return "PASS"
	}
	return "MISS"
}

// writeColumns writes rows as columns two spaces apart, each as wide as its
// widest cell; the columns in left are left-aligned, the others right.
func writeColumns(w io.Writer, rows [][]string, left map[int]bool) error {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				b.WriteString("  ")
			}
			if left[i] {
				b.WriteString(cell)
				if i < len(row)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + cell)
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
