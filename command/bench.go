package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/bench"
)

// BenchCommand runs the server-core benchmark of package bench: in-process
// clusters, nothing to connect to.
type BenchCommand struct {
	Meta
}

func init() {
	Register("bench", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &BenchCommand{Meta: Meta{Ui: ui}}, nil }
	})
}

func (c *BenchCommand) Synopsis() string { return "Benchmark the server core" }

func (c *BenchCommand) Help() string {
	d := bench.DefaultConfig()
	return strings.TrimSpace(fmt.Sprintf(`
Usage: volplane bench [options]

  Benchmarks the server core in this process, against nothing else:

  register  CSIVolume.Register, one volume per call, over msgpack RPC to the
            leader of a 3-server volplane cluster (loopback TCP, Raft logs
            on -raft-logstore in temporary dirs, production Raft timing),
            with 1 writer and with -writers writers. Paired with a
            baseline: a bare 3-node hashicorp/raft cluster with the same
            stores and configuration and a no-op FSM, applying entries of
            the same size at the same concurrency, one entry per write,
            interleaved with volplane in -rounds rounds (volplane's
            concurrent registers, and claims, share entries: the leader's
            group commit). Reports volplane's
            throughput and p99 as ratios of the baseline's. The volumes
            belong to a node plugin that needs no controller, so the leader
            asks no client agent to validate them.
            Targets: ops/s >= %gx the baseline's with -writers writers; p99
            <= %gx the baseline's.
  list      GET /v1/volumes against the leader's HTTP API with each of
            -list-sizes volumes registered. Targets: p50 < 5ms with 1,000
            volumes, < 30ms with 10,000.
  claim     CSIVolume.Claim over RPC to the leader, with the node's secret,
            as a client agent claims: each claim for an allocation of a
            per_alloc single-node-writer group placed on the benchmark node
            and a volume of its own (a node-only plugin, so no controller
            publish), with 1 claimer and with -writers claimers, paired with
            the baseline as the register phase is, with entries of a claim
            entry's size. Targets: ops/s >= %gx the baseline's with
            -writers claimers; p99 <= %gx the baseline's. Then
            -refused-claims claims by another job's allocations for volumes
            already claimed, which the leader must refuse with max claims
            and without any Raft entry. Target: the leader's Raft log gains
            0 entries.
  release   Not run by default (-phases=all or -phases=release; under a
            minute). The leader's release of claims, in a 3-server cluster
            of its own with two stand-in client agents, each a node with a
            monolith instance of a plugin whose controller attaches and
            detaches, serving the servers' ClientCSI calls over its yamux
            session (one agent's session is with a follower, the other's
            with the leader). -release-volumes allocations of per_alloc jobs
            (groups of 20) spread over both nodes each claim a volume of
            their own (with the node's secret; a controller publish each);
            then every job is stopped at once and the phase waits until
            every volume is free (each release: a node detach, a controller
            detach, one checkpoint, which concurrent releases share
            Raft entries for). Reports releases/s, the
            process's CPU per release and the goroutines it added at the
            peak. Then the volumes are claimed again, the first agent is
            stopped, every job stopped, and the process's CPU is measured
            for 2s once the other agent's releases are done, while the
            stopped agent's back off. The process holds every server, so
            its CPU bounds the leader's. Targets: releases/s >= %g; peak
            goroutines at most %d above those before; CPU < %g cores
            while releases back off.
  scale     Not run by default (-phases=all or -phases=scale; under a
            minute). Whether the cost of registers and claims grows with the
            volumes in the state: two 3-server clusters of its own, one
            empty, one with -scale-volumes more volumes, -scale-stuck of
            which hold past claims whose node detach keeps failing, so their
            releases back off and retry all along. -scale-ops registers,
            then -scale-claim-ops claims, with -writers callers on each
            cluster, interleaved in -scale-rounds rounds; each round's
            registered volumes are deregistered after it. Target: the
            loaded cluster's ops/s >= %gx the empty one's, for registers
            and for claims, as the median over the rounds of the two
            clusters' ratio within a round (a disk stall in one round then
            decides nothing).
  tls       Not run by default (-phases=all or -phases=tls). What mutual TLS
            on the RPC port costs: two 3-server clusters of its own, one with
            tls.rpc, take -scale-ops registers, then -scale-claim-ops claims,
            with -writers callers, interleaved in -scale-rounds rounds.
            Target: the TLS cluster's ops/s >= 0.9x the plaintext one's, as
            the median over the rounds of their ratio within a round.
  acl       Not run by default (-phases=all or -phases=acl; about a
            minute). What ACLs cost: two 3-server clusters of its own, one
            with ACLs off, one with ACLs on and bootstrapped, whose calls
            carry a client token with a namespace policy (resolved by every
            server from its cache). -acl-ops registers with -writers
            writers, then -acl-list-requests GET /v1/volumes of
            -acl-list-volumes volumes, on both clusters, interleaved in
            -acl-rounds rounds. Target: the ACL cluster's ops/s >= %gx the
            other's, for registers and for lists, as the median over the
            rounds of the two clusters' ratio within a round.
  http      Not run by default (-phases=all or -phases=http). Three server
            agents started as processes of this binary on free ports,
            driven over HTTP: at each of -list-sizes volumes,
            -list-requests sequential GET /v1/volumes on the leader, on a
            follower (a default read: answered there after a read-index
            check with the leader), on the follower with ?stale, on the
            leader with Accept-Encoding: gzip, and on the leader each after
            an update of one volume (leader-written, the update not timed),
            interleaved in -rounds rounds; then -http-register-ops PUT
            /v1/volume/csi/:id to the leader with 16 and 64 writers (a
            quarter of it with 1). Targets: p50 <= 2ms listing 1,000
            volumes on the leader and on the follower; p50 <= 10ms listing
            10,000 on the leader, unchanged or after a write.
  http-nomad
            Not run by default (-phases=all or -phases=http-nomad). volplane
            and Nomad side by side over HTTP: three volplane server agents
            as in the http phase, and three Nomad server agents and a Nomad
            client from a Nomad binary (-nomad-binary, or the %s one
            e2e/nomadcli caches), the client running this binary's
            development CSI plugin as a raw_exec task with a csi_plugin
            block, node-only, so neither side asks a controller to validate
            a volume. Then PUT /v1/volume/csi/:id of the same volumes to
            each leader with 1, 16 and 64 writers (-http-register-ops at 16
            and 64, a quarter of it with 1), interleaved in -rounds rounds
            with a bare raft cluster in this process applying entries of a
            register's size at the same concurrency (what the Raft stack
            alone does). Target: volplane's ops/s >= %gx Nomad's with %d
            writers, as the median over the rounds of the two clusters'
            ratio within a round. Under the table, for each level, where
            volplane's time went, from its agents' /v1/metrics read before
            and after: the register entries, the registers each carried and
            the linger, and per entry the leader's log write, an append's
            round trip to a follower and its log write, the commit and the
            leader's apply. Skipped, with one line, when there is no Nomad
            binary.
  memory    Not run by default (-phases=all or -phases=memory). A one-server
            cluster in this process registers -memory-volumes volumes; its
            heap in use after a full GC is measured, a Raft snapshot taken,
            the server restarted from its data dir (restoring the snapshot)
            and measured again. Reports the heap and the RSS growth of each
            and the heap per volume. Target: the restored heap <= %gx the
            live one's.

  failover  Not run by default (-phases=all or -phases=failover; about a
            minute). Starts 3 server processes of this binary on free
            loopback ports and, in -failover-rounds rounds of each kind,
            stops the leader with SIGKILL or with SIGSTOP, then measures
            the time from the signal to the first successful write (a
            namespace upsert over HTTP through a surviving server). The
            server is restarted or thawed after each round. Targets: at
            most 1s after SIGKILL and 2s after SIGSTOP, in every round.

  The phases run in the order register, list, claim, release, scale, tls,
  acl, http, http-nomad, memory, failover: the claim phase leaves its
  volumes claimed, so it comes after the list phase counts volumes; the
  later phases start clusters of their own once the first three have shut
  theirs down.

  Progress goes to stderr; the table (or, with -json, the JSON report) to
  stdout. The exit code is 0 even when a target is missed, unless -strict.

Options:

  -ops=N             Registrations with -writers writers (default %d).
  -serial-ops=N      Registrations with one writer (default %d).
  -writers=N         Concurrent writers, and claimers (default %d).
  -rounds=N          Alternating baseline/volplane rounds per level
                     (default %d).
  -list-sizes=LIST   Comma-separated volume counts for the list phase
                     (default %s).
  -list-requests=N   List requests at each size (default %d).
  -batch=N           Volumes per register request while setting up the
                     list and claim phases (default %d).
  -claim-ops=N       Claims with -writers claimers (default %d).
  -claim-serial-ops=N
                     Claims with one claimer (default %d).
  -refused-claims=N  Claims that must be refused, sent after the measured
                     ones; at most their number (default %d).
  -release-volumes=N Claims the release phase releases at once
                     (default %d).
  -scale-volumes=N   Volumes the scale phase's loaded cluster has beyond
                     the empty one's (default %d).
  -scale-stuck=N     Of those, volumes with past claims backing off
                     (default %d).
  -scale-ops=N       Registers on each cluster in the scale and tls phases
                     (default %d).
  -scale-claim-ops=N Claims on each cluster in the scale and tls phases
                     (default %d).
  -scale-rounds=N    Alternating rounds per scale or tls level
                     (default %d).
  -acl-ops=N         Registers on each cluster in the acl phase
                     (default %d).
  -acl-list-volumes=N
                     Volumes each cluster of the acl phase lists
                     (default %d).
  -acl-list-requests=N
                     Lists on each cluster in the acl phase (default %d).
  -acl-rounds=N      Alternating ACLs off/on rounds per acl level
                     (default %d).
  -http-register-ops=N
                     Registers over HTTP at 16 and 64 writers in the http
                     phase (default %d).
  -memory-volumes=N  Volumes of the memory phase's server (default %d).
  -failover-rounds=N Rounds of each kind in the failover phase
                     (default 5).
  -raft-multiplier=N raft_multiplier of the failover phase's servers, 1 to
                     10 (default: the servers' default, 1).
  -raft-logstore=B   The Raft log backend of every cluster, volplane's and
                     the bare raft baseline: wal or boltdb (default: the
                     servers' default, wal).
  -gc-heap-budget=SIZE
                     The heap budget of the collector's tuner, as a server
                     agent's server.gc_heap_budget: for this process, whose
                     collector the in-process clusters and their baselines
                     share, and for the agents the http, http-nomad and
                     failover phases start (default: the agents' default,
                     a quarter of the memory; 0: Go's default GOGC).
  -binary=PATH       The volplane binary whose agents the http and failover
                     phases run (default: this one).
  -nomad-binary=PATH The Nomad binary whose agents the http-nomad phase
                     runs (default: the one e2e/nomadcli caches).
  -phases=LIST       Comma-separated phases: register, claim, list, release,
                     scale, tls, acl, http, http-nomad, memory, failover, or
                     all
                     (default %s).
  -breakdown         Add a third side to the register rounds, raft+fsm:
                     raft.Apply of the leader-encoded register entries on
                     the volplane leader (state machine included, RPC layers
                     and endpoint left out), to see which part of volplane
                     costs what.
  -dir=DIR           Parent of the temporary data dirs (default: the
                     system's temporary directory). They are removed at
                     the end.
  -json              Print the report as JSON.
  -strict            Exit with 2 when a target is missed.
  -cpuprofile=FILE   Write a CPU profile of the whole run. Samples carry the
                     label cluster=volplane or cluster=baseline (pprof
                     -tagfocus) for the goroutines of each side.
  -memprofile=FILE   Write an allocation profile of the whole run at its
                     end (pprof -sample_index=alloc_space), with the same
                     labels.
  -trace=FILE        Write an execution trace of the whole run (go tool
                     trace): what ran, and what waited, when a call was
                     slow. Keep the run short; a trace grows by megabytes
                     a second.
  -log-level=LEVEL   Log level of the servers and Raft, to stderr (default
                     error).
`, bench.TargetThroughputRatio, bench.TargetP99Ratio, bench.ClaimTargetThroughputRatio, bench.TargetP99Ratio,
		bench.ReleaseTargetRate, bench.ReleaseTargetGoroutines, bench.ReleaseTargetBackoffCores, bench.ScaleTargetRatio,
		bench.ACLTargetRatio, bench.NomadVersion, bench.NomadTargetRatio, bench.NomadTargetWriters, bench.MemoryTargetRatio,
		d.Ops, d.SerialOps, d.Writers, d.Rounds,
		joinInts(d.ListSizes), d.ListRequests, d.ListBatch,
		d.ClaimOps, d.ClaimSerialOps, d.RefusedClaims,
		d.ReleaseVolumes, d.ScaleVolumes, d.ScaleStuck, d.ScaleOps, d.ScaleClaimOps, d.ScaleRounds,
		d.ACLOps, d.ACLListVolumes, d.ACLListRequests, d.ACLRounds,
		d.HTTPRegisterOps, d.MemoryVolumes,
		strings.Join(d.Phases, ",")))
}

func (c *BenchCommand) Run(args []string) int {
	cfg := bench.DefaultConfig()
	var (
		listSizes, phases, cpuProfile, memProfile, traceFile, logLevel string
		asJSON, strict                                                 bool
	)
	f := c.FlagSet("bench", 0)
	f.IntVar(&cfg.Ops, "ops", cfg.Ops, "")
	f.IntVar(&cfg.SerialOps, "serial-ops", cfg.SerialOps, "")
	f.IntVar(&cfg.Writers, "writers", cfg.Writers, "")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "")
	f.StringVar(&listSizes, "list-sizes", joinInts(cfg.ListSizes), "")
	f.IntVar(&cfg.ListRequests, "list-requests", cfg.ListRequests, "")
	f.IntVar(&cfg.ListBatch, "batch", cfg.ListBatch, "")
	f.IntVar(&cfg.ClaimOps, "claim-ops", cfg.ClaimOps, "")
	f.IntVar(&cfg.ClaimSerialOps, "claim-serial-ops", cfg.ClaimSerialOps, "")
	f.IntVar(&cfg.RefusedClaims, "refused-claims", cfg.RefusedClaims, "")
	f.IntVar(&cfg.ReleaseVolumes, "release-volumes", cfg.ReleaseVolumes, "")
	f.IntVar(&cfg.ScaleVolumes, "scale-volumes", cfg.ScaleVolumes, "")
	f.IntVar(&cfg.ScaleStuck, "scale-stuck", cfg.ScaleStuck, "")
	f.IntVar(&cfg.ScaleOps, "scale-ops", cfg.ScaleOps, "")
	f.IntVar(&cfg.ScaleClaimOps, "scale-claim-ops", cfg.ScaleClaimOps, "")
	f.IntVar(&cfg.ScaleRounds, "scale-rounds", cfg.ScaleRounds, "")
	f.IntVar(&cfg.ACLOps, "acl-ops", cfg.ACLOps, "")
	f.IntVar(&cfg.ACLListVolumes, "acl-list-volumes", cfg.ACLListVolumes, "")
	f.IntVar(&cfg.ACLListRequests, "acl-list-requests", cfg.ACLListRequests, "")
	f.IntVar(&cfg.ACLRounds, "acl-rounds", cfg.ACLRounds, "")
	f.IntVar(&cfg.HTTPRegisterOps, "http-register-ops", cfg.HTTPRegisterOps, "")
	f.IntVar(&cfg.MemoryVolumes, "memory-volumes", cfg.MemoryVolumes, "")
	f.IntVar(&cfg.FailoverRounds, "failover-rounds", cfg.FailoverRounds, "")
	f.IntVar(&cfg.RaftMultiplier, "raft-multiplier", 0, "")
	f.StringVar(&cfg.RaftLogStore, "raft-logstore", "", "")
	f.StringVar(&cfg.GCHeapBudget, "gc-heap-budget", "", "")
	f.StringVar(&cfg.Binary, "binary", "", "")
	f.StringVar(&cfg.NomadBinary, "nomad-binary", "", "")
	f.StringVar(&phases, "phases", strings.Join(cfg.Phases, ","), "")
	f.BoolVar(&cfg.Breakdown, "breakdown", false, "")
	f.StringVar(&cfg.Dir, "dir", "", "")
	f.BoolVar(&asJSON, "json", false, "")
	f.BoolVar(&strict, "strict", false, "")
	f.StringVar(&cpuProfile, "cpuprofile", "", "")
	f.StringVar(&memProfile, "memprofile", "", "")
	f.StringVar(&traceFile, "trace", "", "")
	f.StringVar(&logLevel, "log-level", "error", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() > 0 {
		return c.UsageError(c, "This command takes no arguments")
	}
	for name, n := range map[string]int{
		"ops": cfg.Ops, "serial-ops": cfg.SerialOps, "writers": cfg.Writers, "rounds": cfg.Rounds,
		"list-requests": cfg.ListRequests, "batch": cfg.ListBatch,
		"claim-ops": cfg.ClaimOps, "claim-serial-ops": cfg.ClaimSerialOps, "refused-claims": cfg.RefusedClaims,
		"release-volumes": cfg.ReleaseVolumes, "scale-volumes": cfg.ScaleVolumes, "scale-stuck": cfg.ScaleStuck,
		"scale-ops": cfg.ScaleOps, "scale-claim-ops": cfg.ScaleClaimOps, "scale-rounds": cfg.ScaleRounds,
		"acl-ops": cfg.ACLOps, "acl-list-volumes": cfg.ACLListVolumes, "acl-list-requests": cfg.ACLListRequests,
		"acl-rounds": cfg.ACLRounds, "http-register-ops": cfg.HTTPRegisterOps, "memory-volumes": cfg.MemoryVolumes,
		"failover-rounds": cfg.FailoverRounds,
	} {
		if n < 1 {
			return c.UsageError(c, "-%s must be at least 1 (got %d)", name, n)
		}
	}
	var err error
	if cfg.ListSizes, err = parseInts(listSizes); err != nil {
		return c.UsageError(c, "-list-sizes: %v", err)
	}
	cfg.Phases = strings.Split(phases, ",")
	if phases == "all" {
		cfg.Phases = bench.AllPhases()
	}
	level := hclog.LevelFromString(logLevel)
	if level == hclog.NoLevel {
		return c.UsageError(c, "-log-level: unknown level %q", logLevel)
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "bench", Level: level, Output: os.Stderr})
	cfg.Progress = uiLineWriter{c.Ui}

	for _, rec := range []struct {
		path, what string
		start      func(io.Writer) error
		stop       func()
	}{
		{cpuProfile, "the CPU profile", pprof.StartCPUProfile, pprof.StopCPUProfile},
		{traceFile, "the execution trace", trace.Start, trace.Stop},
	} {
		if rec.path == "" {
			continue
		}
		stop, err := startRecording(rec.path, rec.start, rec.stop)
		if err != nil {
			c.Ui.Error(fmt.Sprintf("Error starting %s: %v", rec.what, err))
			return 1
		}
		defer stop()
	}

	if memProfile != "" {
		// Written at the end, after the clusters are gone: what the run
		// allocated (alloc_space, alloc_objects) is what drives the
		// collector, whose mark phases are where the tail latency goes.
		defer func() {
			if err := writeHeapProfile(memProfile); err != nil {
				c.Ui.Error("Error writing the memory profile: " + err.Error())
			}
		}()
	}

	// An interrupt stops the run, which still shuts its clusters down and
	// removes their data dirs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if rep != nil && len(rep.Results) > 0 || err == nil {
		var b strings.Builder
		write := rep.WriteTable
		if asJSON {
			write = rep.WriteJSON
		}
		if werr := write(&b); werr != nil {
			// Say so rather than pass a cut-off report for a whole one.
			err = errors.Join(err, fmt.Errorf("writing the report: %w", werr))
		}
		c.Ui.Output(strings.TrimRight(b.String(), "\n"))
	}
	if err != nil {
		c.Ui.Error("Error: " + err.Error())
		return 1
	}
	if strict && !rep.Pass {
		return 2
	}
	return 0
}

func writeHeapProfile(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(out, 0); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// uiLineWriter sends the lines written to it (the bench's progress, a
// store's warnings) to the UI's error stream, so that standard output
// holds only the command's result.
type uiLineWriter struct{ ui cli.Ui }

func (w uiLineWriter) Write(p []byte) (int, error) {
	w.ui.Error(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// startRecording creates path and starts a recording (the CPU profile, the
// execution trace) into it; the returned function stops it and closes the
// file.
func startRecording(path string, start func(io.Writer) error, stop func()) (func(), error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(out); err != nil {
		out.Close()
		return nil, err
	}
	return func() {
		stop()
		out.Close()
	}, nil
}
