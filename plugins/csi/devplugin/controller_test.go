package devplugin

import (
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
)

func TestCreateVolume_IdempotentByName(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	req := func(required int64, params map[string]string) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: "data", Parameters: params,
			CapacityRange:      &csi.CapacityRange{RequiredBytes: required, LimitBytes: required},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)}}
	}
	first, err := in.CreateVolume(ctx(t), req(1<<20, map[string]string{"k": "v"}))
	must.NoError(t, err)
	must.Eq(t, 1<<20, first.GetVolume().GetCapacityBytes())
	must.Eq(t, map[string]string{"k": "v"}, first.GetVolume().GetVolumeContext())
	must.DirExists(t, VolumeDataDir(in.StateDir(), first.GetVolume().GetVolumeId()))

	again, err := in.CreateVolume(ctx(t), req(1<<20, map[string]string{"k": "v"}))
	must.NoError(t, err)
	must.Eq(t, first.GetVolume().GetVolumeId(), again.GetVolume().GetVolumeId())

	_, err = in.CreateVolume(ctx(t), req(2<<20, map[string]string{"k": "v"}))
	mustCode(t, codes.AlreadyExists, err)
	_, err = in.CreateVolume(ctx(t), req(1<<20, map[string]string{"k": "other"}))
	mustCode(t, codes.AlreadyExists, err)

	_, err = in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "x"})
	mustCode(t, codes.InvalidArgument, err)
	_, err = in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "blk", VolumeCapabilities: []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: snw},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}})
	mustCode(t, codes.InvalidArgument, err)
	_, err = in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "neg", VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 10, LimitBytes: 5}})
	mustCode(t, codes.InvalidArgument, err)
}

func TestDeleteVolume(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	_, err := in.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: "never-was"})
	must.NoError(t, err)

	vol := createVolume(t, in, "v", snw)
	c := newClaim(t, vol.GetVolumeId(), in, snw)
	must.NoError(t, c.controllerPublish(t, in))
	_, err = in.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
	mustCode(t, codes.FailedPrecondition, err)

	must.NoError(t, c.controllerUnpublish(t, in))
	_, err = in.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
	must.NoError(t, err)
	_, err = os.Stat(VolumeDataDir(in.StateDir(), vol.GetVolumeId()))
	must.True(t, os.IsNotExist(err))
	_, err = in.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId()})
	must.NoError(t, err)
}

func TestControllerPublish_Rules(t *testing.T) {
	dir := t.TempDir()
	a := startInstance(t, dir, "node-a", nil)
	b := startInstance(t, dir, "node-b", nil)

	t.Run("unknown volume or node", func(t *testing.T) {
		_, err := a.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{
			VolumeId: "nope", NodeId: "node-a", VolumeCapability: mountCap(snw)})
		mustCode(t, codes.NotFound, err)
		vol := createVolume(t, a, "unknown-node", snw)
		_, err = a.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{
			VolumeId: vol.GetVolumeId(), NodeId: "node-z", VolumeCapability: mountCap(snw)})
		mustCode(t, codes.NotFound, err)
	})

	t.Run("idempotent repeat and incompatible repeat", func(t *testing.T) {
		vol := createVolume(t, a, "repeat", snw)
		req := &csi.ControllerPublishVolumeRequest{VolumeId: vol.GetVolumeId(), NodeId: "node-a", VolumeCapability: mountCap(snw)}
		first, err := a.ControllerPublishVolume(ctx(t), req)
		must.NoError(t, err)
		must.Eq(t, map[string]string{"devicePath": VolumeDataDir(dir, vol.GetVolumeId())}, first.GetPublishContext())
		again, err := b.ControllerPublishVolume(ctx(t), req)
		must.NoError(t, err)
		must.Eq(t, first.GetPublishContext(), again.GetPublishContext())
		req.Readonly = true
		_, err = a.ControllerPublishVolume(ctx(t), req)
		mustCode(t, codes.AlreadyExists, err)
	})

	t.Run("single-node writer published to a second node", func(t *testing.T) {
		vol := createVolume(t, a, "snw", snw)
		must.NoError(t, newClaim(t, vol.GetVolumeId(), a, snw).controllerPublish(t, a))
		second := newClaim(t, vol.GetVolumeId(), b, snw)
		mustCode(t, codes.FailedPrecondition, second.controllerPublish(t, a))
		// A multi-node request does not get around a single-node publication.
		second.mode = mnmw
		mustCode(t, codes.FailedPrecondition, second.controllerPublish(t, a))
	})

	t.Run("multi-node modes", func(t *testing.T) {
		vol := createVolume(t, a, "mnmw", mnmw)
		must.NoError(t, newClaim(t, vol.GetVolumeId(), a, mnmw).controllerPublish(t, a))
		must.NoError(t, newClaim(t, vol.GetVolumeId(), b, mnmw).controllerPublish(t, a))

		one := createVolume(t, a, "mnsw", mnsw)
		must.NoError(t, newClaim(t, one.GetVolumeId(), a, mnsw).controllerPublish(t, a))
		mustCode(t, codes.FailedPrecondition, newClaim(t, one.GetVolumeId(), b, mnsw).controllerPublish(t, a))
		_, err := a.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: one.GetVolumeId(),
			NodeId: "node-b", VolumeCapability: mountCap(mnsw), Readonly: true})
		must.NoError(t, err)
	})

	t.Run("unpublish is idempotent", func(t *testing.T) {
		vol := createVolume(t, a, "unpub", snw)
		c := newClaim(t, vol.GetVolumeId(), a, snw)
		must.NoError(t, c.controllerUnpublish(t, a))
		must.NoError(t, c.controllerPublish(t, a))
		must.NoError(t, c.controllerUnpublish(t, b))
		must.NoError(t, c.controllerUnpublish(t, b))
		_, err := a.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: "gone", NodeId: "node-a"})
		must.NoError(t, err)
		// Now another node may have it.
		must.NoError(t, newClaim(t, vol.GetVolumeId(), b, snw).controllerPublish(t, a))
	})
}

func TestControllerPublish_MaxVolumesPerNode(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", func(c *Config) { c.MaxVolumesPerNode = 2 })
	info, err := in.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	must.NoError(t, err)
	must.Eq(t, 2, info.GetMaxVolumesPerNode())

	var claims []*claim
	for _, name := range []string{"one", "two", "three"} {
		claims = append(claims, newClaim(t, createVolume(t, in, name, snw).GetVolumeId(), in, snw))
	}
	must.NoError(t, claims[0].controllerPublish(t, in))
	must.NoError(t, claims[1].controllerPublish(t, in))
	mustCode(t, codes.ResourceExhausted, claims[2].controllerPublish(t, in))
	// A repeat of a publication that exists is not a new one.
	must.NoError(t, claims[1].controllerPublish(t, in))
	must.NoError(t, claims[0].controllerUnpublish(t, in))
	must.NoError(t, claims[2].controllerPublish(t, in))
}

func TestListVolumes_Pagination(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	want := map[string]bool{}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		want[createVolume(t, in, name, snw).GetVolumeId()] = true
	}
	published := newClaim(t, createVolume(t, in, "f", snw).GetVolumeId(), in, snw)
	want[published.vol] = true
	must.NoError(t, published.controllerPublish(t, in))

	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		must.Less(t, 4, pages)
		resp, err := in.ListVolumes(ctx(t), &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: token})
		must.NoError(t, err)
		must.LessEq(t, 2, len(resp.GetEntries()))
		for _, e := range resp.GetEntries() {
			id := e.GetVolume().GetVolumeId()
			must.False(t, seen[id], must.Sprintf("%s listed twice", id))
			seen[id] = true
			if id == published.vol {
				must.Eq(t, []string{"node-a"}, e.GetStatus().GetPublishedNodeIds())
			} else {
				must.SliceEmpty(t, e.GetStatus().GetPublishedNodeIds())
			}
		}
		if token = resp.GetNextToken(); token == "" {
			break
		}
	}
	must.Eq(t, want, seen)

	_, err := in.ListVolumes(ctx(t), &csi.ListVolumesRequest{StartingToken: "bogus"})
	mustCode(t, codes.Aborted, err)
	_, err = in.ListVolumes(ctx(t), &csi.ListVolumesRequest{MaxEntries: -1})
	mustCode(t, codes.InvalidArgument, err)
}

func TestTopology(t *testing.T) {
	dir := t.TempDir()
	z1 := startInstance(t, dir, "node-z1", func(c *Config) { c.Topology = map[string]string{"zone": "z1"} })
	z2 := startInstance(t, dir, "node-z2", func(c *Config) { c.Topology = map[string]string{"zone": "z2"} })

	caps, err := z1.GetPluginCapabilities(ctx(t), &csi.GetPluginCapabilitiesRequest{})
	must.NoError(t, err)
	found := false
	for _, c := range caps.GetCapabilities() {
		found = found || c.GetService().GetType() == csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS
	}
	must.True(t, found)

	resp, err := z1.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "in-z2",
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{{Segments: map[string]string{"zone": "z2"}}}}})
	must.NoError(t, err)
	must.Eq(t, map[string]string{"zone": "z2"}, resp.GetVolume().GetAccessibleTopology()[0].GetSegments())
	vol := resp.GetVolume().GetVolumeId()
	mustCode(t, codes.FailedPrecondition, newClaim(t, vol, z1, snw).controllerPublish(t, z1))
	must.NoError(t, newClaim(t, vol, z2, snw).controllerPublish(t, z1))

	_, err = z1.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "in-z9",
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		AccessibilityRequirements: &csi.TopologyRequirement{
			Requisite: []*csi.Topology{{Segments: map[string]string{"zone": "z9"}}}}})
	mustCode(t, codes.ResourceExhausted, err)
}

func TestCreateOnDemand(t *testing.T) {
	dir := t.TempDir()
	strict := startInstance(t, dir, "node-a", nil)
	lenient := startInstance(t, dir, "node-b", func(c *Config) { c.CreateOnDemand = true })

	c := newClaim(t, "registered-by-hand", lenient, snw)
	mustCode(t, codes.NotFound, c.controllerPublish(t, strict))
	c.attach(t, lenient)
	must.DirExists(t, VolumeDataDir(dir, "registered-by-hand"))
	mustCode(t, codes.NotFound, newClaim(t, "../escape", lenient, snw).controllerPublish(t, lenient))

	// Validating a volume registered by hand creates it too, keeping the
	// parameters it was registered with.
	req := &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "validated-by-hand",
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)}, Parameters: map[string]string{"replicas": "2"}}
	_, err := strict.ValidateVolumeCapabilities(ctx(t), req)
	mustCode(t, codes.NotFound, err)
	resp, err := lenient.ValidateVolumeCapabilities(ctx(t), req)
	must.NoError(t, err)
	must.NotNil(t, resp.GetConfirmed())
	must.DirExists(t, VolumeDataDir(dir, "validated-by-hand"))
}

func TestSnapshotsAndClones(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	src := createVolume(t, in, "src", snw)
	must.NoError(t, os.WriteFile(VolumeDataDir(in.StateDir(), src.GetVolumeId())+"/f", []byte("v1"), 0o644))

	snap, err := in.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: src.GetVolumeId()})
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(VolumeDataDir(in.StateDir(), src.GetVolumeId())+"/f", []byte("v2"), 0o644))

	fromSnap, err := in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "restored",
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}})
	must.NoError(t, err)
	must.FileContains(t, VolumeDataDir(in.StateDir(), fromSnap.GetVolume().GetVolumeId())+"/f", "v1")

	clone, err := in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "clone",
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: src.GetVolumeId()}}}})
	must.NoError(t, err)
	must.FileContains(t, VolumeDataDir(in.StateDir(), clone.GetVolume().GetVolumeId())+"/f", "v2")

	group, err := in.CreateVolumeGroupSnapshot(ctx(t), &csi.CreateVolumeGroupSnapshotRequest{Name: "g",
		SourceVolumeIds: []string{src.GetVolumeId(), clone.GetVolume().GetVolumeId()}})
	must.NoError(t, err)
	members := group.GetGroupSnapshot().GetSnapshots()
	must.Len(t, 2, members)
	_, err = in.DeleteSnapshot(ctx(t), &csi.DeleteSnapshotRequest{SnapshotId: members[0].GetSnapshotId()})
	mustCode(t, codes.InvalidArgument, err)
	_, err = in.DeleteVolumeGroupSnapshot(ctx(t), &csi.DeleteVolumeGroupSnapshotRequest{
		GroupSnapshotId: group.GetGroupSnapshot().GetGroupSnapshotId(), SnapshotIds: []string{members[0].GetSnapshotId()}})
	mustCode(t, codes.InvalidArgument, err)
	_, err = in.DeleteVolumeGroupSnapshot(ctx(t), &csi.DeleteVolumeGroupSnapshotRequest{
		GroupSnapshotId: group.GetGroupSnapshot().GetGroupSnapshotId(),
		SnapshotIds:     []string{members[1].GetSnapshotId(), members[0].GetSnapshotId()}})
	must.NoError(t, err)
	list, err := in.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{})
	must.NoError(t, err)
	must.Len(t, 1, list.GetEntries())
}
