package bench

import (
	"fmt"

	"github.com/volplane/volplane/gctune"
)

func gcBudgetErr(v string) error {
	if _, _, err := gctune.ParseBudget(v); err != nil {
		return fmt.Errorf("gc heap budget %w", err)
	}
	return nil
}

// startGCTuning tunes this process's collector as a server agent tunes its
// own (package gctune): the in-process clusters are servers, and they share
// the process and its collector with their baselines. It records what ran
// in the report and returns what stops it.
func startGCTuning(cfg *Config, rep *Report) func() {
	budget, off, _ := gctune.ParseBudget(cfg.GCHeapBudget) // validated by normalize
	if off {
		rep.Config.GCTuning = "off (gc heap budget 0): Go's default GOGC"
		return func() {}
	}
	t, err := gctune.Start(gctune.Config{Budget: budget})
	if err != nil {
		rep.Config.GCTuning = "off: " + err.Error()
		return func() {}
	}
	rep.Config.GCTuning = fmt.Sprintf("GOGC %d-%d for a heap budget of %d MiB (%s), as server agents",
		gctune.MinPercent, gctune.DefaultMaxPercent, t.Budget()>>20, t.BudgetFrom())
	return t.Stop
}
