package volumewatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// Release steps, as hooks and reports name them.
const (
	StepNode       = "node-detach"
	StepController = "controller-detach"
	StepFree       = "free"
)

// result is what a pass over one volume's past claims came to.
type result struct {
	// next is when the volume should be looked at again; zero: only when
	// something changes.
	next time.Time
	// err is the first failed step's error.
	err error
	// waiting are the allocations whose claims wait for their client.
	waiting []string
	// parked are the nodes whose gates hold claims of the volume back.
	parked []string
}

// errWaitingForClient ends a claim's pass while its allocation's client
// still runs the tasks: not a failure, nothing was tried.
var errWaitingForClient = errors.New(structs.WaitingForClientNote)

// process releases the past claims of one volume, one claim after the
// other, each as far as it goes. With nodeID set only claims on that node
// are released, and force ignores their backoff (an operator's detach);
// report, when set, is told of every step. The caller holds the volume's
// lock.
func (w *Watcher) process(ctx context.Context, k, nodeID string, force bool, report ...func(string)) result {
	say := func(format string, args ...any) {
		if len(report) > 0 {
			report[0](fmt.Sprintf(format, args...))
		}
	}
	ns, id := splitKey(k)
	st := w.cfg.Backend.State()
	vol, err := st.CSIVolumeByID(nil, ns, id)
	if err != nil {
		return result{next: w.clock.Now().Add(w.cfg.BaseDelay), err: err}
	}
	if vol == nil {
		// Deregistered meanwhile: nothing left to release.
		say("volume %q is gone", id)
		return result{}
	}
	var res result
	// A forced pass checks each node afresh once, not once per claim.
	checked := map[string]bool{}
	for _, allocID := range slices.Sorted(maps.Keys(vol.PastClaims)) {
		if ctx.Err() != nil {
			return result{err: ctx.Err()}
		}
		claim := vol.PastClaims[allocID].Copy()
		if nodeID != "" && claim.NodeID != nodeID {
			continue
		}
		if due := time.Unix(0, claim.NextAttempt); !force && claim.NextAttempt != 0 && due.After(w.clock.Now()) && !claim.AttemptInFlight {
			// Backing off after a failure.
			res.next = earliest(res.next, due)
			continue
		}
		// An attempt in flight is never this watcher's own: the volume's
		// lock is held for the whole of each of its attempts, and it
		// records each end. It is a previous leader's, whose call the
		// client cancelled when that leader's stream ended (it died, or
		// it stepped down and cancelled its calls): retried now rather
		// than at its deadline.
		if claim.AttemptInFlight {
			say("claim of allocation %q: attempt %d of a previous leader did not finish; retrying", allocID, claim.Attempts)
		}
		err := w.advance(ctx, vol, claim, force && !checked[claim.NodeID], say)
		checked[claim.NodeID] = true
		unreachable, parked := asUnreachable(err)
		switch {
		case err == nil:
		case errors.Is(err, errWaitingForClient):
			// The client's report moves the claim on, and that write
			// wakes the watch: nothing to schedule.
			say("claim of allocation %q: %s", allocID, structs.WaitingForClientNote)
			res.waiting = append(res.waiting, allocID)
		case ctx.Err() != nil:
			return result{err: ctx.Err()}
		case parked:
			// Parked on its node's gate, with no retry time of its own;
			// the claim says why once, not at every check of the node.
			w.recordParked(ns, vol, claim, unreachable)
			say("claim of allocation %q: %s (attempt %d; waits for the node)", allocID, claim.LastError, claim.Attempts)
			res.parked = append(res.parked, claim.NodeID)
			if res.err == nil {
				res.err = structs.Wrap(unreachable, "node detach")
			}
		default:
			if cur, rerr := w.cfg.Backend.State().CSIVolumeByID(nil, ns, id); rerr == nil && cur == nil {
				// Deregistered during the step (its checkpoint found no
				// volume): nothing left to release or to retry.
				say("volume %q is gone", id)
				return result{}
			}
			due := w.recordFailure(ns, vol, claim, err)
			say("claim of allocation %q: %v (attempt %d; next at %s)", allocID, structs.MessageOf(err), claim.Attempts,
				due.Format(time.RFC3339))
			// The other claims go on: a claim failing on its node must not
			// hold back those on other nodes (its retry time would come
			// first every time, and it would fail first again).
			res.next = earliest(res.next, due)
			if res.err == nil {
				res.err = err
			}
		}
	}
	return res
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// advance takes one past claim through the release, checkpointing after
// each step, until it is freed, a step fails, or it waits for its client.
// A node step done and the controller step after it share one checkpoint.
func (w *Watcher) advance(ctx context.Context, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim, fresh bool, say func(string, ...any)) error {
	st := w.cfg.Backend.State()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// write says whether the step this pass makes is checkpointed on
		// its own.
		write := true
		switch claim.State {
		case structs.CSIVolumeClaimStateTaken, structs.CSIVolumeClaimStateWaitingForClient, structs.CSIVolumeClaimStateUnpublishing:
			node, err := st.NodeByID(nil, claim.NodeID)
			if err != nil {
				return err
			}
			if structs.NodeDownOrGone(node) {
				why := "gone"
				if node != nil {
					why = "down"
				}
				claim.Note = fmt.Sprintf("node step skipped: node %s is %s", claim.NodeID, why)
				w.logger.Info("skipping the node step of a release", "volume", vol.ID, "alloc", claim.AllocationID,
					"node", claim.NodeID, "node_status", why)
				say("%s", claim.Note)
			} else {
				if claim.State == structs.CSIVolumeClaimStateWaitingForClient {
					// The state store moves the claim on when the client
					// reports the tasks stopped; until then an unpublish
					// would pull the volume from under them.
					a, err := st.AllocByID(nil, claim.AllocationID)
					if err != nil {
						return err
					}
					if a != nil && !a.ClientTerminal() {
						return errWaitingForClient
					}
				}
				// While no server reaches the node's agent, its claims
				// wait on the node's gate without a call each (an
				// operator's detach checks the node afresh).
				if err := w.closedGate(claim.NodeID); err != nil {
					if !fresh {
						return err
					}
					if err := w.nodeReachable(ctx, claim.NodeID, true); err != nil {
						return err
					}
				}
				w.beginAttempt(vol, claim)
				w.hook(w.cfg.Hooks.Attempt, StepNode)
				err := w.step(ctx, "node/"+claim.NodeID, func(ctx context.Context) error {
					return w.cfg.Backend.NodeDetach(ctx, &structs.ClientCSINodeDetachVolumeRequest{
						PluginID: vol.PluginID, VolumeID: vol.ID, ExternalID: vol.RemoteID(),
						AllocID: claim.AllocationID, AccessMode: claim.AccessMode, AttachmentMode: claim.AttachmentMode,
						ReadOnly:        claim.Mode == structs.CSIVolumeClaimRead,
						ClientCSITarget: structs.ClientCSITarget{NodeID: claim.NodeID},
						WriteRequest:    structs.WriteRequest{Namespace: vol.Namespace},
					})
				})
				if err != nil {
					if ctx.Err() != nil {
						// This leader stepped down or is shutting down: the
						// call was cancelled, not failed, and the next
						// leader repeats the step.
						return ctx.Err()
					}
					if structs.CodeOf(err) == structs.ErrCodeNoNodeConn {
						// The agent could not be reached: one cheap check
						// of the node (shared by the node's claims that
						// failed alike) decides whether the claim waits
						// on its node's gate or backs off on its own
						// (the agent is connected but did not answer).
						if uerr := w.nodeReachable(ctx, claim.NodeID, false); uerr != nil {
							if ctx.Err() != nil {
								return ctx.Err()
							}
							return uerr
						}
					}
					w.hook(w.cfg.Hooks.Failure, StepNode)
					return structs.Wrap(err, "node detach")
				}
				claim.Note = ""
				say("node detach of allocation %q on node %q done", claim.AllocationID, claim.NodeID)
				// The node step done is not written on its own: the
				// controller step follows at once, and its write (the
				// free) or its failure's records the claim node-detached
				// too. A leader that dies in between leaves the claim
				// where it was, and the next one repeats the node step,
				// which is idempotent (the volume is already unpublished
				// there). One Raft write and one commit wait per claim
				// fewer. A skipped node step is written on its own, with
				// its note.
				write = false
			}
			claim.State = structs.CSIVolumeClaimStateNodeDetached
		case structs.CSIVolumeClaimStateNodeDetached:
			detach, why, err := w.needsControllerDetach(st, vol, claim)
			if err != nil {
				return err
			}
			if detach {
				w.beginAttempt(vol, claim)
				w.hook(w.cfg.Hooks.Attempt, StepController)
				err := w.step(ctx, "controller/"+vol.PluginID, func(ctx context.Context) error {
					secrets, err := w.cfg.Backend.VolumeSecrets(vol)
					if err != nil {
						return err
					}
					return w.cfg.Backend.ControllerDetach(ctx, &structs.ClientCSIControllerDetachVolumeRequest{
						PluginID: vol.PluginID, VolumeID: vol.RemoteID(), ClientCSINodeID: claim.ExternalNodeID,
						Secrets: secrets, WriteRequest: structs.WriteRequest{Namespace: vol.Namespace},
					})
				})
				if err != nil {
					if ctx.Err() != nil {
						// This leader stepped down or is shutting down: the
						// call was cancelled, not failed, and the next
						// leader repeats the step.
						return ctx.Err()
					}
					w.hook(w.cfg.Hooks.Failure, StepController)
					return structs.Wrap(err, "controller detach")
				}
				say("controller detach of allocation %q from node %q done", claim.AllocationID, claim.NodeID)
			} else {
				say("controller detach of allocation %q skipped: %s", claim.AllocationID, why)
			}
			// Controller-detached and free are one write: nothing happens
			// between them, and a leader that dies before the write
			// leaves the claim node-detached, whose controller step is
			// idempotent against "already detached".
			claim.State = structs.CSIVolumeClaimStateReadyToFree
		case structs.CSIVolumeClaimStateControllerDetached:
			// Written by a leader of a version that checkpointed the
			// controller step on its own.
			claim.State = structs.CSIVolumeClaimStateReadyToFree
		default:
			return fmt.Errorf("claim of allocation %q is in unexpected state %s", claim.AllocationID, claim.State)
		}
		// Progress clears the failure bookkeeping.
		claim.Attempts, claim.LastError, claim.NextAttempt, claim.AttemptInFlight = 0, "", 0, false
		if !write {
			continue
		}
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

// step runs one step's call within StepTimeout, once the client it goes
// to (client) has fewer than MaxCallsPerClient release calls in flight.
// The wait for a slot is not part of the call's deadline.
func (w *Watcher) step(ctx context.Context, client string, call func(context.Context) error) error {
	release, err := w.clients.acquire(ctx, client)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	return call(ctx)
}

// beginAttempt records, before a retry of a failed step, that the attempt
// runs until its deadline at the latest: the claim's next attempt is then,
// not the past due time that started it, for as long as the call lasts,
// and it is marked in flight, so that a new leader retries it at once if
// this one dies meanwhile. A first attempt writes nothing (an ordinary
// release costs no extra Raft entry): a new leader finds it due anyway.
func (w *Watcher) beginAttempt(vol *structs.CSIVolume, claim *structs.CSIVolumeClaim) {
	if claim.Attempts == 0 {
		return
	}
	now := w.clock.Now()
	claim.NextAttempt = now.Add(w.cfg.StepTimeout).UnixNano()
	claim.AttemptInFlight = true
	if err := w.cfg.Backend.Checkpoint(vol.Namespace, vol.ID, claim, now); err != nil {
		w.logger.Warn("recording the start of a release attempt", "volume", vol.ID, "alloc", claim.AllocationID, "error", err)
	}
}

// needsControllerDetach decides the controller step: skipped when the
// plugin has no controller that detaches, or while another allocation on
// the same node still uses the volume (it must stay attached there).
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
	other, why, err := cur.OtherUserOnNode(claim.AllocationID, claim.NodeID, func(id string) (*structs.Allocation, error) {
		return st.AllocByID(nil, id)
	})
	if err != nil {
		return false, "", err
	}
	if other != "" {
		return false, why, nil
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
	claim.AttemptInFlight = false
	if cerr := w.cfg.Backend.Checkpoint(ns, vol.ID, claim, now); cerr != nil {
		w.logger.Warn("recording a failed release step", "volume", vol.ID, "alloc", claim.AllocationID, "error", cerr)
	}
	return due
}

// recordParked records on a claim, the first time only, that its node
// step waits for its node's agent to connect: a failed attempt whose error
// and note say so, and no retry time of its own (its node's gate has it).
func (w *Watcher) recordParked(ns string, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim, why *errNodeUnreachable) {
	msg := structs.MessageOf(structs.Wrap(why, "node detach"))
	note := nodeNote(claim.NodeID)
	if claim.LastError == msg && claim.Note == note && claim.NextAttempt == 0 && !claim.AttemptInFlight {
		return
	}
	w.hook(w.cfg.Hooks.Failure, StepNode)
	claim.Attempts++
	claim.LastError, claim.Note = msg, note
	claim.NextAttempt, claim.AttemptInFlight = 0, false
	if err := w.cfg.Backend.Checkpoint(ns, vol.ID, claim, w.clock.Now()); err != nil {
		w.logger.Warn("recording a release step that waits for its node", "volume", vol.ID, "alloc", claim.AllocationID, "error", err)
	}
}

func (w *Watcher) hook(f func(string), step string) {
	if f != nil {
		f(step)
	}
}

// Detach releases now, ignoring backoff, the past claims of a volume on a
// node, and reports every step. It holds the volume's lock, so it waits
// for any operation on the volume in flight. A claim whose allocation's
// client still runs the tasks is waited for up to waitForClient; the error
// then says so (ErrCodeConflict). It fails when the watcher is not running
// (this server is not the leader).
func (w *Watcher) Detach(ctx context.Context, namespace, volumeID, nodeID string, waitForClient time.Duration) ([]string, error) {
	w.mu.Lock()
	running := w.queue != nil
	w.mu.Unlock()
	if !running {
		return nil, structs.ErrNoLeader
	}
	k := key(namespace, volumeID)
	var steps []string
	reported := map[string]bool{}
	report := func(s string) {
		// A claim waited for is reported once, not at every pass.
		if !reported[s] {
			reported[s] = true
			steps = append(steps, s)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, waitForClient)
	defer cancel()
	for {
		// Watch the volume from before the pass, so that a client's
		// report landing during it is not missed.
		st := w.cfg.Backend.State()
		ws := memdb.NewWatchSet()
		ws.Add(st.AbandonCh())
		if _, err := st.CSIVolumeByID(ws, namespace, volumeID); err != nil {
			return steps, err
		}
		unlock, err := w.Lock(ctx, namespace, volumeID)
		if err != nil {
			return steps, err
		}
		res := w.process(ctx, k, nodeID, true, report)
		unlock()
		if q := w.currentQueue(); q != nil {
			for _, n := range res.parked {
				w.park(n, k, q)
			}
		}
		if len(res.waiting) == 0 || res.err != nil {
			return steps, res.err
		}
		if ws.WatchCtx(waitCtx) != nil {
			return steps, structs.ErrConflict("volume %q: allocation %q on node %q: %s; its release goes on once the client reports them stopped",
				volumeID, res.waiting[0], nodeID, structs.WaitingForClientNote)
		}
	}
}
