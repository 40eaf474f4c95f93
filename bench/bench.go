// Package bench measures the server core: volume registration through the
// leader of an in-process 3-server cluster, paired with a bare hashicorp/raft
// cluster on the same kind of storage as its baseline, and the volume list
// endpoint with thousands of volumes. `volplane bench` runs it.
//
// The disk of a shared machine is noisy (fsync latency can swing tenfold
// within a minute), so an absolute figure alone says little. Every volplane
// write figure is therefore paired with a baseline measured in the same run,
// in interleaved rounds, with the same Raft configuration, the same stores,
// the same entry size and the same concurrency; what is judged is the ratio.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Phases that can be selected with Config.Phases.
const (
	// PhaseRegister is CSIVolume.Register through the leader, with its
	// paired baseline.
	PhaseRegister = "register"
	// PhaseList is GET /v1/volumes against the leader's HTTP API.
	PhaseList = "list"
)

// Result phases besides PhaseRegister and PhaseList.
const (
	// PhaseBaseline is raft.Apply on the bare raft cluster.
	PhaseBaseline = "baseline"
	// PhaseApply is raft.Apply of register entries on the volplane leader
	// (Config.Breakdown).
	PhaseApply = "raft+fsm"
)

// Targets from the issue that asked for this benchmark.
const (
	// TargetThroughputRatio is the least share of the baseline's
	// throughput volplane must reach with Config.Writers writers.
	TargetThroughputRatio = 0.5
	// TargetP99Ratio is the most volplane's p99 may be, as a multiple of
	// the baseline's p99 at the same concurrency.
	TargetP99Ratio = 2.0
)

// ListTargetP50 is the p50 that listing n volumes must stay under; 0 means
// no target for that size.
func ListTargetP50(n int) time.Duration {
	switch {
	case n <= 1_000:
		return 5 * time.Millisecond
	case n <= 10_000:
		return 30 * time.Millisecond
	}
	return 0
}

// Config sizes one run. The zero value of a field means its default (see
// DefaultConfig), except Phases, where nil means every phase.
type Config struct {
	// Ops is the number of registrations (and baseline applies) with
	// Writers concurrent writers; SerialOps the number with one writer.
	Ops       int
	SerialOps int
	// Writers is the concurrency of the concurrent level.
	Writers int
	// Rounds splits each level's ops into this many alternating
	// baseline/volplane chunks, so that a slow minute of the disk hits
	// both sides alike.
	Rounds int

	// ListSizes are the volume counts at which the list is measured, in
	// increasing order; ListRequests the number of requests at each.
	ListSizes    []int
	ListRequests int
	// ListBatch is how many volumes one register request carries while
	// filling the state for the list phase.
	ListBatch int

	// Phases selects what runs: PhaseRegister, PhaseList.
	Phases []string
	// Breakdown adds a third side to each register round: raft.Apply of
	// the leader-encoded register entry on the volplane leader, which is
	// Raft with volplane's state machine but without the RPC layers and
	// the endpoint. It splits volplane's distance from the baseline in two.
	Breakdown bool

	// Dir is the parent of the temporary data dirs; "" means os.TempDir().
	Dir string
	// Logger receives the servers' and Raft's logs; nil discards them.
	Logger hclog.Logger
	// Progress receives one line per step, for a person waiting; nil
	// discards.
	Progress io.Writer
}

// DefaultConfig returns the sizes of `volplane bench` without flags: about
// a minute on two cores. Fewer ops finish in seconds, but one slow stretch
// of the disk then decides the ratios.
func DefaultConfig() Config {
	return Config{
		Ops:          40000,
		SerialOps:    8000,
		Writers:      64,
		Rounds:       5,
		ListSizes:    []int{1_000, 10_000},
		ListRequests: 50,
		ListBatch:    500,
		Phases:       []string{PhaseRegister, PhaseList},
	}
}

func (c *Config) normalize() error {
	d := DefaultConfig()
	if c.Ops == 0 {
		c.Ops = d.Ops
	}
	if c.SerialOps == 0 {
		c.SerialOps = d.SerialOps
	}
	if c.Writers == 0 {
		c.Writers = d.Writers
	}
	if c.Rounds == 0 {
		c.Rounds = d.Rounds
	}
	if c.ListSizes == nil {
		c.ListSizes = d.ListSizes
	}
	if c.ListRequests == 0 {
		c.ListRequests = d.ListRequests
	}
	if c.ListBatch == 0 {
		c.ListBatch = d.ListBatch
	}
	if c.Phases == nil {
		c.Phases = d.Phases
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	switch {
	case c.Ops < 0 || c.SerialOps < 0 || c.Writers < 0 || c.Rounds < 0 ||
		c.ListRequests < 0 || c.ListBatch < 0:
		return errors.New("sizes must not be negative")
	case c.Rounds > c.Ops || c.Rounds > c.SerialOps:
		return fmt.Errorf("rounds (%d) must not exceed the op counts (%d, %d): every round needs an op",
			c.Rounds, c.SerialOps, c.Ops)
	}
	prev := 0
	for _, n := range c.ListSizes {
		if n <= prev {
			return fmt.Errorf("list sizes must be positive and increasing (got %v)", c.ListSizes)
		}
		prev = n
	}
	for _, p := range c.Phases {
		if p != PhaseRegister && p != PhaseList {
			return fmt.Errorf("unknown phase %q: want %s or %s", p, PhaseRegister, PhaseList)
		}
	}
	return nil
}

func (c *Config) runs(phase string) bool { return slices.Contains(c.Phases, phase) }

func (c *Config) progress(format string, args ...any) {
	fmt.Fprintf(c.Progress, format+"\n", args...)
}

// Run starts the clusters, runs the selected phases and shuts everything
// down, removing its data dirs, before it returns. A cancelled ctx stops
// the run between (or within) operations, and the clusters are still shut
// down. The report holds whatever was measured before an error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	parent := cfg.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	dir, err := os.MkdirTemp(parent, "volplane-bench-")
	if err != nil {
		return nil, fmt.Errorf("creating the data dir: %w", err)
	}
	defer os.RemoveAll(dir)

	rep := &Report{Started: time.Now(), Config: reportConfig(cfg)}
	err = run(ctx, &cfg, dir, rep)
	rep.Elapsed = Seconds(time.Since(rep.Started))
	rep.Pass = rep.allPass()
	return rep, err
}

func run(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	cfg.progress("starting a 3-server volplane cluster in %s", dir)
	vp, err := startVolplane(ctx, cfg, dir)
	if err != nil {
		return err
	}
	defer func() {
		cfg.progress("shutting the volplane cluster down")
		err = errors.Join(err, vp.close())
	}()
	if err := vp.registerNode(); err != nil {
		return err
	}

	if cfg.runs(PhaseRegister) {
		cfg.progress("starting a 3-node baseline raft cluster")
		base, err := startBaseline(ctx, cfg, dir, vp.entryBytes)
		if err != nil {
			return err
		}
		rep.EntryBytes = vp.entryBytes
		err = runRegister(ctx, cfg, vp, base, rep)
		cfg.progress("shutting the baseline cluster down")
		if cerr := base.close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if err != nil {
			return err
		}
	}
	if cfg.runs(PhaseList) {
		if err := runList(ctx, cfg, vp, rep); err != nil {
			return err
		}
	}
	return nil
}
