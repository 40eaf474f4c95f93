package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Create creates volumes in their plugins through a controller and
// registers the ones that were created. A volume that exists already is
// updated as Register would, without a plugin call. When some volumes fail,
// the others are still registered and the error names each failure.
func (e *CSIVolume) Create(args *structs.CSIVolumeCreateRequest, reply *structs.CSIVolumeCreateResponse) error {
	if done, err := e.srv.forward("CSIVolume.Create", args, args, reply); done {
		return err
	}
	if len(args.Volumes) == 0 {
		return structs.ErrInvalid("missing volume definition")
	}
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	var (
		ready    []*structs.CSIVolume
		failures []string
		warnings []string
		code     structs.ErrorCode
	)
	seen := map[string]bool{}
	for i, in := range args.Volumes {
		if in == nil {
			return structs.ErrInvalid("volume %d of the request is empty", i+1)
		}
		vol, warning, err := e.prepareCreate(snap, in, args.RequestNamespace())
		if warning != "" {
			warnings = append(warnings, warning)
		}
		if err == nil && seen[vol.Namespace+"/"+vol.ID] {
			err = structs.ErrInvalid("volume %q appears twice in the request", vol.ID)
		}
		if err != nil {
			failures = append(failures, structs.MessageOf(err))
			if code == "" {
				code = structs.CodeOf(err)
			}
			continue
		}
		seen[vol.Namespace+"/"+vol.ID] = true
		ready = append(ready, vol)
	}
	if len(ready) > 0 {
		reg := &structs.CSIVolumeRegisterRequest{Volumes: ready, Timestamp: structs.NowNano(), WriteRequest: args.WriteRequest}
		_, index, err := e.srv.raftApply(structs.CSIVolumeRegisterRequestType, reg)
		if err != nil {
			// The plugin created volumes that are now unknown to volplane:
			// say which, so an operator can register or delete them.
			var ids []string
			for _, v := range ready {
				ids = append(ids, fmt.Sprintf("%s (external ID %s)", v.ID, v.ExternalID))
			}
			return structs.Wrap(err, "volumes created in the plugin but not registered: %s", strings.Join(ids, ", "))
		}
		reply.Index = index
		for _, v := range ready {
			reply.Volumes = append(reply.Volumes, v.Sanitize())
		}
		reply.Warnings = append(reply.Warnings, warnings...)
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	if len(failures) > 0 {
		msg := strings.Join(failures, "; ")
		if len(ready) > 0 {
			// An RPC that fails carries no reply, so the message itself
			// says what was created.
			var ids []string
			for _, v := range ready {
				ids = append(ids, v.ID)
			}
			msg = fmt.Sprintf("%d of %d volumes created and registered (%s); failed: %s",
				len(ready), len(args.Volumes), strings.Join(ids, ", "), msg)
		}
		return &structs.Error{Code: code, Message: msg}
	}
	return nil
}

// prepareCreate validates a volume to create and, when it is new, creates
// it in the plugin, returning the volume to register. A volume that exists
// is updated as Register would, expansion included, with its warning.
func (e *CSIVolume) prepareCreate(snap *state.StateSnapshot, in *structs.CSIVolume, namespace string) (*structs.CSIVolume, string, error) {
	vol := in.Copy()
	if vol.Namespace == "" {
		vol.Namespace = namespace
	}
	if vol.Name == "" {
		vol.Name = vol.ID
	}
	if err := vol.Validate(); err != nil {
		return nil, "", err
	}
	existing, err := snap.CSIVolumeByID(nil, vol.Namespace, vol.ID)
	if err != nil {
		return nil, "", err
	}
	if existing != nil {
		return e.prepareRegister(snap, vol, namespace)
	}
	vol, err = e.createInPlugin(snap, vol)
	return vol, "", err
}

// createInPlugin creates a new volume through a controller and returns it
// as it is to be registered.
func (e *CSIVolume) createInPlugin(snap *state.StateSnapshot, vol *structs.CSIVolume) (*structs.CSIVolume, error) {
	plugin, err := snap.CSIPluginByID(nil, vol.PluginID)
	if err != nil {
		return nil, err
	}
	if plugin == nil {
		return nil, structs.ErrNotFound("volume %q: no CSI plugin named %q could be found", vol.ID, vol.PluginID)
	}
	// Each content source needs a capability of its own (the CSI spec's
	// CreateVolume).
	err = plugin.RequireController(structs.CSIControllerCreateDeleteVolume, "create volumes")
	switch {
	case err != nil:
	case vol.SnapshotID != "":
		err = plugin.RequireController(structs.CSIControllerCreateDeleteSnapshot, "create volumes from snapshots")
	case vol.CloneID != "":
		err = plugin.RequireController(structs.CSIControllerCloneVolume, "clone volumes")
	}
	if err != nil {
		return nil, structs.Wrap(err, "volume %q", vol.ID)
	}
	// The plugin call is an operation on the volume: it waits for any
	// other in flight (a concurrent create of the same ID).
	unlock, err := e.srv.lockVolume(vol.Namespace, vol.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	resp, err := e.srv.clientRPC.ControllerCreateVolume(ctx, &structs.ClientCSIControllerCreateVolumeRequest{
		PluginID:            vol.PluginID,
		Name:                vol.Name,
		Capabilities:        vol.RequestedCapabilities,
		MountOptions:        vol.MountOptions,
		CapacityMin:         vol.RequestedCapacityMin,
		CapacityMax:         vol.RequestedCapacityMax,
		Parameters:          vol.Parameters,
		Secrets:             vol.Secrets,
		RequestedTopologies: vol.RequestedTopologies,
		SnapshotID:          vol.SnapshotID,
		CloneID:             vol.CloneID,
	})
	if err != nil {
		return nil, structs.Wrap(err, "volume %q", vol.ID)
	}
	vol.ExternalID = resp.ExternalVolumeID
	vol.Capacity = resp.CapacityBytes
	if len(resp.VolumeContext) > 0 {
		vol.Context = maps.Clone(resp.VolumeContext)
	}
	vol.Topologies = resp.Topologies
	vol.Provider, vol.ProviderVersion = plugin.Provider, plugin.Version
	clearDerived(vol)
	if err := e.srv.sealVolume(vol, nil); err != nil {
		return nil, err
	}
	e.logger.Info("volume created in plugin", "volume_id", vol.ID, "plugin_id", vol.PluginID, "external_id", vol.ExternalID)
	return vol, nil
}

// Delete deletes volumes in their plugins, then deregisters them. A claimed
// volume is refused before anything is deleted; a volume the plugin no
// longer has is deregistered all the same. The volumes are locked (see
// volumewatcher.Watcher.Lock) from before they are checked until they are
// deregistered, so no claim's publish or release step runs on a volume
// being deleted, and no claim is taken between its delete and its
// deregistration.
func (e *CSIVolume) Delete(args *structs.CSIVolumeDeleteRequest, reply *structs.CSIVolumeDeleteResponse) error {
	if done, err := e.srv.forward("CSIVolume.Delete", args, args, reply); done {
		return err
	}
	if len(args.VolumeIDs) == 0 {
		return structs.ErrInvalid("missing volume IDs")
	}
	ns := args.RequestNamespace()
	// In one order, so that two deletes of the same volumes cannot each
	// hold the lock the other waits for.
	for _, id := range slices.Compact(slices.Sorted(slices.Values(args.VolumeIDs))) {
		unlock, err := e.srv.lockVolume(ns, id)
		if err != nil {
			return err
		}
		defer unlock()
	}
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	// The rules of the deregistration that follows the deletes.
	if err := snap.CheckCSIVolumeDeregister(ns, args.VolumeIDs, false); err != nil {
		return err
	}
	var vols []*structs.CSIVolume
	for _, id := range args.VolumeIDs {
		vol, err := snap.CSIVolumeByID(nil, ns, id)
		if err != nil {
			return err
		}
		vols = append(vols, vol)
	}
	for _, vol := range vols {
		plugin, err := pluginFor(snap, vol.PluginID)
		if err != nil {
			return structs.Wrap(err, "volume %q", vol.ID)
		}
		if err := plugin.RequireController(structs.CSIControllerCreateDeleteVolume, "delete volumes"); err != nil {
			return structs.Wrap(err, "volume %q", vol.ID)
		}
	}
	var deleted []string
	for _, vol := range vols {
		if vol, err = e.srv.openVolume(vol); err != nil {
			return err
		}
		secrets := maps.Clone(vol.Secrets)
		if secrets == nil {
			secrets = structs.CSISecrets{}
		}
		maps.Copy(secrets, args.Secrets)
		err := e.srv.clientRPC.ControllerDeleteVolume(ctx, &structs.ClientCSIControllerDeleteVolumeRequest{
			PluginID: vol.PluginID, VolumeID: vol.RemoteID(), Secrets: secrets,
		})
		if err != nil {
			err = structs.Wrap(err, "deleting volume %q in plugin %q", vol.ID, vol.PluginID)
			if len(deleted) > 0 {
				// Those already deleted must not stay registered.
				if derr := e.deregister(ns, deleted, reply); derr != nil {
					err = structs.Wrap(err, "%s; and", structs.MessageOf(derr))
				}
			}
			return err
		}
		deleted = append(deleted, vol.ID)
	}
	return e.deregister(ns, deleted, reply)
}

func (e *CSIVolume) deregister(ns string, ids []string, reply *structs.CSIVolumeDeleteResponse) error {
	req := &structs.CSIVolumeDeregisterRequest{VolumeIDs: ids, WriteRequest: structs.WriteRequest{Namespace: ns}}
	_, index, err := e.srv.raftApply(structs.CSIVolumeDeregisterRequestType, req)
	if err != nil {
		return structs.Wrap(err, "volumes deleted in their plugin but still registered: %s", strings.Join(ids, ", "))
	}
	reply.Index = index
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}
