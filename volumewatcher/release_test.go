package volumewatcher

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

// A step of a release scenario: something happens (do), the watcher
// settles, and then exactly these plugin calls were made since the last
// step, in this order.
type releaseStep struct {
	name string
	do   func(t *testing.T, h *harness)
	// calls are the plugin calls made, in order; failed ones end in
	// "(failed)".
	calls []string
	// checkpoints, when not nil, are the claim checkpoints written.
	checkpoints []string
	// noWake says the write in do only touches bookkeeping: the watcher
	// must read it without starting a release of the volume.
	noWake bool
	check  func(t *testing.T, h *harness)
}

type releaseRow struct {
	name  string
	setup func(t *testing.T, h *harness)
	steps []releaseStep
}

// Expected plugin calls, by allocation and node label.
func nodeCall(alloc, node string) string { return fmt.Sprintf("%s %s on %s", callNode, alloc, node) }
func ctrlCall(node string) string        { return fmt.Sprintf("%s from %s", callController, node) }
func failed(call string) string          { return call + " (failed)" }

// Expected checkpoints of the release of a claim that went through every
// step, with the note its node step left: the controller step and the
// free are one write.
func releasedCheckpoints(alloc, note string) []string {
	if note == "" {
		// A node step done shares the controller step's write.
		return []string{alloc + " " + structs.CSIVolumeClaimStateReadyToFree.String()}
	}
	// A skipped node step is written on its own, with its note.
	var out []string
	for _, s := range []structs.CSIVolumeClaimState{structs.CSIVolumeClaimStateNodeDetached, structs.CSIVolumeClaimStateReadyToFree} {
		out = append(out, fmt.Sprintf("%s %s (%s)", alloc, s, note))
	}
	return out
}

var (
	errNodeRestarting = structs.NewError(structs.ErrCodeRetryable, "node plugin is restarting")
	errControllerBusy = "controller busy"
)

// withController registers a node running the plugin's controller (with
// attach/detach) and a node instance, and a node running only a node
// instance, where the allocations run.
func withController(h *harness) {
	h.addNode("ctrl", mock.NodeWithController("dev"))
	h.addNode("client", mock.Node("dev"))
	h.addVolume()
}

// advanceToNext moves the clock to the allocation's next attempt (less d).
func advanceToNext(alloc string, less time.Duration) func(t *testing.T, h *harness) {
	return func(t *testing.T, h *harness) { h.clock.AdvanceTo(h.nextAttempt(alloc).Add(-less)) }
}

func freed(allocs ...string) func(t *testing.T, h *harness) {
	return func(t *testing.T, h *harness) {
		for _, a := range allocs {
			h.mustFreed(a)
		}
	}
}

func TestWatcher_Release(t *testing.T) {
	rows := []releaseRow{
		{
			name:  "alloc terminal: node detach, controller detach, freed",
			setup: func(t *testing.T, h *harness) { withController(h); h.writer("a1", "client") },
			steps: []releaseStep{
				{name: "a running allocation is left alone"},
				{
					name:        "its allocation completes",
					do:          func(t *testing.T, h *harness) { h.complete("a1") },
					calls:       []string{nodeCall("a1", "client"), ctrlCall("client")},
					checkpoints: releasedCheckpoints("a1", ""),
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a1")
						v := h.volume()
						must.False(t, v.InUse())
						must.Eq(t, structs.CSIVolumeAccessModeUnknown, v.AccessMode, must.Sprint("the last free resets the modes"))
						must.Eq(t, structs.CSIVolumeAttachmentModeUnknown, v.AttachmentMode)

						// What the plugins are asked comes from the claim
						// and the volume, with nothing looked up again.
						h.backend.mu.Lock()
						defer h.backend.mu.Unlock()
						must.Len(t, 1, h.backend.nodeReqs)
						n := h.backend.nodeReqs[0]
						must.Eq(t, "dev", n.PluginID)
						must.Eq(t, h.vol.ID, n.VolumeID)
						must.Eq(t, h.vol.ExternalID, n.ExternalID)
						must.Eq(t, "a1", n.AllocID)
						must.Eq(t, h.nodes["client"].ID, n.NodeID)
						must.Eq(t, structs.CSIVolumeAccessModeSingleNodeWriter, n.AccessMode)
						must.Eq(t, structs.CSIVolumeAttachmentModeFilesystem, n.AttachmentMode)
						must.False(t, n.ReadOnly)
						must.Len(t, 1, h.backend.ctrlReqs)
						c := h.backend.ctrlReqs[0]
						must.Eq(t, "dev", c.PluginID)
						must.Eq(t, h.vol.ExternalID, c.VolumeID)
						must.Eq(t, "ext-"+h.nodes["client"].ID, c.ClientCSINodeID)
						must.Eq(t, h.vol.Secrets, c.Secrets)

						h.hooks.Lock()
						defer h.hooks.Unlock()
						must.Eq(t, []string{StepNode, StepController, StepFree}, h.hooks.attempts)
						must.SliceEmpty(t, h.hooks.failures)
					},
				},
			},
		},
		{
			name:  "allocation stopped while its client runs it: nothing tried until the client reports the tasks stopped",
			setup: func(t *testing.T, h *harness) { withController(h); h.writer("a1", "client") },
			steps: []releaseStep{
				{
					name: "the servers stop it",
					do:   func(t *testing.T, h *harness) { h.stopAllocs("a1") },
					check: func(t *testing.T, h *harness) {
						c := h.past("a1")
						must.NotNil(t, c)
						must.Eq(t, structs.CSIVolumeClaimStateWaitingForClient, c.State)
						must.Eq(t, structs.WaitingForClientNote, c.Note)
						must.Zero(t, c.Attempts, must.Sprint("waiting is not an attempt"))
						must.Eq(t, "", c.LastError)
						must.Zero(t, c.NextAttempt)
						_, queued := h.queued(h.key())
						must.False(t, queued, must.Sprint("nothing to retry: the client's report wakes the volume"))
						h.hooks.Lock()
						defer h.hooks.Unlock()
						must.SliceEmpty(t, h.hooks.attempts)
						must.SliceEmpty(t, h.hooks.failures)
					},
				},
				{
					name:  "much later, still nothing",
					do:    func(t *testing.T, h *harness) { h.clock.Advance(time.Hour) },
					check: func(t *testing.T, h *harness) { must.Zero(t, h.past("a1").Attempts) },
				},
				{
					name:        "its client reports the tasks stopped",
					do:          func(t *testing.T, h *harness) { h.complete("a1") },
					calls:       []string{nodeCall("a1", "client"), ctrlCall("client")},
					checkpoints: releasedCheckpoints("a1", ""),
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a1")
						h.hooks.Lock()
						defer h.hooks.Unlock()
						must.Eq(t, []string{StepNode, StepController, StepFree}, h.hooks.attempts)
						must.SliceEmpty(t, h.hooks.failures)
					},
				},
			},
		},
		{
			name:  "a claim waiting for its client whose node goes down: node step skipped, freed",
			setup: func(t *testing.T, h *harness) { withController(h); h.writer("a1", "client"); h.stopAllocs("a1") },
			steps: []releaseStep{
				{name: "waiting"},
				{
					name:        "the node is down beyond its grace: the allocation is lost",
					do:          func(t *testing.T, h *harness) { h.nodeDown("client") },
					calls:       []string{ctrlCall("client")},
					checkpoints: releasedCheckpoints("a1", "node step skipped: node client is down"),
					check:       freed("a1"),
				},
			},
		},
		{
			name: "a claim waiting for its client keeps the volume attached to the node for another claim released there",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.reader("a1", "client")
				h.reader("a2", "client")
				h.stopAllocs("a2")
				h.complete("a1")
			},
			steps: []releaseStep{
				{
					calls:       []string{nodeCall("a1", "client")},
					checkpoints: releasedCheckpoints("a1", ""),
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a1")
						must.Eq(t, structs.CSIVolumeClaimStateWaitingForClient, h.past("a2").State)
					},
				},
				{
					name:        "the other allocation's client reports its tasks stopped",
					do:          func(t *testing.T, h *harness) { h.complete("a2") },
					calls:       []string{nodeCall("a2", "client"), ctrlCall("client")},
					checkpoints: releasedCheckpoints("a2", ""),
					check:       freed("a2"),
				},
			},
		},
		{
			name:  "node down: node step skipped with a note, controller detach, freed",
			setup: func(t *testing.T, h *harness) { withController(h); h.writer("a1", "client"); h.nodeDown("client") },
			steps: []releaseStep{{
				calls:       []string{ctrlCall("client")},
				checkpoints: releasedCheckpoints("a1", "node step skipped: node client is down"),
				check:       freed("a1"),
			}},
		},
		{
			name: "node gone from state: node step skipped with a note, controller detach, freed",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				h.deleteNode("client")
			},
			steps: []releaseStep{{
				calls:       []string{ctrlCall("client")},
				checkpoints: releasedCheckpoints("a1", "node step skipped: node client is gone"),
				check:       freed("a1"),
			}},
		},
		{
			name: "controller not required: node detach only, freed",
			setup: func(t *testing.T, h *harness) {
				h.addNode("client", mock.Node("dev"))
				h.addVolume()
				h.writer("a1", "client")
				h.complete("a1")
			},
			steps: []releaseStep{{
				calls:       []string{nodeCall("a1", "client")},
				checkpoints: releasedCheckpoints("a1", ""),
				check:       freed("a1"),
			}},
		},
		{
			name: "controller without attach/detach: node detach only, freed",
			setup: func(t *testing.T, h *harness) {
				n := mock.NodeWithController("dev")
				n.CSIControllerPlugins["dev"].ControllerInfo.SupportsAttachDetach = false
				h.addNode("client", n)
				h.addVolume()
				h.writer("a1", "client")
				h.complete("a1")
			},
			steps: []releaseStep{{
				calls:       []string{nodeCall("a1", "client")},
				checkpoints: releasedCheckpoints("a1", ""),
				check:       freed("a1"),
			}},
		},
		{
			name: "another live reader on the node holds the volume (multi-node-reader): controller step skipped",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.reader("a1", "client")
				h.reader("a2", "client")
				h.complete("a1")
			},
			steps: []releaseStep{
				{
					calls:       []string{nodeCall("a1", "client")},
					checkpoints: releasedCheckpoints("a1", ""),
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a1")
						v := h.volume()
						must.MapContainsKey(t, v.ReadClaims, "a2")
						must.Eq(t, structs.CSIVolumeAccessModeMultiNodeReader, v.AccessMode, must.Sprint("modes stay while a claim remains"))
					},
				},
				{
					name:  "the last allocation on the node ends: now the controller detaches",
					do:    func(t *testing.T, h *harness) { h.complete("a2") },
					calls: []string{nodeCall("a2", "client"), ctrlCall("client")},
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a2")
						must.Eq(t, structs.CSIVolumeAccessModeUnknown, h.volume().AccessMode)
					},
				},
			},
		},
		{
			name: "a live reader on the node holds the volume after its writer ends (multi-node-single-writer)",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.claim("a1", "client", structs.CSIVolumeClaimWrite, structs.CSIVolumeAccessModeMultiNodeSingleWriter)
				h.claim("a2", "client", structs.CSIVolumeClaimRead, structs.CSIVolumeAccessModeMultiNodeSingleWriter)
				h.complete("a1")
			},
			steps: []releaseStep{{
				calls: []string{nodeCall("a1", "client")},
				check: func(t *testing.T, h *harness) {
					h.mustFreed("a1")
					must.MapContainsKey(t, h.volume().ReadClaims, "a2")
				},
			}},
		},
		{
			name: "a live allocation on another node does not hold the controller step",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.addNode("client2", mock.Node("dev"))
				h.reader("a1", "client")
				h.reader("a2", "client2")
				h.complete("a1")
			},
			steps: []releaseStep{{
				calls: []string{nodeCall("a1", "client"), ctrlCall("client")},
				check: func(t *testing.T, h *harness) {
					h.mustFreed("a1")
					must.MapContainsKey(t, h.volume().ReadClaims, "a2")
				},
			}},
		},
		{
			name: "two ended allocations on one node: the controller detaches after both node detaches",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.reader("a1", "client")
				h.reader("a2", "client")
				h.complete("a1", "a2")
			},
			steps: []releaseStep{{
				calls: []string{nodeCall("a1", "client"), nodeCall("a2", "client"), ctrlCall("client")},
				check: freed("a1", "a2"),
			}},
		},
		{
			name: "node plugin failing then recovering: backoff 1s, 2s, 4s, no controller call until the node step succeeds",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				h.backend.fail(callNode, "", errNodeRestarting, 3)
			},
			steps: []releaseStep{
				{
					calls:       []string{failed(nodeCall("a1", "client"))},
					checkpoints: []string{"a1 unpublishing attempt 1"},
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 1, time.Second, "node detach: node plugin is restarting")
						h.hooks.Lock()
						defer h.hooks.Unlock()
						must.Eq(t, []string{StepNode}, h.hooks.failures)
					},
				},
				{
					name:  "just before the next attempt",
					do:    advanceToNext("a1", time.Nanosecond),
					calls: nil,
					check: func(t *testing.T, h *harness) { must.Eq(t, 1, h.past("a1").Attempts) },
				},
				{
					name:        "second attempt",
					do:          advanceToNext("a1", 0),
					calls:       []string{failed(nodeCall("a1", "client"))},
					checkpoints: []string{"a1 unpublishing retrying after attempt 1", "a1 unpublishing attempt 2"},
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 2, 2*time.Second, "node detach: node plugin is restarting")
					},
				},
				{
					name:  "third attempt",
					do:    advanceToNext("a1", 0),
					calls: []string{failed(nodeCall("a1", "client"))},
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 3, 4*time.Second, "node detach: node plugin is restarting")
					},
				},
				{name: "just before the fourth", do: advanceToNext("a1", time.Nanosecond)},
				{
					name:  "fourth attempt succeeds",
					do:    advanceToNext("a1", 0),
					calls: []string{nodeCall("a1", "client"), ctrlCall("client")},
					checkpoints: append([]string{"a1 unpublishing retrying after attempt 3"},
						releasedCheckpoints("a1", "")...),
					check: freed("a1"),
				},
			},
		},
		{
			name: "a failing node does not hold back the release of another claim of the volume",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.addNode("client2", mock.Node("dev"))
				h.reader("a1", "client")
				h.reader("a2", "client2")
				h.complete("a1", "a2")
				h.backend.fail(callNode, h.nodes["client"].ID, errNodeRestarting, -1)
			},
			steps: []releaseStep{
				{
					calls: []string{failed(nodeCall("a1", "client")), nodeCall("a2", "client2"), ctrlCall("client2")},
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a2")
						h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 1, time.Second, "node detach: node plugin is restarting")
					},
				},
				{
					do:    advanceToNext("a1", 0),
					calls: []string{failed(nodeCall("a1", "client"))},
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 2, 2*time.Second, "node detach: node plugin is restarting")
					},
				},
			},
		},
		{
			name: "volume deregistered while backing off: the key drops out without error or further calls",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				h.backend.fail(callNode, "", errNodeRestarting, -1)
			},
			steps: []releaseStep{
				{
					calls: []string{failed(nodeCall("a1", "client"))},
					check: func(t *testing.T, h *harness) { h.mark = h.nextAttempt("a1") },
				},
				{
					name: "force-deregistered",
					do: func(t *testing.T, h *harness) {
						must.NoError(t, h.store.CSIVolumeDeregister(h.backend.nextIndex(), h.vol.Namespace, []string{h.vol.ID}, true))
					},
					check: func(t *testing.T, h *harness) { must.Nil(t, h.volume()) },
				},
				{
					name: "its next attempt passes",
					do:   func(t *testing.T, h *harness) { h.clock.AdvanceTo(h.mark) },
					check: func(t *testing.T, h *harness) {
						must.Zero(t, h.w.QueueDepth())
						must.SliceEmpty(t, h.backend.takeCheckpoints())
					},
				},
			},
		},
		{
			name: "volume deregistered during its node detach: the key drops out without error or further calls",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				h.backend.setDuring(func(_ context.Context, kind string) {
					if err := h.store.CSIVolumeDeregister(h.backend.nextIndex(), h.vol.Namespace, []string{h.vol.ID}, true); err != nil {
						t.Errorf("force-deregistering during the %s: %v", kind, err)
					}
				})
			},
			steps: []releaseStep{
				{
					calls: []string{nodeCall("a1", "client")},
					check: func(t *testing.T, h *harness) {
						must.Nil(t, h.volume())
						must.Zero(t, h.w.QueueDepth())
					},
				},
				{
					name: "much later",
					do:   func(t *testing.T, h *harness) { h.clock.Advance(time.Hour) },
				},
			},
		},
		{
			name: "a write that only changes bookkeeping neither wakes the volume early nor resets its backoff",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.addNode("client2", mock.Node("dev"))
				h.reader("a1", "client")
				h.reader("a2", "client2")
				h.complete("a1", "a2")
				h.backend.fail(callNode, "", errNodeRestarting, -1)
			},
			steps: []releaseStep{
				{
					calls:       []string{failed(nodeCall("a1", "client")), failed(nodeCall("a2", "client2"))},
					checkpoints: []string{"a1 unpublishing attempt 1", "a2 unpublishing attempt 1"},
					check: func(t *testing.T, h *harness) {
						h.mark = earliest(h.nextAttempt("a1"), h.nextAttempt("a2"))
					},
				},
				{
					name: "the volume's secrets are registered again",
					do: func(t *testing.T, h *harness) {
						v := h.vol.Copy()
						v.Secrets = structs.CSISecrets{"token": "rotated"}
						must.NoError(t, h.store.UpsertCSIVolume(h.backend.nextIndex(), []*structs.CSIVolume{v}))
					},
					noWake: true,
					check: func(t *testing.T, h *harness) {
						must.Eq(t, "rotated", h.volume().Secrets["token"])
						must.Eq(t, h.mark, earliest(h.nextAttempt("a1"), h.nextAttempt("a2")))
						must.Eq(t, 1, h.past("a1").Attempts)
					},
				},
				{
					name: "another claim's attempts are checkpointed",
					do: func(t *testing.T, h *harness) {
						c := h.past("a2")
						c.Attempts, c.LastError = 7, "recorded elsewhere"
						must.NoError(t, h.backend.Checkpoint(h.vol.Namespace, h.vol.ID, c, h.clock.Now()))
					},
					checkpoints: []string{"a2 unpublishing attempt 7"},
					noWake:      true,
					check: func(t *testing.T, h *harness) {
						must.Eq(t, h.mark, earliest(h.nextAttempt("a1"), h.nextAttempt("a2")))
						must.Eq(t, 1, h.past("a1").Attempts)
						must.Eq(t, 7, h.past("a2").Attempts)
					},
				},
				{
					name: "just before the next attempt",
					do: func(t *testing.T, h *harness) {
						h.backend.clearFailures()
						h.clock.AdvanceTo(h.mark.Add(-time.Nanosecond))
					},
				},
				{
					name: "both attempts are due",
					do: func(t *testing.T, h *harness) {
						// Both times are read before the clock moves: once
						// the earlier is due the watcher may free that claim.
						a1, a2 := h.nextAttempt("a1"), h.nextAttempt("a2")
						if a2.After(a1) {
							a1 = a2
						}
						h.clock.AdvanceTo(a1)
					},
					calls: []string{nodeCall("a1", "client"), ctrlCall("client"), nodeCall("a2", "client2"), ctrlCall("client2")},
					check: func(t *testing.T, h *harness) {
						h.mustFreed("a1")
						h.mustFreed("a2")
						h.backend.mu.Lock()
						defer h.backend.mu.Unlock()
						must.Eq(t, "rotated", h.backend.ctrlReqs[len(h.backend.ctrlReqs)-1].Secrets["token"],
							must.Sprint("the controller gets the secrets as they are now"))
					},
				},
			},
		},
		{
			name: "a next attempt left by a previous leader is honoured by a new watcher",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				h.backend.fail(callNode, "", errNodeRestarting, 1)
			},
			steps: []releaseStep{
				{
					calls: []string{failed(nodeCall("a1", "client"))},
					check: func(t *testing.T, h *harness) { h.mark = h.nextAttempt("a1") },
				},
				{
					name: "leadership moves to a new watcher",
					do:   func(t *testing.T, h *harness) { h.stop(); h.start() },
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateUnpublishing, 1, h.mark.Sub(h.clock.Now()), "node detach: node plugin is restarting")
						at, _ := h.queued(h.key())
						must.Eq(t, h.mark, at)
					},
				},
				{do: advanceToNext("a1", time.Nanosecond)},
				{
					do:    advanceToNext("a1", 0),
					calls: []string{nodeCall("a1", "client"), ctrlCall("client")},
					check: freed("a1"),
				},
			},
		},
		{
			name: "a node-detached checkpoint left by a previous leader resumes at the controller step",
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				c := h.past("a1")
				c.State = structs.CSIVolumeClaimStateNodeDetached
				must.NoError(t, h.backend.Checkpoint(h.vol.Namespace, h.vol.ID, c, h.clock.Now()))
				h.backend.takeCheckpoints()
			},
			steps: []releaseStep{{
				calls:       []string{ctrlCall("client")},
				checkpoints: []string{"a1 ready-to-free"},
				check:       freed("a1"),
			}},
		},
	}
	for _, code := range []structs.ErrorCode{structs.ErrCodeRetryable, structs.ErrCodeNoNodeConn,
		structs.ErrCodeNoLeader, structs.ErrCodeInternal} {
		rows = append(rows, releaseRow{
			name: fmt.Sprintf("controller failing with %s then succeeding: one node detach", code),
			setup: func(t *testing.T, h *harness) {
				withController(h)
				h.writer("a1", "client")
				h.complete("a1")
				h.backend.fail(callController, "", structs.NewError(code, "%s", errControllerBusy), 2)
			},
			steps: []releaseStep{
				{
					calls:       []string{nodeCall("a1", "client"), failed(ctrlCall("client"))},
					checkpoints: []string{"a1 node-detached attempt 1"},
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateNodeDetached, 1, time.Second, "controller detach: "+errControllerBusy)
					},
				},
				{
					do:    advanceToNext("a1", 0),
					calls: []string{failed(ctrlCall("client"))},
					check: func(t *testing.T, h *harness) {
						h.mustBackoff("a1", structs.CSIVolumeClaimStateNodeDetached, 2, 2*time.Second, "controller detach: "+errControllerBusy)
					},
				},
				{
					do:    advanceToNext("a1", 0),
					calls: []string{ctrlCall("client")},
					checkpoints: append([]string{"a1 node-detached retrying after attempt 2"},
						releasedCheckpoints("a1", "")...),
					check: freed("a1"),
				},
			},
		})
	}

	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			h := newHarness(t)
			row.setup(t, h)
			h.start()
			for i, s := range row.steps {
				name := s.name
				if name == "" {
					name = fmt.Sprintf("step %d", i)
				}
				passes, reads := h.backend.passesStarted.Load(), h.backend.volumeReads.Load()
				if s.do != nil {
					s.do(t, h)
				}
				if s.noWake {
					h.settleAfter(passes)
					must.Eq(t, reads, h.backend.volumeReads.Load(), must.Sprintf("%s: the write woke the volume", name))
				} else {
					h.settle()
				}
				mustCalls(t, name, s.calls, h.backend.takeCalls())
				checkpoints := h.backend.takeCheckpoints()
				if s.checkpoints != nil {
					mustCalls(t, name+": checkpoints", s.checkpoints, checkpoints)
				}
				if s.check != nil {
					s.check(t, h)
				}
			}
			must.SliceEmpty(t, h.backend.overlaps(), must.Sprint("two plugin calls ran at once on a volume"))
		})
	}
}

func mustCalls(t *testing.T, step string, want, got []string) {
	t.Helper()
	if !slices.Equal(want, got) {
		t.Fatalf("%s:\nwant %q\n got %q", step, want, got)
	}
}
