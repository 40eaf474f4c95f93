package client

import (
	"context"
	"time"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// Bounds of the pause between two sweeps of orphaned volumes while some
// are left unresolved: it starts at the minimum and doubles up to the
// maximum.
const (
	orphanSweepRetryMin = 5 * time.Second
	orphanSweepRetryMax = 5 * time.Minute
)

// orphanSweepName prefixes the errors of the client's own node detaches.
const orphanSweepName = "orphaned volume sweep"

// The orphan sweep detaches the volumes the servers released from this
// node without the node step.
//
// Releases are the servers': the volumewatcher calls NodeDetachVolume on
// the node before it detaches the volume from the controller and frees the
// claim. But a node that was down past its grace period cannot be called:
// its allocations are marked lost and the watcher skips the node step
// ("node step skipped"), detaches from the controller and frees the claim.
// When the node is back, its client stops the lost allocations' tasks, yet
// their volumes stay staged and published, recorded in the usage registry,
// and the allocations are never forgotten, since nobody calls the node any
// more. The sweep finds those uses and undoes them itself.
//
// A use is a candidate once its allocation no longer runs here (its runner
// ended, or there is none). The sweep then asks the leader (a read that is
// not stale, so that it never acts on a claim a lagging server has not seen
// freed) whether the volume still holds a claim of the allocation, current
// or past. While one does, the servers drive the release, or will free the
// claim without the node step, so the sweep leaves the use alone and looks
// again later. Once none does (or the volume is gone) the release is over
// and the sweep does the node detach locally, through the same code as
// NodeDetachVolume.
//
// It runs in one goroutine, so no volume is swept twice at once: after
// each answer of the allocation query and each end of an allocation
// (sweepSoon), and, while candidates are left unresolved, again after a
// pause that doubles from orphanSweepRetryMin to orphanSweepRetryMax.
// With no candidate it makes no call at all.

// sweepSoon asks the sweep goroutine to look for orphaned volumes; it never
// blocks, and requests made while one is pending are one.
func (c *Client) sweepSoon() {
	select {
	case c.sweepNow <- struct{}{}:
	default:
	}
}

// sweepOrphans runs sweeps until ctx ends: when asked (sweepSoon), and
// while candidates are left unresolved, after a pause with backoff. It
// starts once the node is registered, since the servers it asks know the
// node's allocations only then.
func (c *Client) sweepOrphans(ctx context.Context) {
	select {
	case <-c.registered:
	case <-ctx.Done():
		return
	}
	cfg := c.config
	delay := cfg.orphanSweepMin
	// lastErr is the last error logged of each use, so that a failure
	// repeated at every retry is logged once at Warn.
	lastErr := map[string]string{}
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.sweepNow:
		case <-retry:
		}
		pending := c.sweep(ctx, lastErr)
		if ctx.Err() != nil {
			return
		}
		t.Stop()
		if !pending {
			delay, retry = cfg.orphanSweepMin, nil
			continue
		}
		t.Reset(delay)
		retry = t.C
		delay = min(delay*2, cfg.orphanSweepMax)
	}
}

// sweep looks at every candidate use once and reports whether some are
// left unresolved (the servers hold a claim still, or a step failed).
func (c *Client) sweep(ctx context.Context, lastErr map[string]string) (pending bool) {
	candidates := c.orphanCandidates()
	seen := map[string]bool{}
	for _, u := range candidates {
		if ctx.Err() != nil {
			return true
		}
		key := u.AllocID + "\x00" + u.VolumeID
		seen[key] = true
		log := c.logger.Named("allocs").With("alloc_id", u.AllocID, "volume_id", u.VolumeID, "namespace", u.Namespace, "plugin_id", u.PluginID)
		fail := func(msg string, err error) {
			pending = true
			if err.Error() != lastErr[key] {
				log.Warn(msg, "error", err)
				lastErr[key] = err.Error()
			} else {
				log.Debug(msg, "error", err)
			}
		}
		released, err := c.releasedByServers(u)
		if err != nil {
			fail("cannot ask the servers whether they released an ended allocation's volume; retrying later", err)
			continue
		}
		if !released {
			log.Debug("the servers still hold a claim of the ended allocation on the volume; leaving its release to them")
			delete(lastErr, key)
			pending = true
			continue
		}
		detached, err := (&ClientCSI{c: c}).nodeDetach(c.ctx, orphanSweepName, &nodeDetachRequest{
			VolumeUsage: u, recorded: true, onlyRecorded: true,
		})
		if err != nil {
			fail("detaching a volume the servers released without the node step failed; retrying later", err)
			continue
		}
		delete(lastErr, key)
		if detached {
			log.Info("volume released by the servers without the node step; detached it locally")
		}
	}
	// Forget the errors of uses that are no longer candidates.
	for key := range lastErr {
		if !seen[key] {
			delete(lastErr, key)
		}
	}
	return pending
}

// orphanCandidates returns the recorded volume uses whose allocation no
// longer runs here: its runner ended, or it has none. Those of an
// allocation that still sets up or runs are released by the servers once
// it ends, and are never the sweep's.
func (c *Client) orphanCandidates() []state.VolumeUsage {
	var out []state.VolumeUsage
	for _, u := range c.usage.All() {
		if c.allocs.CheckDetach(u.AllocID) == nil {
			out = append(out, u)
		}
	}
	return out
}

// releasedByServers asks the leader whether the servers are done with the
// allocation's claim on the volume.
func (c *Client) releasedByServers(u state.VolumeUsage) (bool, error) {
	args := &structs.CSIVolumeGetRequest{ID: u.VolumeID}
	args.Namespace = u.Namespace
	// The leader's answer: a follower's state may not have seen the claim
	// taken, or may not have seen it freed.
	args.AllowStale = false
	// Where ACLs are on, the node's secret is its token: the servers then
	// show it the volumes it holds claims on.
	args.AuthToken = c.id.SecretID
	var reply structs.CSIVolumeGetResponse
	err := c.server.CSIVolumeGet(args, &reply)
	return claimReleased(u.AllocID, reply.Volume, err)
}

// claimReleased reads the answer to a volume read (vol, or the error of
// the read) for an allocation: the claim is released when the volume is
// gone or holds no claim of the allocation, current or past. A past claim
// is a release under way: the servers finish it, with or without the node
// step. Any other error says nothing and is returned.
func claimReleased(allocID string, vol *structs.CSIVolume, err error) (bool, error) {
	switch {
	case structs.CodeOf(err) == structs.ErrCodeNotFound:
		// The volume's namespace is gone, and the volume with it.
		return true, nil
	case err != nil:
		return false, err
	case vol == nil:
		return true, nil
	}
	for _, claims := range []map[string]*structs.CSIVolumeClaim{vol.ReadClaims, vol.WriteClaims, vol.PastClaims} {
		if _, ok := claims[allocID]; ok {
			return false, nil
		}
	}
	return true, nil
}
