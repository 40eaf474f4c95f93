package devplugin

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
)

// TestInstances_ShareTheStorageSystem: instances on one state directory are
// the nodes of one storage system.
func TestInstances_ShareTheStorageSystem(t *testing.T) {
	dir := t.TempDir()
	a := startInstance(t, dir, "node-a", nil)
	b := startInstance(t, dir, "node-b", nil)

	infoA, err := a.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	must.NoError(t, err)
	infoB, err := b.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	must.NoError(t, err)
	must.Eq(t, "node-a", infoA.GetNodeId())
	must.Eq(t, "node-b", infoB.GetNodeId())

	// Created through one, seen through the other.
	vol := createVolume(t, a, "shared", snw).GetVolumeId()
	list, err := b.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	must.NoError(t, err)
	must.Len(t, 1, list.GetEntries())
	must.Eq(t, vol, list.GetEntries()[0].GetVolume().GetVolumeId())

	// A controller call may go to any instance; node calls must go to the
	// node the volume is published to.
	c := newClaim(t, vol, a, snw)
	must.NoError(t, c.controllerPublish(t, b))
	mustCode(t, codes.FailedPrecondition, c.stage(t, b))
	must.NoError(t, c.stage(t, a))
	must.NoError(t, c.publish(t, a))

	got, err := b.ControllerGetVolume(ctx(t), &csi.ControllerGetVolumeRequest{VolumeId: vol})
	must.NoError(t, err)
	must.Eq(t, []string{"node-a"}, got.GetStatus().GetPublishedNodeIds())
	mustCode(t, codes.FailedPrecondition, newClaim(t, vol, b, snw).controllerPublish(t, a))

	// Node b knows nothing of node a's publication.
	_, err = b.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: c.target})
	must.NoError(t, err)
	_, err = os.Lstat(c.target)
	must.NoError(t, err)
	c.detach(t, a)

	// A restarted instance finds the state where it was left.
	a.Stop()
	again := startInstance(t, dir, "node-a", nil)
	c.attach(t, again)
	c.detach(t, again)
}

// TestInstances_ConcurrentChangesAreNotLost: the lock serializes changes
// made at once through several instances, so none overwrites another.
func TestInstances_ConcurrentChangesAreNotLost(t *testing.T) {
	dir := t.TempDir()
	instances := []*instance{startInstance(t, dir, "node-a", nil), startInstance(t, dir, "node-b", nil)}
	const workers, each = 8, 5
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		in := instances[w%len(instances)]
		wg.Go(func() {
			for i := range each {
				_, err := in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: fmt.Sprintf("w%d-%d", w, i),
					VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)}})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must.NoError(t, err)
	}
	list, err := instances[1].ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	must.NoError(t, err)
	must.Len(t, workers*each, list.GetEntries())
	calls, err := ReadCallLog(dir)
	must.NoError(t, err)
	must.Len(t, workers*each+1, calls)
}
