package devplugin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volplane/volplane/testutil"
)

func TestFault_FailNTimesThenSucceed(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	c := newClaim(t, createVolume(t, in, "v", snw).GetVolumeId(), in, snw)
	must.NoError(t, c.controllerPublish(t, in))

	must.NoError(t, SetFault(in.StateDir(), "NodeStageVolume", Fault{Code: codes.Unavailable, Times: 2, Message: "flaky"}))
	for range 2 {
		err := c.stage(t, in)
		mustCode(t, codes.Unavailable, err)
		must.Eq(t, "flaky", status.Convert(err).Message())
	}
	must.NoError(t, c.stage(t, in))

	calls, err := ReadCallLog(in.StateDir())
	must.NoError(t, err)
	var stages []Call
	for _, call := range calls {
		if call.Method == "NodeStageVolume" {
			stages = append(stages, call)
		}
	}
	must.Len(t, 3, stages)
	must.True(t, stages[0].Injected)
	must.Eq(t, codes.Unavailable, stages[1].Code)
	must.False(t, stages[2].Injected)
	must.Eq(t, codes.OK, stages[2].Code)
}

func TestFault_AlwaysUntilCleared(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	must.NoError(t, SetFault(in.StateDir(), "CreateVolume", Fault{Code: codes.ResourceExhausted}))
	for range 3 {
		_, err := in.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: "v",
			VolumeCapabilities: []*csi.VolumeCapability{mountCap(snw)}})
		mustCode(t, codes.ResourceExhausted, err)
	}
	must.NoError(t, ClearFaults(in.StateDir()))
	must.NoError(t, ClearFaults(in.StateDir()))
	createVolume(t, in, "v", snw)
}

func TestFault_HangUntilDeadline(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	vol := createVolume(t, in, "v", snw).GetVolumeId()
	must.NoError(t, SetFault(in.StateDir(), "ControllerPublishVolume", Fault{Hang: true}))

	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := in.ControllerPublishVolume(c, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "node-a",
		VolumeCapability: mountCap(snw)})
	mustCode(t, codes.DeadlineExceeded, err)

	must.NoError(t, ClearFaults(in.StateDir()))
	must.NoError(t, newClaim(t, vol, in, snw).controllerPublish(t, in))
}

func TestFault_HangEndsWhenThePluginStops(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	must.NoError(t, SetFault(in.StateDir(), "NodeGetInfo", Fault{Hang: true, Times: 1}))
	errCh := make(chan error, 1)
	go func() {
		_, err := in.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
		errCh <- err
	}()
	// The fault is used up once the call has taken it, so it is hanging.
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		faults, err := (&store{dir: in.StateDir()}).readFaults()
		return err == nil && len(faults) == 0, err
	})
	in.Stop()
	mustCode(t, codes.Unavailable, <-errCh)
}

func TestFault_ProbeNotReady(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	probe := func() bool {
		resp, err := in.Probe(ctx(t), &csi.ProbeRequest{})
		must.NoError(t, err)
		return resp.GetReady().GetValue()
	}
	must.True(t, probe())
	must.NoError(t, SetFault(in.StateDir(), "Probe", Fault{NotReady: true, Times: 1}))
	must.False(t, probe())
	must.True(t, probe())
	must.NoError(t, SetFault(in.StateDir(), "Probe", Fault{Code: codes.FailedPrecondition}))
	_, err := in.Probe(ctx(t), &csi.ProbeRequest{})
	mustCode(t, codes.FailedPrecondition, err)
}

// TestFault_FileWrittenByHand: a test in another process writes the file
// itself, with codes by any of their names.
func TestFault_FileWrittenByHand(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	file := filepath.Join(in.StateDir(), "faults.json")
	must.NoError(t, os.WriteFile(file, []byte(`{
		"GetPluginInfo": {"code": "FailedPrecondition"},
		"NodeGetInfo": {"code": 14, "times": 1},
		"NodeGetCapabilities": {"code": "PERMISSION_DENIED"}
	}`), 0o644))
	_, err := in.GetPluginInfo(ctx(t), &csi.GetPluginInfoRequest{})
	mustCode(t, codes.FailedPrecondition, err)
	_, err = in.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	mustCode(t, codes.Unavailable, err)
	_, err = in.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	must.NoError(t, err)
	_, err = in.NodeGetCapabilities(ctx(t), &csi.NodeGetCapabilitiesRequest{})
	mustCode(t, codes.PermissionDenied, err)

	// What SetFault writes reads back the same.
	must.NoError(t, SetFault(in.StateDir(), "DeleteVolume", Fault{Code: codes.Aborted, Times: 3}))
	var faults map[string]Fault
	b, err := os.ReadFile(file)
	must.NoError(t, err)
	must.NoError(t, json.Unmarshal(b, &faults))
	must.Eq(t, Fault{Code: codes.Aborted, Times: 3}, faults["DeleteVolume"])
	must.StrContains(t, string(b), `"ABORTED"`)

	// A broken file fails every call with a message that names it.
	must.NoError(t, os.WriteFile(file, []byte(`{"NodeGetInfo": {"code": "NO_SUCH_CODE"}}`), 0o644))
	_, err = in.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	mustCode(t, codes.Internal, err)
	must.StrContains(t, status.Convert(err).Message(), file)
}

func TestSetFault_Validates(t *testing.T) {
	dir := t.TempDir()
	must.Error(t, SetFault(dir, "NoSuchMethod", Fault{Code: codes.Internal}))
	must.Error(t, SetFault(dir, "NodeStageVolume", Fault{NotReady: true}))
	must.Error(t, SetFault(dir, "NodeStageVolume", Fault{}))
	must.Error(t, SetFault(dir, "NodeStageVolume", Fault{Code: codes.Internal, Times: -1}))
	must.NoError(t, SetFault(dir, "CreateVolumeGroupSnapshot", Fault{Code: codes.Internal}))
}
