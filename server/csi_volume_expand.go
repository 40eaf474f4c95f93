package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/volplane/volplane/structs"
)

// expand grows a registered volume in its plugin when an update (a
// register or a create of a volume that exists) asks for more capacity
// than it has, and sets the merged volume's capacity to the plugin's
// answer. It holds the volume's lock, so no claim is taken or released
// meanwhile, and reads the volume again under it.
//
// Following the CSI spec: the controller grows the volume
// (ControllerExpandVolume, only when it advertises EXPAND_VOLUME); when it
// says node expansion is required, each node the volume is published on
// grows it too (NodeExpandVolume, only when the node plugin advertises
// EXPAND_VOLUME). A volume in use is grown only by a plugin that
// advertises ONLINE expansion. It returns a warning to show when a volume
// in use was grown.
func (e *CSIVolume) expand(existing, merged *structs.CSIVolume, plugin *structs.CSIPlugin) (string, error) {
	reqMin, reqMax := merged.RequestedCapacityMin, merged.RequestedCapacityMax
	if reqMin == existing.RequestedCapacityMin && reqMax == existing.RequestedCapacityMax {
		// Nothing new asked: a volume registered again unchanged is not
		// expanded again.
		return "", nil
	}
	if reqMin <= existing.Capacity {
		return "", nil
	}
	if err := plugin.RequireController(structs.CSIControllerExpandVolume, "expand volumes"); err != nil {
		return "", structs.Wrap(err, "volume %q asks for %d bytes and has %d", existing.ID, reqMin, existing.Capacity)
	}
	unlock, err := e.srv.lockVolume(existing.Namespace, existing.ID)
	if err != nil {
		return "", err
	}
	defer unlock()
	cur, err := e.srv.State().CSIVolumeByID(nil, existing.Namespace, existing.ID)
	if err != nil {
		return "", err
	}
	if cur == nil {
		return "", structs.ErrNotFound("volume %q not found", existing.ID)
	}
	if cur.Capacity >= reqMin {
		// Grown by an update that held the lock before this one.
		merged.Capacity = cur.Capacity
		return "", nil
	}
	online := plugin.VolumeExpansion() == structs.CSIVolumeExpansionOnline
	if cur.InUse() && !online {
		how := "advertises OFFLINE volume expansion"
		if plugin.VolumeExpansion() == "" {
			how = "advertises no volume expansion type, so it expands offline"
		}
		return "", structs.ErrConflict("volume %q is in use (%s) and plugin %q %s: stop the allocations that use it before expanding it",
			cur.ID, cur.DescribeClaims(), plugin.ID, how)
	}
	opened, err := e.srv.openVolume(cur)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	req := &structs.ClientCSIControllerExpandVolumeRequest{
		PluginID: cur.PluginID, VolumeID: cur.RemoteID(), CapacityMin: reqMin, CapacityMax: reqMax, Secrets: opened.Secrets,
	}
	if cur.AccessMode != structs.CSIVolumeAccessModeUnknown {
		req.Capability = &structs.CSIVolumeCapability{AccessMode: cur.AccessMode, AttachmentMode: cur.AttachmentMode}
		req.MountOptions = opened.MountOptions
	}
	resp, err := e.srv.clientRPC.ControllerExpandVolume(ctx, req)
	if err != nil {
		return "", structs.Wrap(err, "volume %q: expanding it to %d bytes", cur.ID, reqMin)
	}
	merged.Capacity = max(resp.CapacityBytes, cur.Capacity)
	e.logger.Info("volume expanded by its controller", "volume_id", cur.ID, "plugin_id", cur.PluginID,
		"capacity_bytes", resp.CapacityBytes, "node_expansion_required", resp.NodeExpansionRequired)
	if resp.NodeExpansionRequired {
		if err := e.expandOnNodes(ctx, opened, plugin, reqMin, reqMax); err != nil {
			return "", err
		}
	}
	if !cur.InUse() {
		return "", nil
	}
	return fmt.Sprintf("volume %q was expanded online from %d to %d bytes while in use (plugin %q advertises ONLINE volume expansion)",
		cur.ID, cur.Capacity, merged.Capacity, plugin.ID), nil
}

// expandOnNodes runs NodeExpandVolume once on every node the volume is
// published on, through the first (by ID) of its live claims there. A node
// that is down is skipped: its claims are being released. Every node is
// tried; the error names each that failed.
func (e *CSIVolume) expandOnNodes(ctx context.Context, vol *structs.CSIVolume, plugin *structs.CSIPlugin, reqMin, reqMax int64) error {
	byNode := map[string]*structs.CSIVolumeClaim{}
	for _, m := range []map[string]*structs.CSIVolumeClaim{vol.ReadClaims, vol.WriteClaims} {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			c := m[id]
			if c == nil || vol.PastClaims[id] != nil {
				continue
			}
			if prev := byNode[c.NodeID]; prev == nil || id < prev.AllocationID {
				byNode[c.NodeID] = c
			}
		}
	}
	var failures []string
	code := structs.ErrorCode("")
	fail := func(err error) {
		failures = append(failures, structs.MessageOf(err))
		if code == "" {
			code = structs.CodeOf(err)
		}
	}
	st := e.srv.State()
	for _, nodeID := range slices.Sorted(maps.Keys(byNode)) {
		c := byNode[nodeID]
		node, err := st.NodeByID(nil, nodeID)
		if err != nil {
			return err
		}
		if structs.NodeDownOrGone(node) {
			e.logger.Warn("not expanding a volume on a node that is down; its claims are being released",
				"volume_id", vol.ID, "node_id", nodeID)
			continue
		}
		if info := plugin.Nodes[nodeID]; info == nil || !info.NodeInfo.Has(structs.CSINodeExpandVolume) {
			fail(structs.ErrInvalid("node %q: the controller of plugin %q says node expansion is required, but the node plugin there does not advertise the node capability %s",
				nodeID, plugin.ID, structs.CSINodeExpandVolume))
			continue
		}
		_, err = e.srv.clientRPC.NodeExpandVolume(ctx, &structs.ClientCSINodeExpandVolumeRequest{
			PluginID: vol.PluginID, VolumeID: vol.ID, ExternalID: vol.RemoteID(), AllocID: c.AllocationID,
			CapacityMin: reqMin, CapacityMax: reqMax, AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode,
			MountOptions: vol.MountOptions, Secrets: vol.Secrets,
			ClientCSITarget: structs.ClientCSITarget{NodeID: nodeID},
		})
		if err != nil {
			fail(structs.Wrap(err, "node %q", nodeID))
			continue
		}
		e.logger.Info("volume expanded on node", "volume_id", vol.ID, "node_id", nodeID, "alloc_id", c.AllocationID)
	}
	if len(failures) > 0 {
		return &structs.Error{Code: code, Message: fmt.Sprintf(
			"volume %q was expanded by its controller but not on every node it is published on (its capacity is recorded once they all are): %s",
			vol.ID, strings.Join(failures, "; "))}
	}
	return nil
}
