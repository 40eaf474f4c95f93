package client

import (
	"context"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
)

// The ClientCSI calls beyond a claim's publish and release: snapshots,
// listings and expansion. Each is made only when the plugin instance here
// advertises the capability it needs (the servers check too): a request
// for one it lacks is refused as invalid, naming the capability.

// ControllerCreateSnapshot snapshots a volume (CreateSnapshot).
func (e *ClientCSI) ControllerCreateSnapshot(args *structs.ClientCSIControllerCreateSnapshotRequest, reply *structs.ClientCSIControllerCreateSnapshotResponse) error {
	const name = "ClientCSI.ControllerCreateSnapshot"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	required(&m, "Name", args.Name)
	plugin, ctx, cancel, err := e.capableControllerCall(name, &m, args, args.ClientCSITarget, args.PluginID, structs.CSIControllerCreateDeleteSnapshot)
	if err != nil {
		return err
	}
	defer cancel()
	snap, err := plugin.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{
		SourceVolumeID: args.VolumeID, Name: args.Name, Secrets: args.Secrets, Parameters: args.Parameters,
	})
	if err != nil {
		return e.fail(csi.MethodCreateSnapshot, args.PluginID, args.VolumeID, err)
	}
	reply.Snapshot = snapshotOf(snap, args.PluginID)
	return nil
}

// ControllerDeleteSnapshot deletes a snapshot (DeleteSnapshot); one
// already gone is deleted.
func (e *ClientCSI) ControllerDeleteSnapshot(args *structs.ClientCSIControllerDeleteSnapshotRequest, reply *structs.ClientCSIEmptyResponse) error {
	const name = "ClientCSI.ControllerDeleteSnapshot"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "SnapshotID", args.SnapshotID)
	plugin, ctx, cancel, err := e.capableControllerCall(name, &m, args, args.ClientCSITarget, args.PluginID, structs.CSIControllerCreateDeleteSnapshot)
	if err != nil {
		return err
	}
	defer cancel()
	err = plugin.DeleteSnapshot(ctx, args.SnapshotID, args.Secrets)
	return e.fail(csi.MethodDeleteSnapshot, args.PluginID, args.SnapshotID, err)
}

// ControllerListSnapshots returns a page of the plugin's snapshots
// (ListSnapshots). A starting token the plugin did not hand out is an
// invalid request.
func (e *ClientCSI) ControllerListSnapshots(args *structs.ClientCSIControllerListSnapshotsRequest, reply *structs.ClientCSIControllerListSnapshotsResponse) error {
	const name = "ClientCSI.ControllerListSnapshots"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	if args.MaxEntries < 0 {
		m.Add("MaxEntries must not be negative")
	}
	plugin, ctx, cancel, err := e.capableControllerCall(name, &m, args, args.ClientCSITarget, args.PluginID, structs.CSIControllerListSnapshots)
	if err != nil {
		return err
	}
	defer cancel()
	snaps, next, err := plugin.ListSnapshots(ctx, &csi.ListSnapshotsRequest{
		MaxEntries: args.MaxEntries, StartingToken: args.StartingToken, Secrets: args.Secrets,
	})
	if err != nil {
		return e.failListing(csi.MethodListSnapshots, args.PluginID, args.StartingToken, err)
	}
	reply.Entries = make([]*structs.CSISnapshot, 0, len(snaps))
	for _, s := range snaps {
		reply.Entries = append(reply.Entries, snapshotOf(s, args.PluginID))
	}
	reply.NextToken = next
	return nil
}

// ControllerListVolumes returns a page of the provider's volumes
// (ListVolumes). A starting token the plugin did not hand out is an invalid
// request.
func (e *ClientCSI) ControllerListVolumes(args *structs.ClientCSIControllerListVolumesRequest, reply *structs.ClientCSIControllerListVolumesResponse) error {
	const name = "ClientCSI.ControllerListVolumes"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	if args.MaxEntries < 0 {
		m.Add("MaxEntries must not be negative")
	}
	plugin, ctx, cancel, err := e.capableControllerCall(name, &m, args, args.ClientCSITarget, args.PluginID, structs.CSIControllerListVolumes)
	if err != nil {
		return err
	}
	defer cancel()
	vols, next, err := plugin.ListVolumes(ctx, args.MaxEntries, args.StartingToken)
	if err != nil {
		return e.failListing(csi.MethodListVolumes, args.PluginID, args.StartingToken, err)
	}
	reply.Entries = make([]*structs.CSIVolumeExternalStub, 0, len(vols))
	for _, v := range vols {
		reply.Entries = append(reply.Entries, &structs.CSIVolumeExternalStub{
			ExternalID:               v.ExternalID,
			CapacityBytes:            v.CapacityBytes,
			VolumeContext:            v.Context,
			CloneID:                  v.CloneID,
			SnapshotID:               v.SnapshotID,
			PublishedExternalNodeIDs: v.PublishedNodeIDs,
		})
	}
	reply.NextToken = next
	return nil
}

// ControllerExpandVolume grows a volume (ControllerExpandVolume).
func (e *ClientCSI) ControllerExpandVolume(args *structs.ClientCSIControllerExpandVolumeRequest, reply *structs.ClientCSIControllerExpandVolumeResponse) error {
	const name = "ClientCSI.ControllerExpandVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	var c *csi.VolumeCapability
	if args.Capability != nil {
		validModes(&m, args.Capability.AccessMode, args.Capability.AttachmentMode)
		c = csimanager.Capability(args.Capability.AccessMode, args.Capability.AttachmentMode, args.MountOptions)
	}
	plugin, ctx, cancel, err := e.capableControllerCall(name, &m, args, args.ClientCSITarget, args.PluginID, structs.CSIControllerExpandVolume)
	if err != nil {
		return err
	}
	defer cancel()
	size, nodeToo, err := plugin.ControllerExpandVolume(ctx, &csi.ControllerExpandRequest{
		ExternalID: args.VolumeID, CapacityMin: args.CapacityMin, CapacityMax: args.CapacityMax,
		Capability: c, Secrets: args.Secrets,
	})
	if err != nil {
		return e.fail(csi.MethodControllerExpandVolume, args.PluginID, args.VolumeID, err)
	}
	reply.CapacityBytes, reply.NodeExpansionRequired = size, nodeToo
	return nil
}

// NodeExpandVolume grows a volume on this node (NodeExpandVolume), at the
// paths it was published at for the allocation, holding the volume's lock
// so that no publish or detach of it runs meanwhile.
func (e *ClientCSI) NodeExpandVolume(args *structs.ClientCSINodeExpandVolumeRequest, reply *structs.ClientCSINodeExpandVolumeResponse) error {
	const name = "ClientCSI.NodeExpandVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	required(&m, "AllocID", args.AllocID)
	validModes(&m, args.AccessMode, args.AttachmentMode)
	if err := e.check(name, &m, args.ClientCSITarget); err != nil {
		return err
	}
	plugin, info, err := e.c.plugins.Node(args.PluginID)
	if err != nil {
		return err
	}
	if !info.NodeInfo.Has(structs.CSINodeExpandVolume) {
		return structs.ErrInvalid("%s: plugin %q on node %q does not advertise the node capability %s",
			name, args.PluginID, e.c.id.NodeID, structs.CSINodeExpandVolume)
	}
	ctx, cancel := e.c.calls.Context(args)
	defer cancel()
	usage, ok := e.c.usage.Get(args.AllocID, args.VolumeID)
	if !ok {
		return structs.ErrNotFound("%s: volume %q is not published on node %q for allocation %q",
			name, args.VolumeID, e.c.id.NodeID, args.AllocID)
	}
	unlock, err := e.c.volumeLocks.LockVolume(ctx, usage.PluginID, usage.Namespace, usage.VolumeID)
	if err != nil {
		return structs.NewError(structs.ErrCodeRetryable, "%s: volume %q: another operation on the volume did not end in time: %v",
			name, args.VolumeID, err)
	}
	defer unlock()
	externalID := args.ExternalID
	if externalID == "" {
		externalID = usage.ExternalID
	}
	size, err := plugin.NodeExpandVolume(ctx, &csi.NodeExpandRequest{
		ExternalID:  externalID,
		VolumePath:  usage.TargetPath,
		StagingPath: usage.StagingPath,
		CapacityMin: args.CapacityMin,
		CapacityMax: args.CapacityMax,
		Capability:  csimanager.Capability(args.AccessMode, args.AttachmentMode, args.MountOptions),
		Secrets:     args.Secrets,
	})
	if err != nil {
		return e.fail(csi.MethodNodeExpandVolume, args.PluginID, externalID, err)
	}
	reply.CapacityBytes = size
	e.c.logger.Info("volume expanded on node", "volume_id", args.VolumeID, "alloc_id", args.AllocID, "capacity_bytes", size)
	return nil
}

// capableControllerCall is controllerCall for a call that needs a
// controller capability the instance here must advertise.
func (e *ClientCSI) capableControllerCall(name string, m *structs.MultiError, args any, target structs.ClientCSITarget,
	pluginID string, need structs.CSIControllerCapability) (*csi.Client, context.Context, context.CancelFunc, error) {
	plugin, ctx, cancel, err := e.controllerCall(name, m, args, target, pluginID)
	if err != nil {
		return nil, nil, nil, err
	}
	if info := e.c.plugins.ControllerInfo(pluginID); !info.Has(need) {
		cancel()
		return nil, nil, nil, structs.ErrInvalid("%s: plugin %q on node %q does not advertise the controller capability %s",
			name, pluginID, e.c.id.NodeID, need)
	}
	return plugin, ctx, cancel, nil
}

// failListing is fail for a listing: a token the plugin refuses is the
// caller's mistake, not the plugin's.
func (e *ClientCSI) failListing(method, pluginID, token string, err error) error {
	if csi.IsInvalidToken(method, err) {
		return structs.ErrInvalid("%s: invalid next_token %q: plugin %q did not hand it out", method, token, pluginID)
	}
	return e.fail(method, pluginID, "", err)
}

// snapshotOf converts a plugin's snapshot; CreateTime is in seconds, as
// Nomad's.
func snapshotOf(s *csi.Snapshot, pluginID string) *structs.CSISnapshot {
	out := &structs.CSISnapshot{
		ID:                     s.ID,
		ExternalSourceVolumeID: s.SourceVolumeID,
		SizeBytes:              s.SizeBytes,
		IsReady:                s.ReadyToUse,
		PluginID:               pluginID,
	}
	if !s.CreateTime.IsZero() {
		out.CreateTime = s.CreateTime.Unix()
	}
	return out
}
