package devplugin

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
)

// TestCallLog_RecordsTheLifecycleWithoutSecrets runs a claim through both
// instances with secrets and mount flags in every request, then checks the
// order and contents of the call log, and that no secret or flag reached
// the call log, the state file or the log output.
func TestCallLog_RecordsTheLifecycleWithoutSecrets(t *testing.T) {
	dir := t.TempDir()
	ctrl := startInstance(t, dir, "controller", nil)
	node := startInstance(t, dir, "node-a", nil)
	const secret, flag = "s3cr3t-password", "sup3r-s3cr3t-flag"
	secrets := map[string]string{"password": secret}
	capability := mountCap(snw)
	capability.GetMount().MountFlags = []string{flag}

	created, err := ctrl.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "logged", Secrets: secrets,
		VolumeCapabilities: []*csi.VolumeCapability{capability}})
	must.NoError(t, err)
	vol := created.GetVolume().GetVolumeId()
	staging, target := t.TempDir(), filepath.Join(t.TempDir(), "target")

	pub, err := ctrl.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{VolumeId: vol,
		NodeId: "node-a", VolumeCapability: capability, Secrets: secrets})
	must.NoError(t, err)
	_, err = node.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: staging,
		VolumeCapability: capability, PublishContext: pub.GetPublishContext(), Secrets: secrets})
	must.NoError(t, err)
	_, err = node.NodePublishVolume(ctx(t), &csi.NodePublishVolumeRequest{VolumeId: vol, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: capability, PublishContext: pub.GetPublishContext(), Secrets: secrets})
	must.NoError(t, err)
	// A failure is recorded with its code.
	_, err = node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: staging})
	mustCode(t, codes.FailedPrecondition, err)
	_, err = node.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target})
	must.NoError(t, err)
	_, err = node.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: staging})
	must.NoError(t, err)
	_, err = ctrl.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: vol,
		NodeId: "node-a", Secrets: secrets})
	must.NoError(t, err)
	_, err = ctrl.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: vol, Secrets: secrets})
	must.NoError(t, err)

	calls, err := ReadCallLog(dir)
	must.NoError(t, err)
	type step struct {
		method, instance string
		code             codes.Code
	}
	var steps []step
	for _, c := range calls {
		if c.VolumeID == vol {
			steps = append(steps, step{c.Method, c.Instance, c.Code})
		}
	}
	must.Eq(t, []step{
		{"CreateVolume", "controller", codes.OK},
		{"ControllerPublishVolume", "controller", codes.OK},
		{"NodeStageVolume", "node-a", codes.OK},
		{"NodePublishVolume", "node-a", codes.OK},
		{"NodeUnstageVolume", "node-a", codes.FailedPrecondition},
		{"NodeUnpublishVolume", "node-a", codes.OK},
		{"NodeUnstageVolume", "node-a", codes.OK},
		{"ControllerUnpublishVolume", "controller", codes.OK},
		{"DeleteVolume", "controller", codes.OK},
	}, steps)

	byMethod := map[string]Call{}
	for _, c := range calls {
		if c.VolumeID == vol && c.Code == codes.OK {
			byMethod[c.Method] = c
		}
	}
	must.Eq(t, "logged", byMethod["CreateVolume"].Name)
	must.Eq(t, "node-a", byMethod["ControllerPublishVolume"].NodeID)
	must.Eq(t, "SINGLE_NODE_WRITER", byMethod["ControllerPublishVolume"].AccessMode)
	must.Eq(t, pub.GetPublishContext(), byMethod["ControllerPublishVolume"].PublishContext)
	must.Eq(t, pub.GetPublishContext(), byMethod["NodeStageVolume"].PublishContext)
	must.Eq(t, staging, byMethod["NodeStageVolume"].StagingPath)
	must.Eq(t, target, byMethod["NodePublishVolume"].TargetPath)
	must.Eq(t, staging, byMethod["NodePublishVolume"].StagingPath)
	must.False(t, byMethod["NodePublishVolume"].Time.IsZero())

	for _, name := range []string{"calls.log", "state.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		must.NoError(t, err)
		must.StrNotContains(t, string(b), secret)
		must.StrNotContains(t, string(b), flag)
	}
	logs := ctrl.logs.String() + node.logs.String()
	must.StrContains(t, logs, "method=ControllerPublishVolume")
	must.StrContains(t, logs, "method=NodeStageVolume")
	must.StrNotContains(t, logs, secret)
	must.StrNotContains(t, logs, flag)
}

func TestReadCallLog_Empty(t *testing.T) {
	calls, err := ReadCallLog(t.TempDir())
	must.NoError(t, err)
	must.SliceEmpty(t, calls)
}
