package csi

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/volplane/volplane/structs"
)

// expectIdentity sets up the three identity calls every fingerprint makes.
func (h *harness) expectIdentity(ready *wrapperspb.BoolValue, caps ...csipb.PluginCapability_Service_Type) {
	h.identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(pluginInfo("org.example.disk", "0.9.1"), nil)
	h.identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(pluginCaps(caps...), nil)
	h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{Ready: ready}, nil)
}

func TestFingerprint_Monolith(t *testing.T) {
	h := newHarness(t)
	h.expectIdentity(nil, csipb.PluginCapability_Service_CONTROLLER_SERVICE,
		csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS)
	h.controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(controllerCaps(
		csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	), nil)
	h.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCaps(
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	), nil)
	h.node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetInfoResponse{
		NodeId:             "i-0abc",
		MaxVolumesPerNode:  0,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "eu-1a"}},
	}, nil)

	controller, node, err := h.client.Fingerprint(h.ctx, "disk", "")
	must.NoError(t, err)
	must.NotNil(t, controller)
	must.NotNil(t, node)
	must.NoError(t, controller.Validate())
	must.NoError(t, node.Validate())

	for _, info := range []*structs.CSIInfo{controller, node} {
		must.Eq(t, "disk", info.PluginID)
		must.True(t, info.Healthy)
		must.Eq(t, HealthyDescription, info.HealthDescription)
		must.Eq(t, "org.example.disk", info.Provider)
		must.Eq(t, "0.9.1", info.ProviderVersion)
		must.True(t, info.RequiresControllerPlugin)
		must.True(t, info.RequiresTopologies)
		must.False(t, info.UpdateTime.IsZero())
	}
	must.Eq(t, &structs.CSIControllerInfo{
		SupportsAttachDetach: true, SupportsCreateDelete: true, SupportsReadOnlyAttach: true,
	}, controller.ControllerInfo)
	must.Nil(t, controller.NodeInfo)
	must.Nil(t, node.ControllerInfo)
	must.Eq(t, &structs.CSINodeInfo{
		ID:                      "i-0abc",
		MaxVolumes:              0, // unlimited
		AccessibleTopology:      &structs.CSITopology{Segments: map[string]string{"zone": "eu-1a"}},
		RequiresNodeStageVolume: true,
		SupportsStats:           true,
	}, node.NodeInfo)
}

// TestFingerprint_NodePlugin: a plugin without the controller service is a
// node plugin; its controller side is never asked (the mock would fail).
func TestFingerprint_NodePlugin(t *testing.T) {
	h := newHarness(t)
	h.expectIdentity(wrapperspb.Bool(true))
	h.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCaps(), nil)
	h.node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetInfoResponse{
		NodeId: "n-1", MaxVolumesPerNode: 16,
	}, nil)

	controller, node, err := h.client.Fingerprint(h.ctx, "nfs", "")
	must.NoError(t, err)
	must.Nil(t, controller)
	must.NotNil(t, node)
	must.False(t, node.RequiresControllerPlugin)
	must.False(t, node.RequiresTopologies)
	must.Eq(t, &structs.CSINodeInfo{ID: "n-1", MaxVolumes: 16}, node.NodeInfo)
	must.Nil(t, node.NodeInfo.AccessibleTopology)
}

// TestFingerprint_ControllerPlugin: run as a controller, only the controller
// side is described; the node service is never asked.
func TestFingerprint_ControllerPlugin(t *testing.T) {
	h := newHarness(t)
	h.expectIdentity(nil, csipb.PluginCapability_Service_CONTROLLER_SERVICE)
	h.controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(controllerCaps(
		csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		legacyControllerVolumeCondition,
	), nil)

	controller, node, err := h.client.Fingerprint(h.ctx, "ebs", structs.CSIPluginTypeController)
	must.NoError(t, err)
	must.Nil(t, node)
	must.NotNil(t, controller)
	must.Eq(t, &structs.CSIControllerInfo{SupportsAttachDetach: true, SupportsCondition: true}, controller.ControllerInfo)
}

func TestFingerprint_ControllerTypeWithoutControllerService(t *testing.T) {
	h := newHarness(t)
	h.identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(pluginInfo("p", "1"), nil)
	h.identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(pluginCaps(), nil)

	_, _, err := h.client.Fingerprint(h.ctx, "p", structs.CSIPluginTypeMonolith)
	must.EqError(t, err, `plugin "p" is run as a monolith plugin but does not offer the controller service`)
}

// TestFingerprint_NotReady: ready=false is an unhealthy fingerprint, not an
// error; what the plugin cannot answer yet goes into the description.
func TestFingerprint_NotReady(t *testing.T) {
	h := newHarness(t)
	h.expectIdentity(wrapperspb.Bool(false))
	h.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCaps(), nil)
	h.node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).
		Return(nil, status.Error(codes.FailedPrecondition, "still discovering the node"))

	controller, node, err := h.client.Fingerprint(h.ctx, "disk", structs.CSIPluginTypeNode)
	must.NoError(t, err)
	must.Nil(t, controller)
	must.NotNil(t, node)
	must.False(t, node.Healthy)
	must.Eq(t, NotReadyDescription+
		"; NodeGetInfo: rpc error: code = FailedPrecondition desc = still discovering the node", node.HealthDescription)
	must.NotNil(t, node.NodeInfo)
	must.NoError(t, node.Validate())
}

func TestFingerprint_ProbeFails(t *testing.T) {
	h := newHarness(t)
	h.identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(pluginInfo("p", "1"), nil)
	h.identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(pluginCaps(), nil)
	h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(nil, status.Error(codes.FailedPrecondition, "backend unreachable"))

	_, _, err := h.client.Fingerprint(h.ctx, "p", "")
	must.EqError(t, err, "Probe: rpc error: code = FailedPrecondition desc = backend unreachable")
}

// TestFingerprint_EmptyNodeID: a ready node plugin that gives no node ID
// cannot take volumes; that is an error, not a fingerprint.
func TestFingerprint_EmptyNodeID(t *testing.T) {
	h := newHarness(t)
	h.expectIdentity(nil)
	h.node.EXPECT().NodeGetCapabilities(gomock.Any(), gomock.Any()).Return(nodeCaps(), nil)
	h.node.EXPECT().NodeGetInfo(gomock.Any(), gomock.Any()).Return(&csipb.NodeGetInfoResponse{}, nil)

	_, _, err := h.client.Fingerprint(h.ctx, "p", "")
	must.EqError(t, err, "NodeGetInfo: plugin reported an empty node id")
}

func TestFingerprint_UnknownType(t *testing.T) {
	h := newHarness(t)
	_, _, err := h.client.Fingerprint(h.ctx, "p", "sidecar")
	must.EqError(t, err, `plugin "p": unknown plugin type "sidecar"`)
}
