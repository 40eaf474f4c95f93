package clientrpc

import (
	"context"

	"github.com/volplane/volplane/structs"
)

// The calls beyond a claim's publish and release: snapshots, listings and
// expansion. Controller calls go to a healthy controller of the plugin,
// node calls to the named node, as the others do (see Client).

// ControllerCreateSnapshot snapshots a volume through a controller
// (CreateSnapshot).
func (c *Client) ControllerCreateSnapshot(ctx context.Context, req *structs.ClientCSIControllerCreateSnapshotRequest) (*structs.ClientCSIControllerCreateSnapshotResponse, error) {
	if req.VolumeID == "" || req.Name == "" {
		return nil, structs.ErrInvalid("controller create snapshot: missing volume ID or snapshot name")
	}
	var resp structs.ClientCSIControllerCreateSnapshotResponse
	if err := c.controller(ctx, MethodControllerCreateSnapshot, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &resp); err != nil {
		return nil, err
	}
	if resp.Snapshot == nil {
		return nil, structs.NewError(structs.ErrCodeInternal, "controller create snapshot: the agent answered without a snapshot")
	}
	return &resp, nil
}

// ControllerDeleteSnapshot deletes a snapshot through a controller
// (DeleteSnapshot); one already gone is deleted.
func (c *Client) ControllerDeleteSnapshot(ctx context.Context, req *structs.ClientCSIControllerDeleteSnapshotRequest) error {
	if req.SnapshotID == "" {
		return structs.ErrInvalid("controller delete snapshot: missing snapshot ID")
	}
	return c.controller(ctx, MethodControllerDeleteSnapshot, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &structs.ClientCSIEmptyResponse{})
}

// ControllerListSnapshots lists a page of snapshots through a controller
// (ListSnapshots).
func (c *Client) ControllerListSnapshots(ctx context.Context, req *structs.ClientCSIControllerListSnapshotsRequest) (*structs.ClientCSIControllerListSnapshotsResponse, error) {
	var resp structs.ClientCSIControllerListSnapshotsResponse
	if err := c.controller(ctx, MethodControllerListSnapshots, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ControllerListVolumes lists a page of the provider's volumes through a
// controller (ListVolumes).
func (c *Client) ControllerListVolumes(ctx context.Context, req *structs.ClientCSIControllerListVolumesRequest) (*structs.ClientCSIControllerListVolumesResponse, error) {
	var resp structs.ClientCSIControllerListVolumesResponse
	if err := c.controller(ctx, MethodControllerListVolumes, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ControllerExpandVolume grows a volume through a controller
// (ControllerExpandVolume).
func (c *Client) ControllerExpandVolume(ctx context.Context, req *structs.ClientCSIControllerExpandVolumeRequest) (*structs.ClientCSIControllerExpandVolumeResponse, error) {
	if req.VolumeID == "" || (req.CapacityMin <= 0 && req.CapacityMax <= 0) {
		return nil, structs.ErrInvalid("controller expand volume: missing volume ID or capacity")
	}
	var resp structs.ClientCSIControllerExpandVolumeResponse
	if err := c.controller(ctx, MethodControllerExpandVolume, req.PluginID, &req.ClientCSITarget, &req.WriteRequest, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// NodeExpandVolume grows a volume on the node an allocation uses it on
// (NodeExpandVolume).
func (c *Client) NodeExpandVolume(ctx context.Context, req *structs.ClientCSINodeExpandVolumeRequest) (*structs.ClientCSINodeExpandVolumeResponse, error) {
	if req.NodeID == "" || req.AllocID == "" || req.VolumeID == "" {
		return nil, structs.ErrInvalid("node expand volume: missing node ID, allocation ID or volume ID")
	}
	var resp structs.ClientCSINodeExpandVolumeResponse
	if err := c.fwd.CallNode(ctx, req.NodeID, MethodNodeExpandVolume, req, &resp, req.IsForwarded()); err != nil {
		return nil, err
	}
	return &resp, nil
}
