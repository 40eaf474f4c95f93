package server

import (
	"context"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Claim takes a claim on a volume for an allocation, as the client agent
// running it asks, authenticated by its node secret. The claim rules are
// checked here against the leader's state first, so a refused claim costs
// no Raft entry, and again in the FSM, which is the authority when claims
// race. When the plugin's controller publishes volumes, the controller is
// asked to attach the volume to the node and the publish context it returns
// is stored on the claim. The claim stays committed if that fails: the
// client retries, and a repeated claim is a no-op that publishes again.
//
// A claim that passes the checks is written and published holding the
// volume's lock (see volumewatcher.Watcher.Lock), so its publish never
// overlaps another operation on the volume, such as a release's unpublish
// or a delete; a refused claim never waits for it.
func (e *CSIVolume) Claim(args *structs.CSIVolumeClaimRequest, reply *structs.CSIVolumeClaimResponse) error {
	if done, err := e.srv.forward("CSIVolume.Claim", args, args, reply); done {
		return err
	}
	if args.VolumeID == "" {
		return structs.ErrInvalid("missing volume ID")
	}
	if args.Claim == nil {
		return structs.ErrInvalid("volume %q: missing claim", args.VolumeID)
	}
	claim := args.Claim.Copy()
	if claim.State != structs.CSIVolumeClaimStateTaken {
		return structs.ErrInvalid("volume %q: clients take claims; releasing them is the servers' work", args.VolumeID)
	}
	if err := claim.ValidateRequest(); err != nil {
		return structs.Wrap(err, "volume %q", args.VolumeID)
	}
	ns := args.RequestNamespace()
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	node, err := snap.NodeByID(nil, claim.NodeID)
	if err != nil {
		return err
	}
	if node == nil || !node.SecretMatches(args.NodeSecretID) {
		return structs.NewError(structs.ErrCodePermissionDenied, "volume %q: claim for node %q refused: unknown node or wrong node secret",
			args.VolumeID, claim.NodeID)
	}
	// The claim rules, as the FSM applies them again to the state the
	// claim is written to.
	claim.ClaimedAt = 0
	vol, err := snap.CheckCSIVolumeClaim(ns, args.VolumeID, claim)
	if err != nil {
		return err
	}
	if err := checkRequested(snap, vol, claim); err != nil {
		return err
	}
	info := node.CSINodePlugins[vol.PluginID]
	if info == nil || info.NodeInfo == nil {
		return structs.NewError(structs.ErrCodeUnschedulable, "volume %q: allocation %q: node %q does not run plugin %q",
			vol.ID, claim.AllocationID, node.ID, vol.PluginID)
	}
	claim.ExternalNodeID = info.NodeInfo.ID

	// The claim's write, its publish and the write of the publish context
	// are one operation on the volume.
	unlock, err := e.srv.lockVolume(ns, vol.ID)
	if err != nil {
		return structs.Wrap(err, "allocation %q", claim.AllocationID)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.CSICallTimeout)
	defer cancel()

	// The node's secret, checked above, stays out of the log.
	write := *args
	write.NodeSecretID = ""
	write.Claim = claim
	write.Timestamp = structs.NowNano()
	index, err := e.srv.claims.Apply(&write)
	if err != nil {
		return err
	}
	reply.Index = index

	plugin, err := snap.CSIPluginByID(nil, vol.PluginID)
	if err != nil {
		return err
	}
	// The plugin and the node need the secrets and mount flags in clear.
	if vol, err = e.srv.openVolume(vol); err != nil {
		return err
	}
	if plugin != nil && plugin.ControllerRequired && plugin.SupportsAttachDetach() {
		pc, err := e.controllerPublish(ctx, vol, claim)
		if err != nil {
			return err
		}
		reply.PublishContext = pc
		// Keep the context with the claim: the node needs it again after a
		// restart, and a release needs everything the publish used.
		claim.PublishContext = pc
		write.Timestamp = structs.NowNano()
		if index, err = e.srv.claims.Apply(&write); err != nil {
			return structs.Wrap(err, "volume %q: storing the publish context", vol.ID)
		}
		reply.Index = index
	}
	// The client needs the volume's secrets and context to stage and
	// publish it; this reply goes only to the node that proved its secret.
	reply.Volume = vol
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// checkRequested checks that the group of the claiming allocation asks for
// this volume with the claim's modes: a node claims only what its
// allocations need. The allocation is known to exist (the claim passed
// state.CheckCSIVolumeClaim).
func checkRequested(snap *state.StateSnapshot, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim) error {
	alloc, err := snap.AllocByID(nil, claim.AllocationID)
	if err != nil {
		return err
	}
	if alloc == nil {
		return structs.ErrNotFound("volume %q: allocation %q not found", vol.ID, claim.AllocationID)
	}
	job, err := snap.JobByID(nil, alloc.Namespace, alloc.JobID)
	if err != nil {
		return err
	}
	var tg *structs.TaskGroup
	if job != nil {
		tg = job.LookupTaskGroup(alloc.TaskGroup)
	}
	if tg == nil {
		return structs.ErrInvalid("volume %q: allocation %q: its job or group is gone", vol.ID, alloc.ID)
	}
	for _, req := range tg.Volumes {
		if req.VolumeID(alloc.Name) == vol.ID && req.AccessMode == claim.AccessMode &&
			req.AttachmentMode == claim.AttachmentMode && req.ClaimMode() == claim.Mode {
			return nil
		}
	}
	return structs.ErrInvalid("volume %q: group %q of allocation %q asks for no such volume with %s %s/%s",
		vol.ID, tg.Name, alloc.ID, claim.Mode, claim.AccessMode, claim.AttachmentMode)
}

// controllerPublish asks a controller to attach the volume to the claim's
// node and returns the publish context. A controller that reports the
// volume published elsewhere (FAILED_PRECONDITION) is answered retryable
// by the client agent, so the claimant waits for that release.
func (e *CSIVolume) controllerPublish(ctx context.Context, vol *structs.CSIVolume, claim *structs.CSIVolumeClaim) (map[string]string, error) {
	resp, err := e.srv.clientRPC.ControllerAttachVolume(ctx, &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID:        vol.PluginID,
		VolumeID:        vol.RemoteID(),
		ClientCSINodeID: claim.ExternalNodeID,
		AccessMode:      claim.AccessMode,
		AttachmentMode:  claim.AttachmentMode,
		MountOptions:    vol.MountOptions,
		ReadOnly:        claim.Mode == structs.CSIVolumeClaimRead,
		Secrets:         vol.Secrets,
		VolumeContext:   vol.Context,
	})
	if err != nil {
		return nil, structs.Wrap(err, "volume %q: allocation %q: controller publish", vol.ID, claim.AllocationID)
	}
	return resp.PublishContext, nil
}
