package devplugin

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestDisable_Capabilities: a disabled capability is not advertised and its
// calls answer UNIMPLEMENTED (or INVALID_ARGUMENT for a content source),
// while the instance next to it, on the same storage system, still has it.
func TestDisable_Capabilities(t *testing.T) {
	dir := t.TempDir()
	full := startInstance(t, dir, "full", nil)
	bare := startInstance(t, dir, "bare", func(c *Config) {
		c.Disable = []string{CapabilityCreateDeleteSnapshot, CapabilityListSnapshots, CapabilityListVolumes,
			CapabilityCloneVolume, CapabilityControllerExpand, CapabilityNodeExpand, CapabilityStageUnstage}
	})

	ctrlCaps := func(in *instance) []csi.ControllerServiceCapability_RPC_Type {
		resp, err := in.ControllerGetCapabilities(ctx(t), &csi.ControllerGetCapabilitiesRequest{})
		must.NoError(t, err)
		var out []csi.ControllerServiceCapability_RPC_Type
		for _, c := range resp.GetCapabilities() {
			out = append(out, c.GetRpc().GetType())
		}
		return out
	}
	nodeCaps := func(in *instance) []csi.NodeServiceCapability_RPC_Type {
		resp, err := in.NodeGetCapabilities(ctx(t), &csi.NodeGetCapabilitiesRequest{})
		must.NoError(t, err)
		var out []csi.NodeServiceCapability_RPC_Type
		for _, c := range resp.GetCapabilities() {
			out = append(out, c.GetRpc().GetType())
		}
		return out
	}
	must.SliceContains(t, ctrlCaps(full), csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT)
	for _, c := range []csi.ControllerServiceCapability_RPC_Type{csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS, csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME} {
		must.SliceNotContains(t, ctrlCaps(bare), c)
	}
	must.SliceContains(t, ctrlCaps(bare), csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
	must.SliceContains(t, nodeCaps(full), csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	must.SliceNotContains(t, nodeCaps(bare), csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	must.SliceNotContains(t, nodeCaps(bare), csi.NodeServiceCapability_RPC_EXPAND_VOLUME)

	plugCaps, err := bare.GetPluginCapabilities(ctx(t), &csi.GetPluginCapabilitiesRequest{})
	must.NoError(t, err)
	must.False(t, slices.ContainsFunc(plugCaps.GetCapabilities(), func(c *csi.PluginCapability) bool {
		return c.GetVolumeExpansion() != nil
	}), must.Sprint("no expansion at all: no VolumeExpansion"))

	vol := createVolume(t, bare.ControllerClient, "v1", snw)
	_, err = bare.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{SourceVolumeId: vol.GetVolumeId(), Name: "s"})
	mustCode(t, codes.Unimplemented, err)
	_, err = bare.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{})
	mustCode(t, codes.Unimplemented, err)
	_, err = bare.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	mustCode(t, codes.Unimplemented, err)
	_, err = bare.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: vol.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}})
	mustCode(t, codes.Unimplemented, err)
	_, err = bare.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "clone", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: vol.GetVolumeId()}}}})
	mustCode(t, codes.InvalidArgument, err)

	// The other instance of the same storage system still offers them.
	snap, err := full.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{SourceVolumeId: vol.GetVolumeId(), Name: "s"})
	must.NoError(t, err)
	must.NotEq(t, "", snap.GetSnapshot().GetSnapshotId())

	// A node without STAGE_UNSTAGE_VOLUME publishes without staging, and
	// refuses a staging path; unstage is not offered.
	c := newClaim(t, vol.GetVolumeId(), bare, snw)
	must.NoError(t, c.controllerPublish(t, bare))
	mustCode(t, codes.Unimplemented, c.stage(t, bare))
	mustCode(t, codes.InvalidArgument, c.publish(t, bare))
	c.staging = ""
	must.NoError(t, c.publish(t, bare))
	must.NoError(t, os.WriteFile(filepath.Join(c.target, "hello"), []byte("hi"), 0o644))
	b, err := os.ReadFile(filepath.Join(VolumeDataDir(dir, vol.GetVolumeId()), "hello"))
	must.NoError(t, err)
	must.Eq(t, "hi", string(b))
	must.NoError(t, c.unpublish(t, bare))
	mustCode(t, codes.Unimplemented, c.unstage(t, bare))
	must.NoError(t, c.controllerUnpublish(t, bare))

	_, err = New(Config{Endpoint: filepath.Join(t.TempDir(), "x.sock"), StateDir: dir, Disable: []string{"controller:TELEPORT"}})
	must.ErrorContains(t, err, `cannot disable "controller:TELEPORT"`)
	_, err = New(Config{Endpoint: filepath.Join(t.TempDir(), "x.sock"), StateDir: dir, Disable: []string{"EXPAND_VOLUME"}})
	must.Error(t, err)
}

// TestDisable_Expansion: with node expansion the controller says node
// expansion is required and a node sees the new size only after
// NodeExpandVolume; an instance told it expands offline advertises OFFLINE
// and refuses to expand a controller-published volume.
func TestDisable_Expansion(t *testing.T) {
	dir := t.TempDir()
	online := startInstance(t, dir, "online", nil)
	offline := startInstance(t, dir, "offline", func(c *Config) { c.Disable = []string{CapabilityOnlineExpansion} })

	plugCaps, err := offline.GetPluginCapabilities(ctx(t), &csi.GetPluginCapabilitiesRequest{})
	must.NoError(t, err)
	must.True(t, slices.ContainsFunc(plugCaps.GetCapabilities(), func(c *csi.PluginCapability) bool {
		return c.GetVolumeExpansion().GetType() == csi.PluginCapability_VolumeExpansion_OFFLINE
	}))

	vol := createVolume(t, online.ControllerClient, "grow", snw)
	c := newClaim(t, vol.GetVolumeId(), online, snw)
	c.attach(t, online)
	stats := func() int64 {
		resp, err := online.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol.GetVolumeId(), VolumePath: c.target})
		must.NoError(t, err)
		return resp.GetUsage()[0].GetTotal()
	}
	must.Eq(t, defaultCapacity, stats())

	grow := &csi.ControllerExpandVolumeRequest{VolumeId: vol.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * defaultCapacity}}
	_, err = offline.ControllerExpandVolume(ctx(t), grow)
	mustCode(t, codes.FailedPrecondition, err)

	resp, err := online.ControllerExpandVolume(ctx(t), grow)
	must.NoError(t, err)
	must.Eq(t, 2*defaultCapacity, resp.GetCapacityBytes())
	must.True(t, resp.GetNodeExpansionRequired())
	must.Eq(t, defaultCapacity, stats(), must.Sprint("the node has not grown it yet"))
	nresp, err := online.NodeExpandVolume(ctx(t), &csi.NodeExpandVolumeRequest{VolumeId: vol.GetVolumeId(), VolumePath: c.target,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * defaultCapacity}})
	must.NoError(t, err)
	must.Eq(t, 2*defaultCapacity, nresp.GetCapacityBytes())
	must.Eq(t, 2*defaultCapacity, stats())

	calls, err := ReadCallLog(dir)
	must.NoError(t, err)
	i := slices.IndexFunc(calls, func(c Call) bool { return c.Method == "ControllerExpandVolume" && c.Code == codes.OK })
	must.NonNegative(t, i)
	must.Eq(t, 2*defaultCapacity, calls[i].RequiredBytes)
	must.Eq(t, 2*defaultCapacity, calls[i].CapacityBytes)

	c.detach(t, online)
	// Unpublished, the offline instance expands it.
	resp, err = offline.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{VolumeId: vol.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 3 * defaultCapacity}})
	must.NoError(t, err)
	must.Eq(t, 3*defaultCapacity, resp.GetCapacityBytes())
}

// TestDisable_ControllerService: without the controller service the plugin
// advertises neither controller service and no controller capability, so a
// CO takes it for a node-only plugin, and its controller calls that need a
// capability answer UNIMPLEMENTED; the node service is untouched.
func TestDisable_ControllerService(t *testing.T) {
	nodeOnly := startInstance(t, t.TempDir(), "n1", func(c *Config) { c.Disable = []string{CapabilityControllerService} })
	plugCaps, err := nodeOnly.GetPluginCapabilities(ctx(t), &csi.GetPluginCapabilitiesRequest{})
	must.NoError(t, err)
	for _, c := range plugCaps.GetCapabilities() {
		svc := c.GetService().GetType()
		must.NotEq(t, csi.PluginCapability_Service_CONTROLLER_SERVICE, svc)
		must.NotEq(t, csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE, svc)
	}
	ctrl, err := nodeOnly.ControllerGetCapabilities(ctx(t), &csi.ControllerGetCapabilitiesRequest{})
	must.NoError(t, err)
	must.SliceEmpty(t, ctrl.GetCapabilities())
	_, err = nodeOnly.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "v1", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)}})
	must.Eq(t, codes.Unimplemented, status.Code(err))
	node, err := nodeOnly.NodeGetCapabilities(ctx(t), &csi.NodeGetCapabilitiesRequest{})
	must.NoError(t, err)
	must.SliceNotEmpty(t, node.GetCapabilities())
}
