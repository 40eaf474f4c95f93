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

// TestClient_PublishAndReleaseFlow drives a volume through the whole
// lifecycle in the spec's order and checks that every call carries what it
// must: the provider's node ID to the controller, the publish context to
// both node calls, the staging path, read-only, and the capability with its
// mount flags.
func TestClient_PublishAndReleaseFlow(t *testing.T) {
	h := newHarness(t)
	secrets := structs.CSISecrets{"key": "s3cret-value"}
	volCtx := map[string]string{"pool": "fast"}
	pubCtx := map[string]string{"device": "/dev/xvdb"}
	capability := &VolumeCapability{
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		MountOptions:   &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime", "discard"}},
	}
	wantCap := mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4", "noatime", "discard")
	staging := "/var/lib/volplane/csi/staging/vol-1"
	target := "/var/lib/volplane/alloc/a1/vol-1"

	gomock.InOrder(
		h.controller.EXPECT().ControllerPublishVolume(gomock.Any(), pb(&csipb.ControllerPublishVolumeRequest{
			VolumeId: "ext-1", NodeId: "provider-node-7", VolumeCapability: wantCap,
			Readonly: true, Secrets: secrets, VolumeContext: volCtx,
		})).Return(&csipb.ControllerPublishVolumeResponse{PublishContext: pubCtx}, nil),
		h.node.EXPECT().NodeStageVolume(gomock.Any(), pb(&csipb.NodeStageVolumeRequest{
			VolumeId: "ext-1", PublishContext: pubCtx, StagingTargetPath: staging,
			VolumeCapability: wantCap, Secrets: secrets, VolumeContext: volCtx,
		})).Return(&csipb.NodeStageVolumeResponse{}, nil),
		h.node.EXPECT().NodePublishVolume(gomock.Any(), pb(&csipb.NodePublishVolumeRequest{
			VolumeId: "ext-1", PublishContext: pubCtx, StagingTargetPath: staging, TargetPath: target,
			VolumeCapability: wantCap, Readonly: true, Secrets: secrets, VolumeContext: volCtx,
		})).Return(&csipb.NodePublishVolumeResponse{}, nil),
		h.node.EXPECT().NodeUnpublishVolume(gomock.Any(), pb(&csipb.NodeUnpublishVolumeRequest{
			VolumeId: "ext-1", TargetPath: target,
		})).Return(&csipb.NodeUnpublishVolumeResponse{}, nil),
		h.node.EXPECT().NodeUnstageVolume(gomock.Any(), pb(&csipb.NodeUnstageVolumeRequest{
			VolumeId: "ext-1", StagingTargetPath: staging,
		})).Return(&csipb.NodeUnstageVolumeResponse{}, nil),
		h.controller.EXPECT().ControllerUnpublishVolume(gomock.Any(), pb(&csipb.ControllerUnpublishVolumeRequest{
			VolumeId: "ext-1", NodeId: "provider-node-7", Secrets: secrets,
		})).Return(&csipb.ControllerUnpublishVolumeResponse{}, nil),
	)

	got, err := h.client.ControllerPublishVolume(h.ctx, &ControllerPublishRequest{
		ExternalID: "ext-1", NodeID: "provider-node-7", Capability: capability,
		ReadOnly: true, Secrets: secrets, VolumeContext: volCtx,
	})
	must.NoError(t, err)
	must.Eq(t, pubCtx, got)

	must.NoError(t, h.client.NodeStageVolume(h.ctx, &NodeStageRequest{
		ExternalID: "ext-1", StagingPath: staging, Capability: capability,
		PublishContext: got, VolumeContext: volCtx, Secrets: secrets,
	}))
	must.NoError(t, h.client.NodePublishVolume(h.ctx, &NodePublishRequest{
		ExternalID: "ext-1", StagingPath: staging, TargetPath: target, Capability: capability,
		ReadOnly: true, PublishContext: got, VolumeContext: volCtx, Secrets: secrets,
	}))
	must.NoError(t, h.client.NodeUnpublishVolume(h.ctx, "ext-1", target))
	must.NoError(t, h.client.NodeUnstageVolume(h.ctx, "ext-1", staging))
	must.NoError(t, h.client.ControllerUnpublishVolume(h.ctx, &ControllerUnpublishRequest{
		ExternalID: "ext-1", NodeID: "provider-node-7", Secrets: secrets,
	}))
}

// TestClient_BlockDevice checks that a block volume is sent as Block, with
// no mount options, and that a node plugin that does not stage gets no
// staging path.
func TestClient_BlockDevice(t *testing.T) {
	h := newHarness(t)
	h.node.EXPECT().NodePublishVolume(gomock.Any(), pb(&csipb.NodePublishVolumeRequest{
		VolumeId: "ext-b", TargetPath: "/mnt/t/b",
		VolumeCapability: &csipb.VolumeCapability{
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
			AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		},
	})).Return(&csipb.NodePublishVolumeResponse{}, nil)

	must.NoError(t, h.client.NodePublishVolume(h.ctx, &NodePublishRequest{
		ExternalID: "ext-b", TargetPath: "/mnt/t/b",
		Capability: &VolumeCapability{
			AccessMode:     structs.CSIVolumeAccessModeMultiNodeMultiWriter,
			AttachmentMode: structs.CSIVolumeAttachmentModeBlockDevice,
		},
	}))
}

func TestVolumeCapability_AccessModes(t *testing.T) {
	cases := map[structs.CSIVolumeAccessMode]csipb.VolumeCapability_AccessMode_Mode{
		structs.CSIVolumeAccessModeSingleNodeReader:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		structs.CSIVolumeAccessModeSingleNodeWriter:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		structs.CSIVolumeAccessModeMultiNodeReader:       csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
		structs.CSIVolumeAccessModeMultiNodeSingleWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
		structs.CSIVolumeAccessModeMultiNodeMultiWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
	}
	for mode, want := range cases {
		t.Run(string(mode), func(t *testing.T) {
			c := &VolumeCapability{
				AccessMode: mode, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
				MountOptions: &structs.CSIMountOptions{FSType: "xfs", MountFlags: []string{"ro"}},
			}
			must.Eq(t, want, c.toCSI().GetAccessMode().GetMode())
			must.Eq(t, "xfs", c.toCSI().GetMount().GetFsType())
			must.Eq(t, []string{"ro"}, c.toCSI().GetMount().GetMountFlags())

			c.AttachmentMode, c.MountOptions = structs.CSIVolumeAttachmentModeBlockDevice, nil
			must.Eq(t, want, c.toCSI().GetAccessMode().GetMode())
			must.NotNil(t, c.toCSI().GetBlock())
			must.Nil(t, c.toCSI().GetMount())
		})
	}
}

func TestClient_Identity(t *testing.T) {
	h := newHarness(t)
	h.identity.EXPECT().GetPluginInfo(gomock.Any(), gomock.Any()).Return(pluginInfo("org.example.disk", "1.2.3"), nil)
	h.identity.EXPECT().GetPluginCapabilities(gomock.Any(), gomock.Any()).Return(pluginCaps(
		csipb.PluginCapability_Service_CONTROLLER_SERVICE,
		csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS,
	), nil)
	gomock.InOrder(
		h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{}, nil),
		h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil),
		h.identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil),
	)

	name, version, err := h.client.PluginInfo(h.ctx)
	must.NoError(t, err)
	must.Eq(t, "org.example.disk", name)
	must.Eq(t, "1.2.3", version)

	caps, err := h.client.PluginCapabilities(h.ctx)
	must.NoError(t, err)
	must.Eq(t, &PluginCapabilities{ControllerService: true, VolumeAccessibilityConstraints: true}, caps)

	for _, want := range []bool{true, false, true} { // unset, false, true
		ready, err := h.client.Probe(h.ctx)
		must.NoError(t, err)
		must.Eq(t, want, ready)
	}
}

func TestClient_ControllerValidateVolume(t *testing.T) {
	h := newHarness(t)
	capability := &VolumeCapability{
		AccessMode:     structs.CSIVolumeAccessModeMultiNodeReader,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}
	wantReq := &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId:           "ext-v",
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, "")},
		Parameters:         map[string]string{"tier": "gold"},
		Secrets:            structs.CSISecrets{"k": "v"},
	}
	gomock.InOrder(
		h.controller.EXPECT().ValidateVolumeCapabilities(gomock.Any(), pb(wantReq)).Return(
			&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: wantReq.VolumeCapabilities,
			}}, nil),
		h.controller.EXPECT().ValidateVolumeCapabilities(gomock.Any(), pb(wantReq)).Return(
			&csipb.ValidateVolumeCapabilitiesResponse{Message: "multi-node readers are not supported"}, nil),
		h.controller.EXPECT().ValidateVolumeCapabilities(gomock.Any(), pb(wantReq)).Return(
			&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
				VolumeCapabilities: []*csipb.VolumeCapability{mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "")},
			}}, nil),
	)
	req := &ControllerValidateVolumeRequest{
		ExternalID: "ext-v", Capabilities: []*VolumeCapability{capability},
		Parameters: map[string]string{"tier": "gold"}, Secrets: structs.CSISecrets{"k": "v"},
	}

	must.NoError(t, h.client.ControllerValidateVolume(h.ctx, req))

	err := h.client.ControllerValidateVolume(h.ctx, req)
	must.EqError(t, err, `ValidateVolumeCapabilities of volume "ext-v": invalid: volume capabilities not confirmed: multi-node readers are not supported`)
	must.Eq(t, ClassFinal, ClassOf(MethodValidateVolumeCapabilities, err))
	must.Eq(t, codes.InvalidArgument, status.Code(err))
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))

	err = h.client.ControllerValidateVolume(h.ctx, req)
	must.ErrorContains(t, err, "capability multi-node-reader-only/file-system is not among the confirmed ones")
}

func TestClient_CreateAndDeleteVolume(t *testing.T) {
	h := newHarness(t)
	h.controller.EXPECT().CreateVolume(gomock.Any(), pb(&csipb.CreateVolumeRequest{
		Name:               "vol-1",
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: 1 << 30, LimitBytes: 2 << 30},
		VolumeCapabilities: []*csipb.VolumeCapability{mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "ext4")},
		Parameters:         map[string]string{"type": "ssd"},
		Secrets:            structs.CSISecrets{"k": "v"},
		VolumeContentSource: &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: "snap-1"},
		}},
		AccessibilityRequirements: &csipb.TopologyRequirement{
			Requisite: []*csipb.Topology{{Segments: map[string]string{"zone": "a"}}},
		},
	})).Return(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{
		VolumeId: "ext-new", CapacityBytes: 1 << 30, VolumeContext: map[string]string{"lun": "3"},
		AccessibleTopology: []*csipb.Topology{{Segments: map[string]string{"zone": "a"}}},
	}}, nil)
	h.controller.EXPECT().DeleteVolume(gomock.Any(), pb(&csipb.DeleteVolumeRequest{
		VolumeId: "ext-new", Secrets: structs.CSISecrets{"k": "v"},
	})).Return(&csipb.DeleteVolumeResponse{}, nil)

	resp, err := h.client.CreateVolume(h.ctx, &CreateVolumeRequest{
		Name: "vol-1", CapacityMin: 1 << 30, CapacityMax: 2 << 30,
		Capabilities: []*VolumeCapability{{
			AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
			MountOptions: &structs.CSIMountOptions{FSType: "ext4"},
		}},
		Parameters: map[string]string{"type": "ssd"}, Secrets: structs.CSISecrets{"k": "v"},
		SnapshotID: "snap-1",
		Topology:   &structs.CSITopologyRequest{Required: []*structs.CSITopology{{Segments: map[string]string{"zone": "a"}}}},
	})
	must.NoError(t, err)
	must.Eq(t, &CreateVolumeResponse{
		ExternalID: "ext-new", CapacityBytes: 1 << 30, Context: map[string]string{"lun": "3"},
		Topologies: []*structs.CSITopology{{Segments: map[string]string{"zone": "a"}}},
	}, resp)

	must.NoError(t, h.client.DeleteVolume(h.ctx, "ext-new", structs.CSISecrets{"k": "v"}))
}

// TestClient_InvalidRequestsNeverSent: a request missing what the plugin
// needs is refused with an error naming the field, and nothing reaches the
// plugin (the mocks expect no call at all).
func TestClient_InvalidRequestsNeverSent(t *testing.T) {
	h := newHarness(t)
	fsCap := &VolumeCapability{
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"publish without anything", func() error {
			_, err := h.client.ControllerPublishVolume(h.ctx, &ControllerPublishRequest{})
			return err
		}, "ControllerPublishVolume: invalid: missing external volume id; missing node id; missing capability"},
		{"publish with a bad mode", func() error {
			_, err := h.client.ControllerPublishVolume(h.ctx, &ControllerPublishRequest{
				ExternalID: "e", NodeID: "n", Capability: &VolumeCapability{AccessMode: "everyone", AttachmentMode: "file-system"},
			})
			return err
		}, `ControllerPublishVolume of volume "e": invalid: capability: unknown access mode "everyone"`},
		{"unpublish without node", func() error {
			return h.client.ControllerUnpublishVolume(h.ctx, &ControllerUnpublishRequest{ExternalID: "e"})
		}, `ControllerUnpublishVolume of volume "e": invalid: missing node id`},
		{"stage without path", func() error {
			return h.client.NodeStageVolume(h.ctx, &NodeStageRequest{ExternalID: "e", Capability: fsCap})
		}, `NodeStageVolume of volume "e": invalid: missing staging path`},
		{"publish with relative target", func() error {
			return h.client.NodePublishVolume(h.ctx, &NodePublishRequest{ExternalID: "e", TargetPath: "mnt/x", Capability: fsCap})
		}, `NodePublishVolume of volume "e": invalid: target path "mnt/x" is not an absolute path`},
		{"publish without capability", func() error {
			return h.client.NodePublishVolume(h.ctx, &NodePublishRequest{ExternalID: "e", TargetPath: "/mnt/x"})
		}, `NodePublishVolume of volume "e": invalid: missing capability`},
		{"block with mount options", func() error {
			return h.client.NodePublishVolume(h.ctx, &NodePublishRequest{ExternalID: "e", TargetPath: "/mnt/x",
				Capability: &VolumeCapability{
					AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeBlockDevice,
					MountOptions: &structs.CSIMountOptions{FSType: "ext4"},
				}})
		}, `NodePublishVolume of volume "e": invalid: capability: block devices take no mount options`},
		{"unpublish without target", func() error {
			return h.client.NodeUnpublishVolume(h.ctx, "e", "")
		}, `NodeUnpublishVolume of volume "e": invalid: missing target path`},
		{"unstage without volume", func() error {
			return h.client.NodeUnstageVolume(h.ctx, "", "/staging")
		}, `NodeUnstageVolume: invalid: missing external volume id`},
		{"delete without volume", func() error {
			return h.client.DeleteVolume(h.ctx, "", nil)
		}, `DeleteVolume: invalid: missing external volume id`},
		{"validate without capabilities", func() error {
			return h.client.ControllerValidateVolume(h.ctx, &ControllerValidateVolumeRequest{ExternalID: "e"})
		}, `ValidateVolumeCapabilities of volume "e": invalid: missing capabilities`},
		{"create with bad capacity", func() error {
			_, err := h.client.CreateVolume(h.ctx, &CreateVolumeRequest{
				Name: "v", Capabilities: []*VolumeCapability{fsCap}, CapacityMin: 10, CapacityMax: 5,
			})
			return err
		}, `CreateVolume: invalid: capacity max (5) is less than capacity min (10)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			must.EqError(t, err, tc.want)
			must.Eq(t, codes.InvalidArgument, status.Code(err))
			must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
			must.Eq(t, ClassFinal, ClassOf("", err))
		})
	}
}
