package client

import (
	"context"
	"fmt"
	"time"
)

// drainStopReason is the stop reason of the allocations a drain stops.
const drainStopReason = "the agent is shutting down"

// drainDetachName prefixes the errors of a drain's own node detaches.
const drainDetachName = "agent shutdown"

// DrainAllocations stops every allocation this client runs and releases
// their volumes from the node, for an agent that exits for good: the dev
// agent does it on SIGINT or SIGTERM, since its data dir, and so every
// record a restart would take the allocations over from, goes with it (as
// Nomad's dev agent destroys its allocations). Shutdown alone leaves tasks
// running and volumes published, for the next start to take over.
//
// From the call on, no allocation is started. Every runner is stopped (its
// tasks get SIGTERM, then SIGKILL after the kill timeout) and waited for.
// The servers then release the ended allocations' claims as for any stop:
// node unpublish and unstage here (the client still serves their
// NodeDetachVolume), controller unpublish, free. DrainAllocations waits up
// to releaseWait for that, then unpublishes and unstages itself whatever
// use is left on the node. It returns once nothing runs and nothing is
// published here, or with an error saying what is left when ctx ends first
// or a local detach fails. Call Shutdown after it.
func (c *Client) DrainAllocations(ctx context.Context, releaseWait time.Duration) error {
	// Taken now: the servers may release a volume from the node the moment
	// its allocation ends, and the wait below is also for the controller
	// step that follows.
	uses := c.usage.All()
	ids := c.allocs.StopAll(drainStopReason)
	if len(ids) > 0 {
		c.logger.Info("stopping every allocation before the agent exits", "allocs", len(ids))
	}
	// Runners and releases report through the state file and the servers,
	// not through a channel: both are looked at as often as tasks are.
	if !c.pollUntil(ctx, func() bool { return len(c.allocs.Running(ids)) == 0 }) {
		return fmt.Errorf("allocations still running: %v", c.allocs.Running(ids))
	}

	// The servers' release, bounded: the servers may be gone, or backing
	// off a failed step.
	if len(uses) > 0 {
		c.logger.Info("waiting for the servers to release the stopped allocations' volumes", "volumes", len(uses), "wait", releaseWait)
		rctx, cancel := context.WithTimeout(ctx, releaseWait)
		c.pollUntil(rctx, func() bool {
			for _, u := range uses {
				if _, ok := c.usage.Get(u.AllocID, u.VolumeID); ok {
					return false
				}
				// Past the node step, the controller's: the claim is
				// freed once the volume is unpublished from the
				// controller too.
				if released, err := c.releasedByServers(u); err != nil || !released {
					return false
				}
			}
			return true
		})
		cancel()
	}
	if ctx.Err() != nil {
		return fmt.Errorf("volume uses still recorded on the node: %d", len(c.usage.All()))
	}

	// What the servers did not release is detached here, as the orphan
	// sweep does: through nodeDetach, under the volume's lock.
	for _, u := range c.usage.All() {
		detached, err := (&ClientCSI{c: c}).nodeDetach(ctx, drainDetachName, &nodeDetachRequest{
			VolumeUsage: u, recorded: true, onlyRecorded: true,
		})
		if err != nil {
			return fmt.Errorf("detaching volume %s of allocation %s: %w", u.VolumeID, u.AllocID, err)
		}
		if detached {
			c.logger.Info("detached a volume the servers did not release before the agent exits",
				"alloc_id", u.AllocID, "volume_id", u.VolumeID)
		}
	}
	return nil
}

// pollUntil checks cond every TaskPollInterval until it holds (true) or
// ctx ends (false).
func (c *Client) pollUntil(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(c.config.TaskPollInterval)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
