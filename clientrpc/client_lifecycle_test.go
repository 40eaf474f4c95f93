package clientrpc

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// TestClient_LifecycleRequestsChecked: the lifecycle calls refuse what no
// agent could serve before any call is made.
func TestClient_LifecycleRequestsChecked(t *testing.T) {
	agent := newBlockingAgent()
	fwd := New(fakeServers{map[string]*yamux.Session{"n1": agentSession(t, agent)}}, time.Minute, hclog.NewNullLogger())
	c := NewClient(fwd, fixedControllers{"n1"}, hclog.NewNullLogger())
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"snapshot without a name": func() error {
			_, err := c.ControllerCreateSnapshot(ctx, &structs.ClientCSIControllerCreateSnapshotRequest{PluginID: "dev", VolumeID: "ext"})
			return err
		},
		"delete without a snapshot": func() error {
			return c.ControllerDeleteSnapshot(ctx, &structs.ClientCSIControllerDeleteSnapshotRequest{PluginID: "dev"})
		},
		"expand without a capacity": func() error {
			_, err := c.ControllerExpandVolume(ctx, &structs.ClientCSIControllerExpandVolumeRequest{PluginID: "dev", VolumeID: "ext"})
			return err
		},
		"node expand without a node": func() error {
			_, err := c.NodeExpandVolume(ctx, &structs.ClientCSINodeExpandVolumeRequest{PluginID: "dev", VolumeID: "v", AllocID: "a"})
			return err
		},
		"listing without a plugin": func() error {
			_, err := c.ControllerListVolumes(ctx, &structs.ClientCSIControllerListVolumesRequest{})
			return err
		},
	} {
		err := call()
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprintf("%s: %v", name, err))
	}
	must.SliceEmpty(t, agent.ctrlSeen)
}
