package csi

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volplane/volplane/structs"
)

// NodeCapabilities are what the node service can do (NodeGetCapabilities).
type NodeCapabilities struct {
	// StageUnstage: NodeStageVolume must precede NodePublishVolume, and
	// NodeUnstageVolume follow the last NodeUnpublishVolume.
	StageUnstage          bool
	Stats                 bool
	Expand                bool
	Condition             bool
	SingleNodeMultiWriter bool
	VolumeMountGroup      bool
}

// NodeInfo is what the node service says about its node (NodeGetInfo).
type NodeInfo struct {
	// ID is the storage provider's ID of the node, which controller
	// publish and unpublish need.
	ID string
	// MaxVolumes is how many volumes the node can take; 0 means no limit.
	MaxVolumes int64
	// AccessibleTopology is where the node sits, or nil when the plugin
	// does not say.
	AccessibleTopology *structs.CSITopology
}

// NodeCapabilities returns what the node service can do.
func (c *Client) NodeCapabilities(ctx context.Context) (*NodeCapabilities, error) {
	req := &csipb.NodeGetCapabilitiesRequest{}
	resp, err := invoke(ctx, c, call{method: MethodNodeGetCapabilities, query: true, req: req},
		func(ctx context.Context) (*csipb.NodeGetCapabilitiesResponse, error) {
			return c.node.NodeGetCapabilities(ctx, req)
		})
	if err != nil {
		return nil, err
	}
	out := &NodeCapabilities{}
	for _, cap := range resp.GetCapabilities() {
		switch cap.GetRpc().GetType() {
		case csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME:
			out.StageUnstage = true
		case csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS:
			out.Stats = true
		case csipb.NodeServiceCapability_RPC_EXPAND_VOLUME:
			out.Expand = true
		case legacyNodeVolumeCondition, csipb.NodeServiceCapability_RPC_GET_VOLUME_HEALTH:
			out.Condition = true
		case csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER:
			out.SingleNodeMultiWriter = true
		case csipb.NodeServiceCapability_RPC_VOLUME_MOUNT_GROUP:
			out.VolumeMountGroup = true
		}
	}
	return out, nil
}

// NodeGetInfo returns the node's provider ID, volume limit and topology.
func (c *Client) NodeGetInfo(ctx context.Context) (*NodeInfo, error) {
	req := &csipb.NodeGetInfoRequest{}
	resp, err := invoke(ctx, c, call{method: MethodNodeGetInfo, query: true, req: req},
		func(ctx context.Context) (*csipb.NodeGetInfoResponse, error) {
			return c.node.NodeGetInfo(ctx, req)
		})
	if err != nil {
		return nil, err
	}
	return &NodeInfo{
		ID: resp.GetNodeId(),
		// The spec forbids a negative limit; treat one as "not set".
		MaxVolumes:         max(resp.GetMaxVolumesPerNode(), 0),
		AccessibleTopology: topologyFromCSI(resp.GetAccessibleTopology()),
	}, nil
}

// NodeStageVolume stages the volume at the node-wide staging path. Call it
// once per volume per node, after ControllerPublishVolume when the
// controller publishes, and before any NodePublishVolume.
func (c *Client) NodeStageVolume(ctx context.Context, r *NodeStageRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	req := &csipb.NodeStageVolumeRequest{
		VolumeId:          r.ExternalID,
		PublishContext:    r.PublishContext,
		StagingTargetPath: r.StagingPath,
		VolumeCapability:  r.Capability.toCSI(),
		Secrets:           r.Secrets,
		VolumeContext:     r.VolumeContext,
	}
	_, err := invoke(ctx, c, call{method: MethodNodeStageVolume, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.NodeStageVolumeResponse, error) {
			return c.node.NodeStageVolume(ctx, req)
		})
	return err
}

// NodeUnstageVolume undoes NodeStageVolume, after the volume's last
// NodeUnpublishVolume on the node. NotFound is taken as already unstaged
// and returns nil.
func (c *Client) NodeUnstageVolume(ctx context.Context, externalID, stagingPath string) error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", externalID)
	checkPath(&m, "staging path", stagingPath, false)
	if err := invalidRequest(MethodNodeUnstageVolume, externalID, &m); err != nil {
		return err
	}
	req := &csipb.NodeUnstageVolumeRequest{VolumeId: externalID, StagingTargetPath: stagingPath}
	_, err := invoke(ctx, c, call{method: MethodNodeUnstageVolume, volume: externalID, req: req},
		func(ctx context.Context) (*csipb.NodeUnstageVolumeResponse, error) {
			return c.node.NodeUnstageVolume(ctx, req)
		})
	return c.alreadyDone(MethodNodeUnstageVolume, externalID, err)
}

// NodePublishVolume makes the volume available at the target path, with
// the publish context from ControllerPublishVolume and, when the node
// stages, the staging path.
func (c *Client) NodePublishVolume(ctx context.Context, r *NodePublishRequest) error {
	if err := r.validate(); err != nil {
		return err
	}
	req := &csipb.NodePublishVolumeRequest{
		VolumeId:          r.ExternalID,
		PublishContext:    r.PublishContext,
		StagingTargetPath: r.StagingPath,
		TargetPath:        r.TargetPath,
		VolumeCapability:  r.Capability.toCSI(),
		Readonly:          r.ReadOnly,
		Secrets:           r.Secrets,
		VolumeContext:     r.VolumeContext,
	}
	_, err := invoke(ctx, c, call{method: MethodNodePublishVolume, volume: r.ExternalID, req: req},
		func(ctx context.Context) (*csipb.NodePublishVolumeResponse, error) {
			return c.node.NodePublishVolume(ctx, req)
		})
	return err
}

// NodeUnpublishVolume undoes NodePublishVolume at the target path. NotFound
// is taken as already unpublished and returns nil.
func (c *Client) NodeUnpublishVolume(ctx context.Context, externalID, targetPath string) error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", externalID)
	checkPath(&m, "target path", targetPath, false)
	if err := invalidRequest(MethodNodeUnpublishVolume, externalID, &m); err != nil {
		return err
	}
	req := &csipb.NodeUnpublishVolumeRequest{VolumeId: externalID, TargetPath: targetPath}
	_, err := invoke(ctx, c, call{method: MethodNodeUnpublishVolume, volume: externalID, req: req},
		func(ctx context.Context) (*csipb.NodeUnpublishVolumeResponse, error) {
			return c.node.NodeUnpublishVolume(ctx, req)
		})
	return c.alreadyDone(MethodNodeUnpublishVolume, externalID, err)
}
