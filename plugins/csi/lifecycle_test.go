package csi

import (
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/volplane/volplane/structs"
)

// TestClient_Snapshots: create, list and delete carry their arguments and
// secrets to the plugin, answers come back converted, a snapshot already
// gone is deleted, and a secret the plugin echoes never reaches the error.
func TestClient_Snapshots(t *testing.T) {
	h := newHarness(t)
	secrets := structs.CSISecrets{"key": "snapshot-secret-1"}
	created := time.Unix(1700000000, 0).UTC()
	h.controller.EXPECT().CreateSnapshot(gomock.Any(), pb(&csipb.CreateSnapshotRequest{
		SourceVolumeId: "ext-1", Name: "nightly", Secrets: secrets, Parameters: map[string]string{"kind": "full"},
	})).Return(&csipb.CreateSnapshotResponse{Snapshot: &csipb.Snapshot{
		SnapshotId: "snap-1", SourceVolumeId: "ext-1", SizeBytes: 4096, CreationTime: timestamppb.New(created), ReadyToUse: true,
	}}, nil)
	snap, err := h.client.CreateSnapshot(h.ctx, &CreateSnapshotRequest{
		SourceVolumeID: "ext-1", Name: "nightly", Secrets: secrets, Parameters: map[string]string{"kind": "full"}})
	must.NoError(t, err)
	must.Eq(t, &Snapshot{ID: "snap-1", SourceVolumeID: "ext-1", SizeBytes: 4096, CreateTime: created, ReadyToUse: true}, snap)

	h.controller.EXPECT().CreateSnapshot(gomock.Any(), gomock.Any()).
		Return(nil, status.Error(codes.PermissionDenied, "bad key snapshot-secret-1"))
	_, err = h.client.CreateSnapshot(h.ctx, &CreateSnapshotRequest{SourceVolumeID: "ext-1", Name: "again", Secrets: secrets})
	must.Error(t, err)
	must.StrNotContains(t, err.Error(), "snapshot-secret-1")
	must.Eq(t, ClassFinal, ClassOf("", err))

	_, err = h.client.CreateSnapshot(h.ctx, &CreateSnapshotRequest{SourceVolumeID: "ext-1"})
	must.Error(t, err, must.Sprint("a snapshot without a name is refused before it is sent"))

	h.controller.EXPECT().ListSnapshots(gomock.Any(), pb(&csipb.ListSnapshotsRequest{MaxEntries: 2, StartingToken: "t1", Secrets: secrets})).
		Return(&csipb.ListSnapshotsResponse{NextToken: "t2", Entries: []*csipb.ListSnapshotsResponse_Entry{
			{Snapshot: &csipb.Snapshot{SnapshotId: "snap-2", SourceVolumeId: "ext-2"}}, {},
		}}, nil)
	page, next, err := h.client.ListSnapshots(h.ctx, &ListSnapshotsRequest{MaxEntries: 2, StartingToken: "t1", Secrets: secrets})
	must.NoError(t, err)
	must.Eq(t, "t2", next)
	must.Eq(t, []*Snapshot{{ID: "snap-2", SourceVolumeID: "ext-2"}}, page, must.Sprint("an empty entry is skipped"))

	h.controller.EXPECT().DeleteSnapshot(gomock.Any(), pb(&csipb.DeleteSnapshotRequest{SnapshotId: "snap-1", Secrets: secrets})).
		Return(nil, status.Error(codes.NotFound, "no such snapshot"))
	must.NoError(t, h.client.DeleteSnapshot(h.ctx, "snap-1", secrets))
}

// TestClient_ListingTokens: ABORTED from a listing means the starting
// token is not the plugin's: final at once, never retried, and recognised
// by IsInvalidToken. Elsewhere ABORTED stays retryable.
func TestClient_ListingTokens(t *testing.T) {
	h := newHarness(t)
	h.controller.EXPECT().ListVolumes(gomock.Any(), pb(&csipb.ListVolumesRequest{StartingToken: "garbage"})).
		Return(nil, status.Error(codes.Aborted, "invalid starting_token")).Times(1)
	_, _, err := h.client.ListVolumes(h.ctx, 0, "garbage")
	must.Error(t, err)
	must.True(t, IsInvalidToken(MethodListVolumes, err))
	must.Eq(t, ClassFinal, ClassOf(MethodListVolumes, err))
	must.Eq(t, ClassRetryable, ClassOf(MethodCreateVolume, status.Error(codes.Aborted, "busy")))
	must.False(t, IsInvalidToken(MethodCreateVolume, status.Error(codes.Aborted, "busy")))

	h.controller.EXPECT().ListVolumes(gomock.Any(), pb(&csipb.ListVolumesRequest{MaxEntries: 5})).
		Return(&csipb.ListVolumesResponse{NextToken: "n", Entries: []*csipb.ListVolumesResponse_Entry{{
			Volume: &csipb.Volume{VolumeId: "ext-1", CapacityBytes: 10, VolumeContext: map[string]string{"a": "b"},
				ContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
					Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap-9"}}}},
			Status: &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: []string{"node-a"}},
		}}}, nil)
	vols, next, err := h.client.ListVolumes(h.ctx, 5, "")
	must.NoError(t, err)
	must.Eq(t, "n", next)
	must.Eq(t, []*ListedVolume{{ExternalID: "ext-1", CapacityBytes: 10, Context: map[string]string{"a": "b"},
		SnapshotID: "snap-9", PublishedNodeIDs: []string{"node-a"}}}, vols)
}

// TestClient_Expand: the controller and node expansions carry the range,
// the capability of a published volume and its paths, and return what the
// plugin says; a request without a capacity is refused before it is sent.
func TestClient_Expand(t *testing.T) {
	h := newHarness(t)
	capability := &VolumeCapability{AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem, MountOptions: &structs.CSIMountOptions{FSType: "ext4"}}
	wantCap := mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4")
	h.controller.EXPECT().ControllerExpandVolume(gomock.Any(), pb(&csipb.ControllerExpandVolumeRequest{
		VolumeId: "ext-1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 2048, LimitBytes: 4096}, VolumeCapability: wantCap,
	})).Return(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 2048, NodeExpansionRequired: true}, nil)
	got, nodeToo, err := h.client.ControllerExpandVolume(h.ctx, &ControllerExpandRequest{
		ExternalID: "ext-1", CapacityMin: 2048, CapacityMax: 4096, Capability: capability})
	must.NoError(t, err)
	must.Eq(t, int64(2048), got)
	must.True(t, nodeToo)

	h.node.EXPECT().NodeExpandVolume(gomock.Any(), pb(&csipb.NodeExpandVolumeRequest{
		VolumeId: "ext-1", VolumePath: "/alloc/a1/vol", StagingTargetPath: "/staging/vol",
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 2048}, VolumeCapability: wantCap,
	})).Return(&csipb.NodeExpandVolumeResponse{CapacityBytes: 2048}, nil)
	got, err = h.client.NodeExpandVolume(h.ctx, &NodeExpandRequest{ExternalID: "ext-1", VolumePath: "/alloc/a1/vol",
		StagingPath: "/staging/vol", CapacityMin: 2048, Capability: capability})
	must.NoError(t, err)
	must.Eq(t, int64(2048), got)

	_, _, err = h.client.ControllerExpandVolume(h.ctx, &ControllerExpandRequest{ExternalID: "ext-1"})
	must.Error(t, err)
	_, err = h.client.NodeExpandVolume(h.ctx, &NodeExpandRequest{ExternalID: "ext-1", CapacityMin: 1, VolumePath: "relative"})
	must.Error(t, err)
}

// TestPluginCapabilities_VolumeExpansion: the plugin's VolumeExpansion
// capability is read, online winning over offline, and reaches the
// controller's fingerprint.
func TestPluginCapabilities_VolumeExpansion(t *testing.T) {
	expansion := func(typ csipb.PluginCapability_VolumeExpansion_Type) *csipb.PluginCapability {
		return &csipb.PluginCapability{Type: &csipb.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: typ}}}
	}
	service := &csipb.PluginCapability{Type: &csipb.PluginCapability_Service_{
		Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}}
	for _, tc := range []struct {
		caps []*csipb.PluginCapability
		want string
	}{
		{[]*csipb.PluginCapability{service}, ""},
		{[]*csipb.PluginCapability{service, expansion(csipb.PluginCapability_VolumeExpansion_OFFLINE)}, structs.CSIVolumeExpansionOffline},
		{[]*csipb.PluginCapability{expansion(csipb.PluginCapability_VolumeExpansion_ONLINE), service,
			expansion(csipb.PluginCapability_VolumeExpansion_OFFLINE)}, structs.CSIVolumeExpansionOnline},
	} {
		h := newHarness(t)
		h.identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(&csipb.GetPluginInfoResponse{Name: "x", VendorVersion: "1"}, nil)
		h.identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.GetPluginCapabilitiesResponse{Capabilities: tc.caps}, nil)
		h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{}, nil)
		h.controller.EXPECT().ControllerGetCapabilities(gomock.Any(), gomock.Any()).Return(&csipb.ControllerGetCapabilitiesResponse{}, nil)
		ctrl, _, err := h.client.Fingerprint(h.ctx, "p", structs.CSIPluginTypeController)
		must.NoError(t, err)
		must.Eq(t, tc.want, ctrl.ControllerInfo.VolumeExpansion)
	}
}
