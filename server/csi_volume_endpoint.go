package server

import (
	"context"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// CSIVolume is the endpoint for registering, reading and removing volumes.
type CSIVolume struct {
	srv    *Server
	logger hclog.Logger
}

// Register registers new volumes or updates registered ones, all or
// nothing. Every volume is checked here, against the leader's state, so a
// refused request costs no Raft entry; the FSM checks again.
func (e *CSIVolume) Register(args *structs.CSIVolumeRegisterRequest, reply *structs.CSIVolumeRegisterResponse) error {
	if done, err := e.srv.forward("CSIVolume.Register", args, args, reply); done {
		return err
	}
	if len(args.Volumes) == 0 {
		return structs.ErrInvalid("missing volume definition")
	}
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	out := make([]*structs.CSIVolume, 0, len(args.Volumes))
	var warnings []string
	for i, in := range args.Volumes {
		if in == nil {
			return structs.ErrInvalid("volume %d of the request is empty", i+1)
		}
		vol, warning, err := e.prepareRegister(snap, in, args.RequestNamespace())
		if err != nil {
			return err
		}
		if warning != "" {
			warnings = append(warnings, warning)
		}
		key := vol.Namespace + "/" + vol.ID
		if seen[key] {
			return structs.ErrInvalid("volume %q appears twice in the request", vol.ID)
		}
		seen[key] = true
		out = append(out, vol)
	}
	args.Volumes = out
	args.Timestamp = structs.NowNano()

	index, err := e.srv.registers.Apply(args)
	if err != nil {
		return err
	}
	for _, v := range out {
		e.logger.Debug("volume registered", "volume_id", v.ID, "namespace", v.Namespace, "plugin_id", v.PluginID)
	}
	reply.Warnings = append(reply.Warnings, warnings...)
	reply.Index = index
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// prepareRegister validates one volume and returns what is to be written:
// the volume itself when it is new, or the stored volume with the update
// merged in, grown in its plugin when the update asks for more capacity
// (see expand), with a warning to show, if any.
func (e *CSIVolume) prepareRegister(snap *state.StateSnapshot, in *structs.CSIVolume, namespace string) (*structs.CSIVolume, string, error) {
	// in is the caller's (an in-process caller keeps what its arguments
	// point to), so what this changes is copied: the volume's own fields
	// and its mount options' (sealVolume). The rest is only read here and
	// by the encoding of the entry, and stays shared: a deep copy of every
	// volume registered was a tenth of the endpoint's CPU.
	c := *in
	vol := &c
	if in.MountOptions != nil {
		mo := *in.MountOptions
		vol.MountOptions = &mo
	}
	if vol.Namespace == "" {
		vol.Namespace = namespace
	}
	if err := vol.Validate(); err != nil {
		return nil, "", err
	}
	plugin, err := snap.CSIPluginByID(nil, vol.PluginID)
	if err != nil {
		return nil, "", err
	}
	if plugin == nil {
		return nil, "", structs.ErrNotFound("volume %q: no CSI plugin named %q could be found", vol.ID, vol.PluginID)
	}
	if plugin.ControllerRequired && plugin.ControllersHealthy == 0 {
		return nil, "", structs.NewError(structs.ErrCodeUnschedulable,
			"volume %q: plugin %q requires a controller and has no healthy controllers", vol.ID, vol.PluginID)
	}
	vol.Provider, vol.ProviderVersion = plugin.Provider, plugin.Version
	existing, err := snap.CSIVolumeByID(nil, vol.Namespace, vol.ID)
	if err != nil {
		return nil, "", err
	}
	if existing != nil && vol.ExternalID == "" {
		// An update that leaves the external ID out means the registered
		// one (it cannot change): validate that one, not the volume ID.
		vol.ExternalID = existing.ExternalID
	}
	if plugin.ControllerRequired {
		// The storage provider must know the volume and support its
		// capabilities before volplane promises them to workloads.
		if err := e.validateInPlugin(vol); err != nil {
			return nil, "", structs.Wrap(err, "volume %q", vol.ID)
		}
	}

	// Sealed before the merge, keeping the stored sealed values whose
	// plaintext is unchanged: the merge's "mount options in use" rule
	// compares them, and so does the FSM.
	if err := e.srv.sealVolume(vol, existing); err != nil {
		return nil, "", err
	}
	warning := ""
	if existing != nil {
		// The capacity of a registered volume is the plugin's to say,
		// through an expansion, never the update's.
		vol.Capacity = 0
		// The rule the FSM applies again to the volume as it is then.
		merged, err := existing.Merge(vol)
		if err != nil {
			return nil, "", err
		}
		if warning, err = e.expand(existing, merged, plugin); err != nil {
			return nil, "", err
		}
		vol = merged
	} else if len(vol.Topologies) == 0 && vol.RequestedTopologies != nil {
		vol.Topologies = slices.Clip(vol.Topologies) // appends must not write into the caller's array
		for _, t := range vol.RequestedTopologies.Required {
			vol.Topologies = append(vol.Topologies, t.Copy())
		}
	}
	clearDerived(vol)
	return vol, warning, nil
}

// validateInPlugin asks a controller whether the volume exists with its
// capabilities, holding the volume's lock (one operation per volume).
func (e *CSIVolume) validateInPlugin(vol *structs.CSIVolume) error {
	unlock, err := e.srv.lockVolume(vol.Namespace, vol.ID)
	if err != nil {
		return err
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(e.srv.shutdownCtx, e.srv.config.ClientRPCTimeout)
	defer cancel()
	return e.srv.clientRPC.ControllerValidateVolume(ctx, &structs.ClientCSIControllerValidateVolumeRequest{
		PluginID:      vol.PluginID,
		VolumeID:      vol.RemoteID(),
		Capabilities:  vol.RequestedCapabilities,
		MountOptions:  vol.MountOptions,
		Secrets:       vol.Secrets,
		Parameters:    vol.Parameters,
		VolumeContext: vol.Context,
	})
}

// clearDerived zeroes the fields that are computed on read, so they never
// reach the log.
func clearDerived(v *structs.CSIVolume) {
	v.Schedulable, v.UnschedulableReason = false, ""
	v.ControllerRequired = false
	v.ControllersHealthy, v.ControllersExpected = 0, 0
	v.NodesHealthy, v.NodesExpected = 0, 0
}

// Deregister removes volumes from state. It is refused while a volume is
// claimed, unless Force is set and every claiming allocation is terminal or
// gone; the plugin is not asked to unpublish anything.
func (e *CSIVolume) Deregister(args *structs.CSIVolumeDeregisterRequest, reply *structs.CSIVolumeDeregisterResponse) error {
	if done, err := e.srv.forward("CSIVolume.Deregister", args, args, reply); done {
		return err
	}
	if len(args.VolumeIDs) == 0 {
		return structs.ErrInvalid("missing volume IDs")
	}
	ns := args.RequestNamespace()
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	// The rules the FSM applies again to the volumes as they are then.
	if err := snap.CheckCSIVolumeDeregister(ns, args.VolumeIDs, args.Force); err != nil {
		return err
	}
	for _, id := range args.VolumeIDs {
		vol, err := snap.CSIVolumeByID(nil, ns, id)
		if err != nil {
			return err
		}
		if vol != nil && vol.InUse() {
			reply.Warnings = append(reply.Warnings, "volume "+id+" was claimed; "+
				"deregistering it with -force does not unpublish it from any node or controller")
		}
	}
	_, index, err := e.srv.raftApply(structs.CSIVolumeDeregisterRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// Get returns one volume without its secrets; Volume is nil when unknown.
func (e *CSIVolume) Get(args *structs.CSIVolumeGetRequest, reply *structs.CSIVolumeGetResponse) error {
	if done, err := e.srv.forward("CSIVolume.Get", args, args, reply); done {
		return err
	}
	if args.ID == "" {
		return structs.ErrInvalid("missing volume ID")
	}
	ns := args.RequestNamespace()
	id, err := e.srv.aclIdentity(args)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		vol, err := st.CSIVolumeByID(ws, ns, args.ID)
		if err != nil {
			return 0, err
		}
		// A client node reads only the volumes it holds claims on.
		if vol != nil && id != nil && id.nodeID != "" && !claimedOnNode(vol, id.nodeID) {
			vol = nil
		}
		if vol == nil {
			reply.Volume = nil
			return st.IndexWatch(ws, state.TableCSIVolumes)
		}
		// Plugin health is part of the answer, so a plugin change wakes us.
		if _, err := st.CSIPluginByID(ws, vol.PluginID); err != nil {
			return 0, err
		}
		reply.Volume = vol.Sanitize()
		return vol.ModifyIndex, nil
	})
}

// List returns one page of volume stubs in a namespace ("*" for all),
// optionally of one plugin, with an ID prefix, or claimed on one node.
func (e *CSIVolume) List(args *structs.CSIVolumeListRequest, reply *structs.CSIVolumeListResponse) error {
	if done, err := e.srv.forward("CSIVolume.List", args, args, reply); done {
		return err
	}
	if args.PerPage < 0 || args.PerPage > structs.MaxPerPage {
		return structs.ErrInvalid("per_page must be from 0 to %d, not %d", structs.MaxPerPage, args.PerPage)
	}
	ns := args.RequestNamespace()
	allow, err := e.srv.namespacesShown(args, ns, volumeListCaps...)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		index, err := st.IndexWatch(ws, state.TableCSIVolumes, state.TableCSIPlugins)
		if err != nil {
			return 0, err
		}
		if args.NodeID != "" {
			reply.Volumes, err = volumesOnNode(st, ns, args.Prefix, args.PluginID, args.NodeID, allow)
			reply.NextToken = ""
			return index, err
		}
		// The table index rows are watched already; per-row watches would
		// only cost memory on large lists.
		stubs, next, err := st.CSIVolumeStubsIn(nil, ns, args.Prefix, args.PluginID, args.NextToken, int(args.PerPage), allow)
		if err != nil {
			return 0, err
		}
		if stubs == nil {
			stubs = []*structs.CSIVolListStub{}
		}
		reply.Volumes, reply.NextToken = stubs, next
		return index, nil
	})
}

// volumesOnNode lists the volumes with a claim held or being released on a
// node, of the namespaces allow accepts (nil: all).
func volumesOnNode(st *state.StateStore, ns, prefix, pluginID, nodeID string, allow func(string) bool) ([]*structs.CSIVolListStub, error) {
	var iter memdb.ResultIterator
	var err error
	if pluginID != "" {
		iter, err = st.CSIVolumesByPluginID(nil, ns, prefix, pluginID)
	} else {
		iter, err = st.CSIVolumesByNamespace(nil, ns, prefix)
	}
	if err != nil {
		return nil, err
	}
	out := []*structs.CSIVolListStub{}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		vol := raw.(*structs.CSIVolume)
		if !claimedOnNode(vol, nodeID) || (allow != nil && !allow(vol.Namespace)) {
			continue
		}
		full, err := st.CSIVolumeDenormalizePlugins(nil, vol)
		if err != nil {
			return nil, err
		}
		out = append(out, full.Stub())
	}
	return out, nil
}

func claimedOnNode(v *structs.CSIVolume, nodeID string) bool {
	for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == nodeID {
				return true
			}
		}
	}
	return false
}
