package command

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/gctune"
)

// gcHeapBudget parses server.gc_heap_budget: the budget in bytes, zero for
// the default (unset), or off for "0".
func gcHeapBudget(v string) (budget uint64, off bool, err error) {
	budget, off, err = gctune.ParseBudget(v)
	if err != nil {
		return 0, false, fmt.Errorf("server.gc_heap_budget %w", err)
	}
	return budget, off, nil
}

// startGCTuning starts the collector's tuner for a server agent's process
// (package gctune) and returns what stops it. A client-only agent does not
// tune: its node's memory is its tasks'. Where the tuner cannot start (GOGC
// set in the environment, no memory figure on this system), the agent runs
// with the runtime's GOGC and says why.
func startGCTuning(cfg *AgentConfig, logger hclog.Logger) func() {
	budget, off, _ := gcHeapBudget(cfg.Server.GCHeapBudget) // validated with the file
	if off {
		logger.Info("gc tuning off: server.gc_heap_budget is 0")
		return func() {}
	}
	t, err := gctune.Start(gctune.Config{Budget: budget, Logger: logger})
	if err != nil {
		if errors.Is(err, gctune.ErrEnvSet) || errors.Is(err, gctune.ErrRunning) {
			logger.Info("gc tuning off", "reason", err.Error())
		} else {
			logger.Warn("gc tuning off", "error", err)
		}
		return func() {}
	}
	return t.Stop
}
