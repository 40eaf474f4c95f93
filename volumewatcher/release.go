package volumewatcher

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/volplane/volplane/structs"
)

// Release steps, as hooks and reports name them.
const (
	StepNode       = "node-detach"
	StepController = "controller-detach"
	StepFree       = "free"
)

// process releases the past claims of one volume, one claim after the
// other, each as far as it goes. It returns when the key should be looked
// at again (zero: only when something changes) and the first error. With
// nodeID set only claims on that node are released, and force ignores
// their backoff (an operator's detach); report, when set, is told of every
// step.
func (w *Watcher) process(ctx context.Context, k, nodeID string, force bool, report ...func(string)) (time.Time, error) {
	say := func(format string, args ...any) {
		if len(report) > 0 {
			report[0](fmt.Sprintf(format, args...))
		}
	}
	ns, id := splitKey(k)
	st := w.cfg.Backend.State()
	vol, err := st.CSIVolumeByID(nil, ns, id)
	if err != nil {
		return w.clock.Now().Add(w.cfg.BaseDelay), err
	}
	if vol == nil {
		// Deregistered meanwhile: nothing left to release.
		say("volume %q is gone", id)
		return time.Time{}, nil
	}
	var next time.Time
	var firstErr error
	for _, allocID := range slices.Sorted(maps.Keys(vol.PastClaims)) {
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		claim := vol.PastClaims[allocID].Copy()
		if nodeID != "" && claim.NodeID != nodeID {
			continue
		}
		if due := time.Unix(0, claim.NextAttempt); !force && claim.NextAttempt != 0 && due.After(w.clock.Now()) {
			// Backing off after a failure, perhaps from a previous leader.
			next = earliest(next, due)
			continue
		}
		if err := w.advance(ctx, vol, claim, say); err != nil {
			if ctx.Err() != nil {
				return time.Time{}, ctx.Err()
			}
			if cur, rerr := w.cfg.Backend.State().CSIVolumeByID(nil, ns, id); rerr == nil && cur == nil {
				// Deregistered during the step (its checkpoint found no
				// volume): nothing left to release or to retry.
				say("volume %q is gone", id)
				return time.Time{}, nil
			}
			due := w.recordFailure(ns, vol, claim, err)
			say("claim of allocation %q: %v (attempt %d; next at %s)", allocID, structs.MessageOf(err), claim.Attempts,
				due.Format(time.RFC3339))
			// The other claims go on: a claim failing on its node must not
			// hold back those on other nodes (its retry time would come
			// first every time, and it would fail first again).
			next = earliest(next, due)
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return next, firstErr
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// advance takes one past claim through the release, checkpointing after
// each step, until it is freed or a step fails.
func (w *Watcher) advance(ctx context.Context, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim, say func(string, ...any)) error {
	st := w.cfg.Backend.State()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch claim.State {
		case structs.CSIVolumeClaimStateTaken, structs.CSIVolumeClaimStateUnpublishing:
			node, err := st.NodeByID(nil, claim.NodeID)
			if err != nil {
				return err
			}
			if node == nil || node.Status == structs.NodeStatusDown {
				why := "gone"
				if node != nil {
					why = "down"
				}
				claim.Note = fmt.Sprintf("node step skipped: node %s is %s", claim.NodeID, why)
				w.logger.Info("skipping the node step of a release", "volume", vol.ID, "alloc", claim.AllocationID,
					"node", claim.NodeID, "node_status", why)
				say("%s", claim.Note)
			} else {
				w.hook(w.cfg.Hooks.Attempt, StepNode)
				if err := w.cfg.Backend.NodeDetach(&structs.ClientCSINodeDetachVolumeRequest{
					PluginID: vol.PluginID, VolumeID: vol.ID, ExternalID: vol.RemoteID(),
					AllocID: claim.AllocationID, AccessMode: claim.AccessMode, AttachmentMode: claim.AttachmentMode,
					ReadOnly:        claim.Mode == structs.CSIVolumeClaimRead,
					ClientCSITarget: structs.ClientCSITarget{NodeID: claim.NodeID},
					WriteRequest:    structs.WriteRequest{Namespace: vol.Namespace},
				}); err != nil {
					w.hook(w.cfg.Hooks.Failure, StepNode)
					return structs.Wrap(err, "node detach")
				}
				claim.Note = ""
				say("node detach of allocation %q on node %q done", claim.AllocationID, claim.NodeID)
			}
			claim.State = structs.CSIVolumeClaimStateNodeDetached
		case structs.CSIVolumeClaimStateNodeDetached:
			detach, why, err := w.needsControllerDetach(st, vol, claim)
			if err != nil {
				return err
			}
			if detach {
				w.hook(w.cfg.Hooks.Attempt, StepController)
				if err := w.cfg.Backend.ControllerDetach(&structs.ClientCSIControllerDetachVolumeRequest{
					PluginID: vol.PluginID, VolumeID: vol.RemoteID(), ClientCSINodeID: claim.ExternalNodeID,
					Secrets: vol.Secrets, WriteRequest: structs.WriteRequest{Namespace: vol.Namespace},
				}); err != nil {
					w.hook(w.cfg.Hooks.Failure, StepController)
					return structs.Wrap(err, "controller detach")
				}
				say("controller detach of allocation %q from node %q done", claim.AllocationID, claim.NodeID)
			} else {
				say("controller detach of allocation %q skipped: %s", claim.AllocationID, why)
			}
			claim.State = structs.CSIVolumeClaimStateControllerDetached
		case structs.CSIVolumeClaimStateControllerDetached:
			claim.State = structs.CSIVolumeClaimStateReadyToFree
		default:
			return fmt.Errorf("claim of allocation %q is in unexpected state %s", claim.AllocationID, claim.State)
		}
		// Progress clears the failure bookkeeping.
		claim.Attempts, claim.LastError, claim.NextAttempt = 0, "", 0
		if err := w.cfg.Backend.Checkpoint(vol.Namespace, vol.ID, claim, w.clock.Now()); err != nil {
			return structs.Wrap(err, "checkpointing %s", claim.State)
		}
		if claim.State == structs.CSIVolumeClaimStateReadyToFree {
			w.hook(w.cfg.Hooks.Attempt, StepFree)
			say("claim of allocation %q freed", claim.AllocationID)
			return nil
		}
	}
}

// needsControllerDetach decides the controller step: skipped when the
// plugin has no controller that detaches, or while another live allocation
// on the same node still holds the volume (it must stay attached there).
func (w *Watcher) needsControllerDetach(st State, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim) (bool, string, error) {
	plugin, err := st.CSIPluginByID(nil, vol.PluginID)
	if err != nil {
		return false, "", err
	}
	if plugin == nil || !plugin.ControllerRequired || !plugin.SupportsAttachDetach() {
		return false, "the plugin's controller does not detach volumes", nil
	}
	// The volume as it is now: claims freed earlier in this pass are gone.
	cur, err := st.CSIVolumeByID(nil, vol.Namespace, vol.ID)
	if err != nil {
		return false, "", err
	}
	if cur == nil {
		return false, "", structs.ErrNotFound("volume %q not found", vol.ID)
	}
	for _, m := range []map[string]*structs.CSIVolumeClaim{cur.ReadClaims, cur.WriteClaims} {
		for allocID, c := range m {
			if allocID == claim.AllocationID || c.NodeID != claim.NodeID {
				continue
			}
			if past := cur.PastClaims[allocID]; past != nil {
				// Another claim being released on the node is still
				// published there until its node step is done: the
				// controller must not detach before it (its release
				// detaches instead).
				if past.State == structs.CSIVolumeClaimStateTaken || past.State == structs.CSIVolumeClaimStateUnpublishing {
					return false, fmt.Sprintf("allocation %q on the same node is not node-detached yet", allocID), nil
				}
				continue
			}
			a, err := st.AllocByID(nil, allocID)
			if err != nil {
				return false, "", err
			}
			if a != nil && !a.Terminal() {
				return false, fmt.Sprintf("allocation %q on the same node still uses the volume", allocID), nil
			}
		}
	}
	if claim.ExternalNodeID == "" {
		return false, "the claim has no provider node ID to detach from", nil
	}
	return true, "", nil
}

// recordFailure stores the failed attempt on the claim (attempts, error,
// next attempt, stamped here on the leader) and returns when to retry.
func (w *Watcher) recordFailure(ns string, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim, err error) time.Time {
	claim.Attempts++
	claim.LastError = structs.MessageOf(err)
	now := w.clock.Now()
	due := now.Add(w.backoff(claim.Attempts))
	claim.NextAttempt = due.UnixNano()
	if cerr := w.cfg.Backend.Checkpoint(ns, vol.ID, claim, now); cerr != nil {
		w.logger.Warn("recording a failed release step", "volume", vol.ID, "alloc", claim.AllocationID, "error", cerr)
	}
	return due
}

func (w *Watcher) hook(f func(string), step string) {
	if f != nil {
		f(step)
	}
}

// Detach releases now, ignoring backoff, the past claims of a volume on a
// node, and reports every step. It waits for any release of the volume in
// progress, so there is one operation at a time per volume. It fails when
// the watcher is not running (this server is not the leader).
func (w *Watcher) Detach(ctx context.Context, namespace, volumeID, nodeID string) ([]string, error) {
	w.mu.Lock()
	q := w.queue
	w.mu.Unlock()
	if q == nil {
		return nil, structs.ErrNoLeader
	}
	k := key(namespace, volumeID)
	if !q.Acquire(k, ctx.Done()) {
		return nil, structs.ErrNoLeader
	}
	defer q.Done(k)
	var steps []string
	_, err := w.process(ctx, k, nodeID, true, func(s string) { steps = append(steps, s) })
	return steps, err
}
