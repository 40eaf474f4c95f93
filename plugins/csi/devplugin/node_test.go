package devplugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
)

func TestNode_OrderEnforced(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	c := newClaim(t, createVolume(t, in, "v", snw).GetVolumeId(), in, snw)

	// Stage before the controller published to this node.
	mustCode(t, codes.FailedPrecondition, c.stage(t, in))
	must.NoError(t, c.controllerPublish(t, in))
	// Publish before stage.
	mustCode(t, codes.FailedPrecondition, c.publish(t, in))

	// The publish context must be the controller's.
	good := c.pubCtx
	c.pubCtx = map[string]string{"devicePath": "/elsewhere"}
	mustCode(t, codes.InvalidArgument, c.stage(t, in))
	c.pubCtx = good
	must.NoError(t, c.stage(t, in))

	// Publishing from another staging path, or none.
	wrong := *c
	wrong.staging = t.TempDir()
	mustCode(t, codes.FailedPrecondition, wrong.publish(t, in))
	wrong.staging = ""
	mustCode(t, codes.FailedPrecondition, wrong.publish(t, in))
	must.NoError(t, c.publish(t, in))

	// Unstage while published.
	mustCode(t, codes.FailedPrecondition, c.unstage(t, in))
	c.detach(t, in)
	// Staging at a directory the CO did not create.
	c.staging = filepath.Join(t.TempDir(), "missing")
	must.NoError(t, c.controllerPublish(t, in))
	mustCode(t, codes.FailedPrecondition, c.stage(t, in))
}

func TestNode_IdempotentRepeats(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	c := newClaim(t, createVolume(t, in, "v", snw).GetVolumeId(), in, snw)
	for range 2 {
		must.NoError(t, c.controllerPublish(t, in))
		must.NoError(t, c.stage(t, in))
		must.NoError(t, c.publish(t, in))
	}
	// Same target or staging path with other arguments.
	_, err := in.NodePublishVolume(ctx(t), &csi.NodePublishVolumeRequest{VolumeId: c.vol, StagingTargetPath: c.staging,
		TargetPath: c.target, VolumeCapability: mountCap(snw), PublishContext: c.pubCtx, Readonly: true})
	mustCode(t, codes.AlreadyExists, err)
	flagged := mountCap(snw)
	flagged.GetMount().MountFlags = []string{"noatime"}
	_, err = in.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: c.vol, StagingTargetPath: c.staging,
		VolumeCapability: flagged, PublishContext: c.pubCtx})
	mustCode(t, codes.AlreadyExists, err)

	for range 2 {
		c.detach(t, in)
	}
	// Unknown volumes are NOT_FOUND; known ones not published there are OK.
	_, err = in.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: "nope", TargetPath: c.target})
	mustCode(t, codes.NotFound, err)
	_, err = in.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: "nope", StagingTargetPath: c.staging})
	mustCode(t, codes.NotFound, err)
}

func TestNode_TargetsPerAccessMode(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)

	single := newClaim(t, createVolume(t, in, "single", snw).GetVolumeId(), in, snw)
	single.attach(t, in)
	other := *single
	other.target = filepath.Join(t.TempDir(), "target")
	mustCode(t, codes.FailedPrecondition, other.publish(t, in))

	multi := newClaim(t, createVolume(t, in, "multi", mnmw).GetVolumeId(), in, mnmw)
	multi.attach(t, in)
	second := *multi
	second.target = filepath.Join(t.TempDir(), "target")
	must.NoError(t, second.publish(t, in))

	// Reference counting: the staging stays until both are unpublished.
	must.NoError(t, multi.unpublish(t, in))
	mustCode(t, codes.FailedPrecondition, multi.unstage(t, in))
	must.NoError(t, second.unpublish(t, in))
	must.NoError(t, multi.unstage(t, in))
}

func TestNode_ReadOnlyControllerPublication(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	c := newClaim(t, createVolume(t, in, "v", mnmw).GetVolumeId(), in, mnmw)
	resp, err := in.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: c.vol,
		NodeId: c.node, VolumeCapability: mountCap(mnmw), Readonly: true})
	must.NoError(t, err)
	c.pubCtx = resp.GetPublishContext()
	must.NoError(t, c.stage(t, in))
	mustCode(t, codes.FailedPrecondition, c.publish(t, in))
	_, err = in.NodePublishVolume(ctx(t), &csi.NodePublishVolumeRequest{VolumeId: c.vol, StagingTargetPath: c.staging,
		TargetPath: c.target, VolumeCapability: mountCap(mnmw), PublishContext: c.pubCtx, Readonly: true})
	must.NoError(t, err)
}

func TestNode_DataReachesTheVolume(t *testing.T) {
	dir := t.TempDir()
	a := startInstance(t, dir, "node-a", nil)
	b := startInstance(t, dir, "node-b", nil)
	vol := createVolume(t, a, "data", snw).GetVolumeId()

	first := newClaim(t, vol, a, snw)
	first.attach(t, a)
	must.NoError(t, os.WriteFile(filepath.Join(first.target, "x"), []byte("hello"), 0o644))
	must.FileContains(t, filepath.Join(VolumeDataDir(dir, vol), "x"), "hello")

	stats, err := a.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: first.target})
	must.NoError(t, err)
	must.Eq(t, 5, stats.GetUsage()[0].GetUsed())
	_, err = b.NodeGetVolumeStats(ctx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: first.target})
	mustCode(t, codes.NotFound, err)

	first.detach(t, a)
	_, err = os.Lstat(first.target)
	must.True(t, os.IsNotExist(err), must.Sprint("the target must be gone after NodeUnpublishVolume"))

	// The next allocation, on another node, sees what the first wrote.
	second := newClaim(t, vol, b, snw)
	second.attach(t, b)
	must.FileContains(t, filepath.Join(second.target, "x"), "hello")
	second.detach(t, b)

	// A CO that creates the target directory itself still gets a link.
	third := newClaim(t, vol, a, snw)
	must.NoError(t, os.Mkdir(third.target, 0o755))
	third.attach(t, a)
	must.FileContains(t, filepath.Join(third.target, "x"), "hello")
	third.detach(t, a)
}
