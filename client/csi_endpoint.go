package client

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
)

// ClientCSI is the endpoint servers call on this client, over the streams
// they open on the client's session, to drive the CSI plugins on its node.
//
// Its errors are typed for the server: a plugin that does not run here, or
// runs unhealthy, is ErrCodeRetryable (the server tries another controller
// or tries again later); so is a plugin error the CSI spec says may go away
// (busy, unavailable, timed out) and a controller publish refused because
// the volume is published elsewhere (it can succeed once that claim is
// released). "Already done" answers are success. Anything else is
// ErrCodeInternal naming the method, the volume and the gRPC code, or
// ErrCodeInvalid for a request missing a field. Requests carry secrets:
// they are never logged.
type ClientCSI struct {
	c *Client
}

// ControllerAttachVolume publishes a volume to a node (ControllerPublishVolume)
// and returns the publish context.
func (e *ClientCSI) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	const name = "ClientCSI.ControllerAttachVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	required(&m, "ClientCSINodeID", args.ClientCSINodeID)
	validModes(&m, args.AccessMode, args.AttachmentMode)
	plugin, ctx, cancel, err := e.controllerCall(name, &m, args, args.ClientCSITarget, args.PluginID)
	if err != nil {
		return err
	}
	defer cancel()
	unlock, err := e.lockController(ctx, name, args.PluginID, args.VolumeID)
	if err != nil {
		return err
	}
	defer unlock()
	pc, err := plugin.ControllerPublishVolume(ctx, &csi.ControllerPublishRequest{
		ExternalID:    args.VolumeID,
		NodeID:        args.ClientCSINodeID,
		Capability:    csimanager.Capability(args.AccessMode, args.AttachmentMode, args.MountOptions),
		ReadOnly:      args.ReadOnly,
		Secrets:       args.Secrets,
		VolumeContext: args.VolumeContext,
	})
	if err != nil {
		return e.fail(csi.MethodControllerPublishVolume, args.PluginID, args.VolumeID, err)
	}
	reply.PublishContext = pc
	return nil
}

// ControllerDetachVolume unpublishes a volume from a node
// (ControllerUnpublishVolume); a volume or node the plugin no longer knows
// is detached already.
func (e *ClientCSI) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	const name = "ClientCSI.ControllerDetachVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	required(&m, "ClientCSINodeID", args.ClientCSINodeID)
	plugin, ctx, cancel, err := e.controllerCall(name, &m, args, args.ClientCSITarget, args.PluginID)
	if err != nil {
		return err
	}
	defer cancel()
	unlock, err := e.lockController(ctx, name, args.PluginID, args.VolumeID)
	if err != nil {
		return err
	}
	defer unlock()
	err = plugin.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishRequest{
		ExternalID: args.VolumeID,
		NodeID:     args.ClientCSINodeID,
		Secrets:    args.Secrets,
	})
	return e.fail(csi.MethodControllerUnpublishVolume, args.PluginID, args.VolumeID, err)
}

// ControllerValidateVolume checks that a volume supports the capabilities
// (ValidateVolumeCapabilities).
func (e *ClientCSI) ControllerValidateVolume(args *structs.ClientCSIControllerValidateVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	const name = "ClientCSI.ControllerValidateVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	caps := capabilities(&m, args.Capabilities, args.MountOptions)
	plugin, ctx, cancel, err := e.controllerCall(name, &m, args, args.ClientCSITarget, args.PluginID)
	if err != nil {
		return err
	}
	defer cancel()
	err = plugin.ControllerValidateVolume(ctx, &csi.ControllerValidateVolumeRequest{
		ExternalID:    args.VolumeID,
		Capabilities:  caps,
		Parameters:    args.Parameters,
		VolumeContext: args.VolumeContext,
		Secrets:       args.Secrets,
	})
	return e.fail(csi.MethodValidateVolumeCapabilities, args.PluginID, args.VolumeID, err)
}

// ControllerCreateVolume creates a volume (CreateVolume).
func (e *ClientCSI) ControllerCreateVolume(args *structs.ClientCSIControllerCreateVolumeRequest, reply *structs.ClientCSIControllerCreateVolumeResponse) error {
	const name = "ClientCSI.ControllerCreateVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "Name", args.Name)
	caps := capabilities(&m, args.Capabilities, args.MountOptions)
	plugin, ctx, cancel, err := e.controllerCall(name, &m, args, args.ClientCSITarget, args.PluginID)
	if err != nil {
		return err
	}
	defer cancel()
	resp, err := plugin.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:         args.Name,
		CapacityMin:  args.CapacityMin,
		CapacityMax:  args.CapacityMax,
		Capabilities: caps,
		Parameters:   args.Parameters,
		Secrets:      args.Secrets,
		SnapshotID:   args.SnapshotID,
		CloneID:      args.CloneID,
		Topology:     args.RequestedTopologies,
	})
	if err != nil {
		return e.fail(csi.MethodCreateVolume, args.PluginID, args.Name, err)
	}
	reply.ExternalVolumeID = resp.ExternalID
	reply.CapacityBytes = resp.CapacityBytes
	reply.VolumeContext = resp.Context
	reply.Topologies = resp.Topologies
	return nil
}

// ControllerDeleteVolume deletes a volume (DeleteVolume); one already gone
// is deleted.
func (e *ClientCSI) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	const name = "ClientCSI.ControllerDeleteVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	plugin, ctx, cancel, err := e.controllerCall(name, &m, args, args.ClientCSITarget, args.PluginID)
	if err != nil {
		return err
	}
	defer cancel()
	unlock, err := e.lockController(ctx, name, args.PluginID, args.VolumeID)
	if err != nil {
		return err
	}
	defer unlock()
	err = plugin.DeleteVolume(ctx, args.VolumeID, args.Secrets)
	return e.fail(csi.MethodDeleteVolume, args.PluginID, args.VolumeID, err)
}

// NodeDetachVolume undoes an allocation's use of a volume on this node:
// NodeUnpublishVolume at the allocation's target path, then, when the node
// plugin stages and no other allocation here uses the same staging path,
// NodeUnstageVolume. Each step counts a "nothing to undo" answer as done,
// so a retried detach completes. While the allocation still sets up its
// volumes or runs tasks here, the detach is refused with a retryable
// error: a volume is never pulled from under a running task. Once done, the
// client forgets the allocation's use of the volume.
func (e *ClientCSI) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	const name = "ClientCSI.NodeDetachVolume"
	var m structs.MultiError
	required(&m, "PluginID", args.PluginID)
	required(&m, "VolumeID", args.VolumeID)
	required(&m, "AllocID", args.AllocID)
	usage, recorded := e.c.usage.Get(args.AllocID, args.VolumeID)
	externalID := args.ExternalID
	if externalID == "" {
		externalID = usage.ExternalID
	}
	required(&m, "ExternalID", externalID)
	if err := e.check(name, &m, args.ClientCSITarget); err != nil {
		return err
	}
	// The request names the volume and its modes; the record, when there
	// is one, gives the paths it was published at.
	ctx, cancel := e.c.calls.Context(args)
	defer cancel()
	_, err := e.nodeDetach(ctx, name, &nodeDetachRequest{VolumeUsage: state.VolumeUsage{
		AllocID: args.AllocID, PluginID: args.PluginID, Namespace: args.RequestNamespace(), VolumeID: args.VolumeID,
		ExternalID: externalID, AccessMode: args.AccessMode, AttachmentMode: args.AttachmentMode, ReadOnly: args.ReadOnly,
		StagingPath: usage.StagingPath, TargetPath: usage.TargetPath,
	}, recorded: recorded})
	return err
}

// nodeDetachRequest is one allocation's use of a volume to undo on this
// node. The servers ask for it (NodeDetachVolume); so does the client
// itself for a use the servers released without the node step (see
// orphan_volumes.go). Both go through nodeDetach, so they exclude each
// other and the runners' publishes alike.
type nodeDetachRequest struct {
	// VolumeUsage names the allocation, the volume and its modes; its
	// paths count only when recorded says the use was found in the usage
	// registry (read before the request was checked).
	state.VolumeUsage
	recorded bool
	// onlyRecorded undoes the recorded use only: once the volume is
	// locked, a record that is gone means another detach got there first
	// and there is nothing left to do, and the allocation is checked again
	// so that a runner built meanwhile keeps its volume. The client's own
	// detaches set it; the servers' do not, since they may repeat a detach
	// whose record is gone.
	onlyRecorded bool
}

// nodeDetach does a checked node detach (see NodeDetachVolume) within ctx
// and reports whether it undid anything: false only when onlyRecorded found
// the record gone. name prefixes the errors. The request's fields are
// assumed present.
func (e *ClientCSI) nodeDetach(ctx context.Context, name string, d *nodeDetachRequest) (bool, error) {
	if err := e.c.allocs.CheckDetach(d.AllocID); err != nil {
		return false, structs.Wrap(err, "%s: volume %q", name, d.VolumeID)
	}
	plugin, nodeInfo, err := e.c.plugins.Node(d.PluginID)
	if err != nil {
		return false, err
	}
	// A detach of the same volume still in flight (a server's, whose
	// caller may be gone) is waited for no longer than this one may take.
	unlock, err := e.c.volumeLocks.LockVolume(ctx, d.PluginID, d.Namespace, d.VolumeID)
	if err != nil {
		return false, structs.NewError(structs.ErrCodeRetryable, "%s: volume %q: another operation on the volume did not end in time: %v",
			name, d.VolumeID, err)
	}
	defer unlock()

	usage, recorded := d.VolumeUsage, d.recorded
	if d.onlyRecorded {
		if usage, recorded = e.c.usage.Get(d.AllocID, d.VolumeID); !recorded {
			return false, nil
		}
		// The check above ran before the lock: a runner may have been
		// built for the allocation since, and be publishing (under this
		// lock, so it is done) or running.
		if err := e.c.allocs.CheckDetach(d.AllocID); err != nil {
			return false, structs.Wrap(err, "%s: volume %q", name, d.VolumeID)
		}
	}
	target := e.c.paths.TargetPath(d.AllocID, d.VolumeID)
	staging := e.c.paths.StagingPath(d.PluginID, d.Namespace, d.VolumeID,
		state.UsageMode(d.AccessMode, d.AttachmentMode, d.ReadOnly))
	stages := nodeInfo.NodeInfo != nil && nodeInfo.NodeInfo.RequiresNodeStageVolume
	if recorded {
		// The paths the volume was published at win over today's scheme.
		target = usage.TargetPath
		staging = usage.StagingPath
		stages = stages && staging != ""
	}

	if err := plugin.NodeUnpublishVolume(ctx, d.ExternalID, target); err != nil {
		return false, e.fail(csi.MethodNodeUnpublishVolume, d.PluginID, d.ExternalID, err)
	}
	// The plugin removed the target; the client made its parent.
	removeEmptyDir(filepath.Dir(target))

	if stages {
		if others := e.c.usage.OthersStagedAt(d.AllocID, d.PluginID, staging); len(others) > 0 {
			e.c.logger.Debug("volume still used on this node; leaving it staged", "volume_id", d.VolumeID,
				"alloc_id", d.AllocID, "other_allocs", others)
		} else {
			if err := plugin.NodeUnstageVolume(ctx, d.ExternalID, staging); err != nil {
				return false, e.fail(csi.MethodNodeUnstageVolume, d.PluginID, d.ExternalID, err)
			}
			removeEmptyDir(staging)
		}
	}
	if err := e.c.usage.Remove(d.AllocID, d.VolumeID); err != nil {
		return false, structs.NewError(structs.ErrCodeInternal, "%s: volume %q of allocation %q was detached but not forgotten: %v",
			name, d.VolumeID, d.AllocID, err)
	}
	e.c.allocs.VolumeDetached(d.AllocID, d.VolumeID)
	e.c.logger.Debug("volume detached from node", "volume_id", d.VolumeID, "alloc_id", d.AllocID)
	return true, nil
}

// controllerCall checks a controller request (m holds its field problems)
// and returns the controller plugin to call and the context of the call;
// the caller defers cancel.
func (e *ClientCSI) controllerCall(name string, m *structs.MultiError, args any, target structs.ClientCSITarget, pluginID string) (*csi.Client, context.Context, context.CancelFunc, error) {
	if err := e.check(name, m, target); err != nil {
		return nil, nil, nil, err
	}
	plugin, err := e.c.plugins.Controller(pluginID)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := e.c.calls.Context(args)
	return plugin, ctx, cancel, nil
}

// lockController takes this agent's lock on a controller operation on one
// volume (by the plugin's ID of it), within the call's context. The leader
// runs one operation per volume at a time; this lock keeps that true across
// leaders: a call of a leader that went, which this agent cancels when its
// stream ends, has finished with the plugin before the next leader's
// publish or unpublish of the same volume begins.
func (e *ClientCSI) lockController(ctx context.Context, name, pluginID, externalID string) (func(), error) {
	unlock, err := e.c.volumeLocks.LockController(ctx, pluginID, externalID)
	if err != nil {
		return nil, structs.NewError(structs.ErrCodeRetryable, "%s: volume %q: another controller operation on the volume did not end in time: %v",
			name, externalID, err)
	}
	return unlock, nil
}

// check returns the request's validation problems as one invalid error, or
// a retryable one when the call was meant for another node.
func (e *ClientCSI) check(name string, m *structs.MultiError, target structs.ClientCSITarget) error {
	if err := m.ErrorOrNil(name); err != nil {
		return err
	}
	if target.NodeID != "" && target.NodeID != e.c.id.NodeID {
		// A server's view of which session leads where is stale.
		return structs.NewError(structs.ErrCodeRetryable, "%s: call for node %q reached node %q", name, target.NodeID, e.c.id.NodeID)
	}
	return nil
}

// fail turns a plugin error into the typed error the server acts on (nil
// for success and for "already done"), and logs it.
func (e *ClientCSI) fail(method, pluginID, volumeID string, err error) error {
	if err == nil {
		return nil
	}
	out := csimanager.CallError(method, volumeID, err)
	if out != nil {
		e.c.logger.Warn("csi plugin call failed", "plugin_id", pluginID, "method", method, "volume_id", volumeID,
			"code", structs.CodeOf(out), "error", out)
	}
	return out
}

func quote(s string) string { return `"` + s + `"` }

func required(m *structs.MultiError, field, value string) {
	if value == "" {
		m.Add("missing %s", field)
	}
}

func validModes(m *structs.MultiError, access structs.CSIVolumeAccessMode, attachment structs.CSIVolumeAttachmentMode) {
	if !access.Valid() {
		m.Add("AccessMode %q is not a known access mode", access)
	}
	if !attachment.Valid() {
		m.Add("AttachmentMode %q is not a known attachment mode", attachment)
	}
}

// capabilities converts a request's capabilities, adding their problems to m.
func capabilities(m *structs.MultiError, in []*structs.CSIVolumeCapability, opts *structs.CSIMountOptions) []*csi.VolumeCapability {
	if len(in) == 0 {
		m.Add("missing Capabilities")
	}
	var out []*csi.VolumeCapability
	for _, c := range in {
		if c == nil {
			m.Add("Capabilities has an empty entry")
			continue
		}
		validModes(m, c.AccessMode, c.AttachmentMode)
		out = append(out, csimanager.Capability(c.AccessMode, c.AttachmentMode, opts))
	}
	return out
}

// removeEmptyDir removes dir if it is empty; anything else stays.
func removeEmptyDir(dir string) {
	_ = os.Remove(dir)
}

// volumeLocks is the client's lock on each volume of a plugin (see
// Client.volumeLocks): a set of locks by key, each dropped when unused.
// The runners' publish and the servers' detach must name a volume alike to
// exclude each other.
type volumeLocks struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	// sem holds a token while the lock is held: a channel, so that a
	// waiter can give up.
	sem  chan struct{}
	refs int
}

// LockVolume locks a volume and returns its unlock, or ctx's error if ctx
// ends first.
func (k *volumeLocks) LockVolume(ctx context.Context, pluginID, namespace, volumeID string) (func(), error) {
	return k.lock(ctx, "volume\x00"+pluginID+"\x00"+namespace+"\x00"+volumeID)
}

// LockController locks the controller operations on one volume, named by
// the plugin's ID of it, and returns the unlock, or ctx's error if ctx
// ends first.
func (k *volumeLocks) LockController(ctx context.Context, pluginID, externalID string) (func(), error) {
	return k.lock(ctx, controllerLockKey(pluginID, externalID))
}

func controllerLockKey(pluginID, externalID string) string {
	return "controller\x00" + pluginID + "\x00" + externalID
}

func (k *volumeLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{sem: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	return func() {
		<-l.sem
		release()
	}, nil
}
