package server

import "github.com/volplane/volplane/structs"

// The forwarded lifecycle calls (see ClientCSI): snapshots, listings and
// expansion.

// ControllerCreateSnapshot snapshots a volume through a controller.
func (e *ClientCSI) ControllerCreateSnapshot(args *structs.ClientCSIControllerCreateSnapshotRequest, reply *structs.ClientCSIControllerCreateSnapshotResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerCreateSnapshot(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}

// ControllerDeleteSnapshot deletes a snapshot through a controller.
func (e *ClientCSI) ControllerDeleteSnapshot(args *structs.ClientCSIControllerDeleteSnapshotRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	return e.srv.clientRPC.ControllerDeleteSnapshot(ctx, args)
}

// ControllerListSnapshots lists snapshots through a controller.
func (e *ClientCSI) ControllerListSnapshots(args *structs.ClientCSIControllerListSnapshotsRequest, reply *structs.ClientCSIControllerListSnapshotsResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerListSnapshots(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}

// ControllerListVolumes lists the provider's volumes through a controller.
func (e *ClientCSI) ControllerListVolumes(args *structs.ClientCSIControllerListVolumesRequest, reply *structs.ClientCSIControllerListVolumesResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerListVolumes(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}

// ControllerExpandVolume grows a volume through a controller.
func (e *ClientCSI) ControllerExpandVolume(args *structs.ClientCSIControllerExpandVolumeRequest, reply *structs.ClientCSIControllerExpandVolumeResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerExpandVolume(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}

// NodeExpandVolume grows a volume on an allocation's node.
func (e *ClientCSI) NodeExpandVolume(args *structs.ClientCSINodeExpandVolumeRequest, reply *structs.ClientCSINodeExpandVolumeResponse) error {
	ctx, cancel := e.callContext(args)
	defer cancel()
	resp, err := e.srv.clientRPC.NodeExpandVolume(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}
