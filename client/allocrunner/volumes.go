package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// errAllocStopped ends a setup that the allocation's stop interrupted.
var errAllocStopped = errors.New("allocation stopped")

// stepRank orders the steps of a volume's setup.
func stepRank(step string) int {
	switch step {
	case structs.AllocVolumeStepClaimed:
		return 1
	case structs.AllocVolumeStepStaged:
		return 2
	case structs.AllocVolumeStepPublished:
		return 3
	}
	return 0
}

// setupVolumes claims, stages and publishes each CSI volume of the group,
// one after the other in alias order. A volume already published (by an
// earlier start of the agent) is left as it is. It returns errAllocStopped
// when a stop interrupted it, the context's error on shutdown, and
// otherwise the final error that fails the allocation.
func (r *allocRunner) setupVolumes(ctx context.Context) error {
	group := r.rec.Group
	for _, alias := range slices.Sorted(maps.Keys(group.Volumes)) {
		req := group.Volumes[alias]
		if req == nil || req.Type != structs.VolumeTypeCSI {
			continue
		}
		if err := r.setupVolume(ctx, alias, req); err != nil {
			if errors.Is(err, errAllocStopped) || ctx.Err() != nil {
				return err
			}
			r.updateVolume(alias, func(v *state.VolumeRecord) {
				v.State.Step, v.State.Waiting, v.State.NextRetry = structs.AllocVolumeStepFailed, "", 0
			})
			return fmt.Errorf("volume %s (%s): %s", alias, req.VolumeID(r.rec.Name), structs.MessageOf(err))
		}
	}
	return nil
}

// volume returns a copy of the record of a volume of the allocation, as a
// new one when there is none yet.
func (r *allocRunner) volume(alias string, req *structs.VolumeRequest) state.VolumeRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v := r.vols[alias]; v != nil {
		return *v
	}
	return r.newVolume(alias, req)
}

func (r *allocRunner) newVolume(alias string, req *structs.VolumeRequest) state.VolumeRecord {
	id := req.VolumeID(r.rec.Name)
	return state.VolumeRecord{
		Alias: alias, VolumeID: id, Namespace: r.rec.Namespace,
		AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, ReadOnly: req.ReadOnly,
		State: structs.AllocVolumeState{VolumeID: id, Step: structs.AllocVolumeStepClaiming},
	}
}

// updateVolume changes a volume's record with f, persists it, reports the
// allocation when what is reported changed, and returns a copy.
func (r *allocRunner) updateVolume(alias string, f func(v *state.VolumeRecord)) state.VolumeRecord {
	r.mu.Lock()
	v := r.vols[alias]
	created := v == nil
	if created {
		nv := r.newVolume(alias, r.rec.Group.Volumes[alias])
		v = &nv
		r.vols[alias] = v
	}
	before := v.State
	f(v)
	changed := created || v.State != before
	if changed {
		v.State.UpdatedAt = structs.NowNano()
	}
	c := *v
	c.PublishContext = maps.Clone(v.PublishContext)
	r.mu.Unlock()
	r.persist(false, []*state.VolumeRecord{&c}, nil)
	if changed {
		r.report()
	}
	return c
}

func (r *allocRunner) setupVolume(ctx context.Context, alias string, req *structs.VolumeRequest) error {
	v := r.volume(alias, req)
	if v.State.Step == structs.AllocVolumeStepPublished {
		return nil
	}
	// Reported before the first attempt, so the servers see the claim
	// being taken even if it answers slowly.
	r.updateVolume(alias, func(v *state.VolumeRecord) {})
	claim, err := r.claim(ctx, alias, v, req)
	if err != nil {
		return err
	}
	vol := claim.Volume
	v = r.updateVolume(alias, func(v *state.VolumeRecord) {
		v.PluginID, v.ExternalID = vol.PluginID, vol.RemoteID()
		v.PublishContext = maps.Clone(claim.PublishContext)
		v.TargetPath = r.m.cfg.Paths.TargetPath(r.id, v.VolumeID)
		if stepRank(v.State.Step) < stepRank(structs.AllocVolumeStepClaimed) {
			v.State.Step = structs.AllocVolumeStepClaimed
		}
		v.State.Waiting, v.State.Attempts, v.State.NextRetry = "", 0, 0
	})
	r.logger.Info("volume claimed", "volume", alias, "volume_id", v.VolumeID, "plugin_id", v.PluginID)
	return r.retry(ctx, alias, func() error { return r.publish(ctx, alias, req, vol) }, nodeRetryable)
}

// claim takes the allocation's claim on the volume, retrying with backoff
// while the claim is refused for a reason that may pass: another
// allocation's claim (the error names it), no leader, a server or node out
// of reach, a plugin not healthy yet.
func (r *allocRunner) claim(ctx context.Context, alias string, v state.VolumeRecord, req *structs.VolumeRequest) (*structs.CSIVolumeClaimResponse, error) {
	// The claim is authenticated by the node's secret, which the servers
	// know once the node registered.
	select {
	case <-r.m.cfg.Registered:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.stopCh:
		return nil, errAllocStopped
	}
	args := &structs.CSIVolumeClaimRequest{
		VolumeID:     v.VolumeID,
		NodeSecretID: r.m.cfg.SecretID,
		Claim: &structs.CSIVolumeClaim{
			AllocationID: r.id, NodeID: r.m.cfg.NodeID, Mode: req.ClaimMode(),
			AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, ReadOnly: req.ReadOnly,
			State: structs.CSIVolumeClaimStateTaken,
		},
	}
	args.Namespace = r.rec.Namespace
	var reply structs.CSIVolumeClaimResponse
	err := r.retry(ctx, alias, func() error {
		reply = structs.CSIVolumeClaimResponse{}
		err := r.m.cfg.Servers.CSIVolumeClaim(args, &reply)
		if err == nil && reply.Volume == nil {
			err = structs.NewError(structs.ErrCodeInternal, "the claim's answer has no volume")
		}
		return err
	}, claimRetryable)
	if err != nil {
		return nil, err
	}
	return &reply, nil
}

// claimRetryable reports whether a refused claim may succeed later. Invalid
// requests, unknown volumes or allocations and a wrong node secret do not.
func claimRetryable(err error) bool {
	if rpc.IsConnError(err) {
		return true
	}
	switch structs.CodeOf(err) {
	case structs.ErrCodeMaxClaims, structs.ErrCodeRetryable, structs.ErrCodeNoLeader, structs.ErrCodeNoNodeConn,
		// The volume's plugin is not healthy, or the volume is claimed
		// read-only by others: both pass.
		structs.ErrCodeUnschedulable,
		// A failed Raft apply or forwarding.
		structs.ErrCodeInternal:
		return true
	}
	return false
}

// nodeRetryable reports whether a failed stage or publish may succeed
// later: the node plugin is not running or not healthy yet, or answered
// with a code the CSI spec says may pass.
func nodeRetryable(err error) bool {
	return structs.CodeOf(err) == structs.ErrCodeRetryable
}

// retry runs op until it succeeds, fails for good, or the allocation is
// stopped. Between attempts that may pass it waits with backoff, and the
// volume reports why it waits, how many attempts failed and when the next
// one is.
func (r *allocRunner) retry(ctx context.Context, alias string, op func() error, retryable func(error) bool) error {
	for attempt := 1; ; attempt++ {
		if r.stopped() {
			return errAllocStopped
		}
		err := op()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case r.stopped():
			return errAllocStopped
		case !retryable(err):
			return err
		}
		delay := r.m.backoff(attempt)
		why := structs.MessageOf(err)
		v := r.updateVolume(alias, func(v *state.VolumeRecord) {
			v.State.Waiting, v.State.Attempts = why, attempt
			v.State.NextRetry = time.Now().Add(delay).UnixNano()
		})
		log := r.logger.With("volume", alias, "volume_id", v.VolumeID, "step", v.State.Step, "attempts", attempt,
			"retry_in", delay.Round(time.Millisecond), "reason", why)
		if attempt == 1 {
			log.Info("volume not ready; waiting")
		} else {
			log.Debug("volume still not ready; waiting")
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-r.stopCh:
			t.Stop()
			return errAllocStopped
		case <-t.C:
		}
	}
}

// publish stages the volume (when the node plugin stages) and publishes it
// at the allocation's target path, recording each step. The node detach of
// another allocation of the same volume is held off meanwhile, and the
// usage is recorded before anything is staged, so that detach never
// unstages a volume this allocation is about to use.
func (r *allocRunner) publish(ctx context.Context, alias string, req *structs.VolumeRequest, vol *structs.CSIVolume) error {
	v := r.volume(alias, req)
	plugin, _, err := r.m.cfg.Plugins.Node(v.PluginID)
	if err != nil {
		return err
	}
	unlock, err := r.m.cfg.Locks.LockVolume(ctx, v.PluginID, v.Namespace, v.VolumeID)
	if err != nil {
		return err
	}
	defer unlock()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	caps, err := plugin.NodeCapabilities(callCtx)
	if err != nil {
		return csimanager.CallError(csi.MethodNodeGetCapabilities, v.ExternalID, err)
	}
	staging := ""
	if caps.StageUnstage {
		staging = r.m.cfg.Paths.StagingPath(v.PluginID, v.Namespace, v.VolumeID, state.UsageMode(v.AccessMode, v.AttachmentMode, v.ReadOnly))
	}
	v = r.updateVolume(alias, func(v *state.VolumeRecord) { v.StagingPath = staging })
	if err := r.m.cfg.Usage.Add(state.VolumeUsage{
		AllocID: r.id, PluginID: v.PluginID, Namespace: v.Namespace, VolumeID: v.VolumeID, ExternalID: v.ExternalID,
		AccessMode: v.AccessMode, AttachmentMode: v.AttachmentMode, ReadOnly: v.ReadOnly,
		StagingPath: staging, TargetPath: v.TargetPath,
	}); err != nil {
		return structs.NewError(structs.ErrCodeRetryable, "recording the volume's use on this node: %v", err)
	}
	opts := req.MountOptions
	if opts == nil {
		opts = vol.MountOptions
	}
	volCap := csimanager.Capability(v.AccessMode, v.AttachmentMode, opts)

	if staging != "" && stepRank(v.State.Step) < stepRank(structs.AllocVolumeStepStaged) {
		// The CO creates the staging directory; the plugin stages in it.
		if err := os.MkdirAll(staging, 0o750); err != nil {
			return structs.NewError(structs.ErrCodeInternal, "creating the staging path: %v", err)
		}
		err := plugin.NodeStageVolume(callCtx, &csi.NodeStageRequest{
			ExternalID: v.ExternalID, StagingPath: staging, Capability: volCap,
			PublishContext: v.PublishContext, VolumeContext: vol.Context, Secrets: vol.Secrets,
		})
		if err != nil {
			return csimanager.CallError(csi.MethodNodeStageVolume, v.ExternalID, err)
		}
		v = r.updateVolume(alias, func(v *state.VolumeRecord) {
			v.State.Step, v.State.Waiting, v.State.Attempts, v.State.NextRetry = structs.AllocVolumeStepStaged, "", 0, 0
		})
		r.logger.Info("volume staged", "volume", alias, "volume_id", v.VolumeID, "staging_path", staging)
	}
	// Only the target's parent is the CO's to create; the target itself is
	// the plugin's (a block volume's target is a file, for instance).
	if err := os.MkdirAll(filepath.Dir(v.TargetPath), 0o750); err != nil {
		return structs.NewError(structs.ErrCodeInternal, "creating the target path's parent: %v", err)
	}
	err = plugin.NodePublishVolume(callCtx, &csi.NodePublishRequest{
		ExternalID: v.ExternalID, StagingPath: staging, TargetPath: v.TargetPath, Capability: volCap,
		ReadOnly: req.ReadOnly, PublishContext: v.PublishContext, VolumeContext: vol.Context, Secrets: vol.Secrets,
	})
	if err != nil {
		return csimanager.CallError(csi.MethodNodePublishVolume, v.ExternalID, err)
	}
	v = r.updateVolume(alias, func(v *state.VolumeRecord) {
		v.State.Step, v.State.Waiting, v.State.Attempts, v.State.NextRetry = structs.AllocVolumeStepPublished, "", 0, 0
	})
	r.logger.Info("volume published", "volume", alias, "volume_id", v.VolumeID, "target_path", v.TargetPath)
	return nil
}
