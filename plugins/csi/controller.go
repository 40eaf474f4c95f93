package csi

import (
	"context"
	"fmt"
	"maps"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/structs"
)

// Capability numbers that spec v1.13 no longer names: VOLUME_CONDITION was
// 11 for controllers and 4 for nodes before the volume health RPCs replaced
// it. Plugins built against older specs still report them.
const (
	legacyControllerVolumeCondition csipb.ControllerServiceCapability_RPC_Type = 11
	legacyNodeVolumeCondition       csipb.NodeServiceCapability_RPC_Type       = 4
)

// ControllerCapabilities returns what the controller service can do
// (ControllerGetCapabilities).
func (c *Client) ControllerCapabilities(ctx context.Context) (*structs.CSIControllerInfo, error) {
	req := &csipb.ControllerGetCapabilitiesRequest{}
	resp, err := invoke(ctx, c, call{method: MethodControllerGetCapabilities, query: true, req: req},
		func(ctx context.Context) (*csipb.ControllerGetCapabilitiesResponse, error) {
			return c.controller.ControllerGetCapabilities(ctx, req)
		})
	if err != nil {
		return nil, err
	}
	out := &structs.CSIControllerInfo{}
	for _, cap := range resp.GetCapabilities() {
		switch cap.GetRpc().GetType() {
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME:
			out.SupportsCreateDelete = true
		case csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME:
			out.SupportsAttachDetach = true
		case csipb.ControllerServiceCapability_RPC_LIST_VOLUMES:
			out.SupportsListVolumes = true
		case csipb.ControllerServiceCapability_RPC_GET_CAPACITY:
			out.SupportsGetCapacity = true
		case csipb.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT:
			out.SupportsCreateDeleteSnapshot = true
		case csipb.ControllerServiceCapability_RPC_LIST_SNAPSHOTS:
			out.SupportsListSnapshots = true
		case csipb.ControllerServiceCapability_RPC_CLONE_VOLUME:
			out.SupportsClone = true
		case csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY:
			out.SupportsReadOnlyAttach = true
		case csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME:
			out.SupportsExpand = true
		case csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES:
			out.SupportsListVolumesAttachedNodes = true
		case legacyControllerVolumeCondition,
			csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
			csipb.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH:
			out.SupportsCondition = true
		case csipb.ControllerServiceCapability_RPC_GET_VOLUME:
			out.SupportsGet = true
		}
	}
	return out, nil
}

// ControllerPublishVolume attaches the volume to the node and returns the
// publish context, which must travel to NodeStageVolume and
// NodePublishVolume. FailedPrecondition (published on another node) is
// final here; see ClassOf.
//
// ReadOnly must be false unless the controller has PUBLISH_READONLY.
func (c *Client) ControllerPublishVolume(ctx context.Context, r *ControllerPublishRequest) (map[string]string, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	req := &csipb.ControllerPublishVolumeRequest{
		VolumeId:         r.ExternalID,
		NodeId:           r.NodeID,
		VolumeCapability: r.Capability.toCSI(),
		Readonly:         r.ReadOnly,
		Secrets:          r.Secrets,
		VolumeContext:    r.VolumeContext,
	}
	resp, err := invoke(ctx, c, call{method: MethodControllerPublishVolume, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.ControllerPublishVolumeResponse, error) {
			return c.controller.ControllerPublishVolume(ctx, req)
		})
	if err != nil {
		return nil, err
	}
	return resp.GetPublishContext(), nil
}

// ControllerUnpublishVolume detaches the volume from the node. NotFound is
// taken as already detached and returns nil.
func (c *Client) ControllerUnpublishVolume(ctx context.Context, r *ControllerUnpublishRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	req := &csipb.ControllerUnpublishVolumeRequest{VolumeId: r.ExternalID, NodeId: r.NodeID, Secrets: r.Secrets}
	_, err := invoke(ctx, c, call{method: MethodControllerUnpublishVolume, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.ControllerUnpublishVolumeResponse, error) {
			return c.controller.ControllerUnpublishVolume(ctx, req)
		})
	return c.alreadyDone(MethodControllerUnpublishVolume, r.ExternalID, err)
}

// ControllerValidateVolume checks that an existing volume supports the
// capabilities (ValidateVolumeCapabilities). A volume the plugin does not
// confirm, or confirms for other capabilities or another context than
// asked, is a final error (code InvalidArgument) that gives the reason.
func (c *Client) ControllerValidateVolume(ctx context.Context, r *ControllerValidateVolumeRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	req := &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId:           r.ExternalID,
		VolumeCapabilities: capabilitiesToCSI(r.Capabilities),
		Parameters:         r.Parameters,
		VolumeContext:      r.VolumeContext,
		Secrets:            r.Secrets,
	}
	resp, err := invoke(ctx, c, call{method: MethodValidateVolumeCapabilities, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
			return c.controller.ValidateVolumeCapabilities(ctx, req)
		})
	if err != nil {
		return err
	}
	if why := unconfirmed(resp, r); why != "" {
		why = scrub(why, sensitiveValues(req))
		return localError(MethodValidateVolumeCapabilities, r.ExternalID, codes.InvalidArgument,
			structs.ErrInvalid("volume capabilities not confirmed: %s", why))
	}
	return nil
}

// unconfirmed returns why the answer does not confirm the request, or "".
// The spec asks the CO to compare what was confirmed with what it asked,
// so that an older plugin that ignores a field it does not know cannot
// confirm it by accident.
func unconfirmed(resp *csipb.ValidateVolumeCapabilitiesResponse, r *ControllerValidateVolumeRequest) string {
	conf := resp.GetConfirmed()
	if conf == nil {
		if resp.GetMessage() != "" {
			return resp.GetMessage()
		}
		return "the plugin gave no reason"
	}
	for _, want := range r.Capabilities {
		found := false
		for _, got := range conf.GetVolumeCapabilities() {
			if confirms(got, want) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Sprintf("capability %s/%s is not among the confirmed ones", want.AccessMode, want.AttachmentMode)
		}
	}
	if len(conf.GetVolumeContext()) > 0 && !maps.Equal(conf.GetVolumeContext(), r.VolumeContext) {
		return "the confirmed volume context differs from the one requested"
	}
	if len(conf.GetParameters()) > 0 && !maps.Equal(conf.GetParameters(), r.Parameters) {
		return "the confirmed parameters differ from the ones requested"
	}
	return ""
}

// CreateVolume provisions a volume. A retry with the same Name must not
// create a second one (the plugin keys creation on the name).
func (c *Client) CreateVolume(ctx context.Context, r *CreateVolumeRequest) (*CreateVolumeResponse, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	req := r.toCSI()
	resp, err := invoke(ctx, c, call{method: MethodCreateVolume, req: req},
		func(ctx context.Context) (*csipb.CreateVolumeResponse, error) {
			return c.controller.CreateVolume(ctx, req)
		})
	if err != nil {
		return nil, err
	}
	vol := resp.GetVolume()
	if vol.GetVolumeId() == "" {
		return nil, localError(MethodCreateVolume, "", codes.Internal,
			fmt.Errorf("plugin created volume %q but returned no volume id", r.Name))
	}
	out := &CreateVolumeResponse{
		ExternalID:    vol.GetVolumeId(),
		CapacityBytes: vol.GetCapacityBytes(),
		Context:       maps.Clone(vol.GetVolumeContext()),
	}
	for _, t := range vol.GetAccessibleTopology() {
		if st := topologyFromCSI(t); st != nil {
			out.Topologies = append(out.Topologies, st)
		}
	}
	return out, nil
}

// DeleteVolume deletes the volume at the storage provider. A volume that is
// already gone (NotFound) is deleted as far as the caller is concerned.
func (c *Client) DeleteVolume(ctx context.Context, externalID string, secrets structs.CSISecrets) error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", externalID)
	if err := invalidRequest(MethodDeleteVolume, externalID, &m); err != nil {
		return err
	}
	req := &csipb.DeleteVolumeRequest{VolumeId: externalID, Secrets: secrets}
	_, err := invoke(ctx, c, call{method: MethodDeleteVolume, volume: externalID, req: req},
		func(ctx context.Context) (*csipb.DeleteVolumeResponse, error) {
			return c.controller.DeleteVolume(ctx, req)
		})
	return c.alreadyDone(MethodDeleteVolume, externalID, err)
}

// alreadyDone turns an already-done error into success, noting it at debug
// level, and returns any other error as it is.
func (c *Client) alreadyDone(method, volumeID string, err error) error {
	if err == nil || ClassOf(method, err) != ClassAlreadyDone {
		return err
	}
	c.logger.Debug("plugin reports nothing left to do; treating the call as done",
		"method", method, "volume_id", volumeID, "error", err)
	return nil
}
