package client

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// csiHarness is a client running the development plugin as node
// "storage-a", registered with a fake server that calls it back over its
// session, and a second plugin instance, "storage-b", of the same storage
// system, with no client.
type csiHarness struct {
	c        *Client
	stateDir string
	sess     *yamux.Session
}

func newCSIHarness(t *testing.T) *csiHarness {
	t.Helper()
	stateDir := t.TempDir()
	p := startPlugin(t, pluginSocket(t, "a"), stateDir, "storage-a")
	startPlugin(t, pluginSocket(t, "b"), stateDir, "storage-b")
	fake := newFakeServer(t)
	c := testClient(t, []string{fake.addr}, func(cfg *Config) {
		cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: p.Endpoint()}}
	})
	h := &csiHarness{c: c, stateDir: stateDir, sess: fake.session(t)}
	waitRegistered(t, c)
	h.waitHealthy(t, true)
	return h
}

func (h *csiHarness) waitHealthy(t *testing.T, healthy bool) {
	t.Helper()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		_, n, _ := h.c.plugins.Report(csimanager.StaticKey("dev"))
		if n == nil || n.Healthy != healthy {
			return false, fmt.Errorf("plugin instance is %+v", n)
		}
		return true, nil
	})
}

// call makes a ClientCSI call the way a server does: on a stream it opens
// on the client's session.
func (h *csiHarness) call(method string, args, reply any) error {
	return rpc.CallOnSession(h.sess, "ClientCSI."+method, args, reply, 10*time.Second)
}

// calls returns the plugin calls of one method, in order.
func (h *csiHarness) calls(t *testing.T, methods ...string) []devplugin.Call {
	t.Helper()
	all, err := devplugin.ReadCallLog(h.stateDir)
	must.NoError(t, err)
	var out []devplugin.Call
	for _, c := range all {
		for _, m := range methods {
			if c.Method == m {
				out = append(out, c)
			}
		}
	}
	return out
}

var fsCaps = []*structs.CSIVolumeCapability{{
	AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
	AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
}}

func (h *csiHarness) createVolume(t *testing.T, name string, caps []*structs.CSIVolumeCapability) string {
	t.Helper()
	var reply structs.ClientCSIControllerCreateVolumeResponse
	must.NoError(t, h.call("ControllerCreateVolume", &structs.ClientCSIControllerCreateVolumeRequest{
		PluginID: "dev", Name: name, Capabilities: caps, CapacityMin: 1 << 20,
		Secrets: structs.CSISecrets{"password": "hunter2-secret"},
	}, &reply))
	must.NotEq(t, "", reply.ExternalVolumeID)
	must.Positive(t, reply.CapacityBytes)
	return reply.ExternalVolumeID
}

func wantCode(t *testing.T, err error, code structs.ErrorCode, contains ...string) {
	t.Helper()
	must.Error(t, err)
	must.Eq(t, code, structs.CodeOf(err), must.Sprintf("error %v", err))
	for _, s := range contains {
		must.StrContains(t, err.Error(), s)
	}
}

func TestClientCSI_ControllerCalls(t *testing.T) {
	t.Parallel()
	h := newCSIHarness(t)
	vol := h.createVolume(t, "db", fsCaps)

	must.NoError(t, h.call("ControllerValidateVolume", &structs.ClientCSIControllerValidateVolumeRequest{
		PluginID: "dev", VolumeID: vol, Capabilities: fsCaps,
	}, &structs.ClientCSIEmptyResponse{}))

	attach := &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: vol, ClientCSINodeID: "storage-a",
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		MountOptions: &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"password=hunter2-secret"}},
		Secrets:      structs.CSISecrets{"password": "hunter2-secret"},
	}
	attach.NodeID = h.c.NodeID()
	var attached structs.ClientCSIControllerAttachVolumeResponse
	must.NoError(t, h.call("ControllerAttachVolume", attach, &attached))
	must.MapNotEmpty(t, attached.PublishContext)

	// A single-node volume published to another node: retryable, since
	// releasing the first claim makes it possible.
	other := *attach
	other.ClientCSINodeID = "storage-b"
	wantCode(t, h.call("ControllerAttachVolume", &other, &attached), structs.ErrCodeRetryable,
		"ControllerPublishVolume", vol, "FailedPrecondition")

	// A final plugin error names the method, the volume and the code.
	must.NoError(t, devplugin.SetFault(h.stateDir, "ControllerPublishVolume", devplugin.Fault{Code: codes.Internal, Message: "disk on fire", Times: 1}))
	err := h.call("ControllerAttachVolume", attach, &attached)
	wantCode(t, err, structs.ErrCodeInternal, "ControllerPublishVolume", vol, "Internal", "disk on fire")
	must.StrNotContains(t, err.Error(), "hunter2-secret")

	// A plugin that is busy: retryable.
	must.NoError(t, devplugin.SetFault(h.stateDir, "ControllerUnpublishVolume", devplugin.Fault{Code: codes.Unavailable, Times: 3}))
	detach := &structs.ClientCSIControllerDetachVolumeRequest{PluginID: "dev", VolumeID: vol, ClientCSINodeID: "storage-a"}
	wantCode(t, h.call("ControllerDetachVolume", detach, &structs.ClientCSIEmptyResponse{}), structs.ErrCodeRetryable,
		"ControllerUnpublishVolume", "Unavailable")
	must.NoError(t, h.call("ControllerDetachVolume", detach, &structs.ClientCSIEmptyResponse{}))
	must.NoError(t, h.call("ControllerDetachVolume", detach, &structs.ClientCSIEmptyResponse{}), must.Sprint("detaching twice is fine"))

	del := &structs.ClientCSIControllerDeleteVolumeRequest{PluginID: "dev", VolumeID: vol}
	must.NoError(t, h.call("ControllerDeleteVolume", del, &structs.ClientCSIEmptyResponse{}))
	must.NoError(t, h.call("ControllerDeleteVolume", del, &structs.ClientCSIEmptyResponse{}), must.Sprint("a volume already gone is deleted"))
}

func TestClientCSI_BadRequests(t *testing.T) {
	t.Parallel()
	h := newCSIHarness(t)
	empty := &structs.ClientCSIEmptyResponse{}

	wantCode(t, h.call("ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{PluginID: "dev"},
		&structs.ClientCSIControllerAttachVolumeResponse{}), structs.ErrCodeInvalid,
		"ClientCSI.ControllerAttachVolume", "missing VolumeID", "missing ClientCSINodeID", "AccessMode")
	wantCode(t, h.call("ControllerValidateVolume", &structs.ClientCSIControllerValidateVolumeRequest{PluginID: "dev", VolumeID: "v"}, empty),
		structs.ErrCodeInvalid, "missing Capabilities")
	wantCode(t, h.call("ControllerCreateVolume", &structs.ClientCSIControllerCreateVolumeRequest{PluginID: "dev", Capabilities: fsCaps},
		&structs.ClientCSIControllerCreateVolumeResponse{}), structs.ErrCodeInvalid, "missing Name")
	wantCode(t, h.call("ControllerDeleteVolume", &structs.ClientCSIControllerDeleteVolumeRequest{VolumeID: "v"}, empty),
		structs.ErrCodeInvalid, "missing PluginID")
	wantCode(t, h.call("NodeDetachVolume", &structs.ClientCSINodeDetachVolumeRequest{PluginID: "dev", VolumeID: "v"}, empty),
		structs.ErrCodeInvalid, "missing AllocID", "missing ExternalID")

	// A plugin this node does not run: the server should try another node.
	wantCode(t, h.call("ControllerDetachVolume", &structs.ClientCSIControllerDetachVolumeRequest{
		PluginID: "ebs", VolumeID: "v", ClientCSINodeID: "n"}, empty), structs.ErrCodeRetryable, `"ebs" does not run on this node`)
	// A call meant for another node.
	req := &structs.ClientCSIControllerDetachVolumeRequest{PluginID: "dev", VolumeID: "v", ClientCSINodeID: "n"}
	req.NodeID = "some-other-node"
	wantCode(t, h.call("ControllerDetachVolume", req, empty), structs.ErrCodeRetryable, "some-other-node")

	// An unhealthy instance does not serve calls.
	must.NoError(t, devplugin.SetFault(h.stateDir, "Probe", devplugin.Fault{Code: codes.Internal, Message: "probe broken"}))
	h.waitHealthy(t, false)
	wantCode(t, h.call("NodeDetachVolume", &structs.ClientCSINodeDetachVolumeRequest{
		PluginID: "dev", VolumeID: "v", ExternalID: "v", AllocID: "a"}, empty), structs.ErrCodeRetryable, "unhealthy", "probe broken")
	wantCode(t, h.call("ControllerDeleteVolume", &structs.ClientCSIControllerDeleteVolumeRequest{PluginID: "dev", VolumeID: "v"}, empty),
		structs.ErrCodeRetryable, "unhealthy")
}

// NodeDetachVolume unpublishes the allocation's target, and unstages the
// volume only once no other allocation on the node uses it.
func TestClientCSI_NodeDetach(t *testing.T) {
	t.Parallel()
	h := newCSIHarness(t)
	caps := []*structs.CSIVolumeCapability{{
		AccessMode:     structs.CSIVolumeAccessModeMultiNodeMultiWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}}
	ext := h.createVolume(t, "shared", caps)
	var attached structs.ClientCSIControllerAttachVolumeResponse
	must.NoError(t, h.call("ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: ext, ClientCSINodeID: "storage-a",
		AccessMode: caps[0].AccessMode, AttachmentMode: caps[0].AttachmentMode,
	}, &attached))

	// Do what the allocation runner will do: stage once, publish for two
	// allocations, and record both uses.
	plugin := h.c.plugins.CSIClient(csimanager.StaticKey("dev"))
	paths := h.c.Paths()
	mode := state.UsageMode(caps[0].AccessMode, caps[0].AttachmentMode, false)
	staging := paths.StagingPath("dev", "", "shared", mode)
	capability := &csi.VolumeCapability{AccessMode: caps[0].AccessMode, AttachmentMode: caps[0].AttachmentMode}
	must.NoError(t, os.MkdirAll(staging, 0o700))
	ctx := context.Background()
	must.NoError(t, plugin.NodeStageVolume(ctx, &csi.NodeStageRequest{
		ExternalID: ext, StagingPath: staging, Capability: capability, PublishContext: attached.PublishContext,
	}))
	for _, alloc := range []string{"alloc-1", "alloc-2"} {
		target := paths.TargetPath(alloc, "shared")
		must.NoError(t, os.MkdirAll(filepath.Dir(target), 0o700))
		must.NoError(t, plugin.NodePublishVolume(ctx, &csi.NodePublishRequest{
			ExternalID: ext, StagingPath: staging, TargetPath: target, Capability: capability,
			PublishContext: attached.PublishContext,
		}))
		must.NoError(t, h.c.Usage().Add(state.VolumeUsage{
			AllocID: alloc, PluginID: "dev", VolumeID: "shared", ExternalID: ext,
			AccessMode: caps[0].AccessMode, AttachmentMode: caps[0].AttachmentMode,
			StagingPath: staging, TargetPath: target,
		}))
	}

	detach := func(alloc string) error {
		return h.call("NodeDetachVolume", &structs.ClientCSINodeDetachVolumeRequest{
			PluginID: "dev", VolumeID: "shared", ExternalID: ext, AllocID: alloc,
			AccessMode: caps[0].AccessMode, AttachmentMode: caps[0].AttachmentMode,
		}, &structs.ClientCSIEmptyResponse{})
	}
	must.NoError(t, detach("alloc-1"))
	calls := h.calls(t, "NodeUnpublishVolume", "NodeUnstageVolume")
	must.SliceLen(t, 1, calls, must.Sprint("alloc-2 still uses the volume: no unstage"))
	must.Eq(t, paths.TargetPath("alloc-1", "shared"), calls[0].TargetPath)
	_, still := h.c.Usage().Get("alloc-1", "shared")
	must.False(t, still)
	_, err := os.Stat(paths.AllocDir("alloc-1"))
	must.True(t, os.IsNotExist(err), must.Sprint("the empty allocation directory is removed"))

	must.NoError(t, detach("alloc-2"))
	calls = h.calls(t, "NodeUnpublishVolume", "NodeUnstageVolume")
	must.SliceLen(t, 3, calls)
	must.Eq(t, "NodeUnpublishVolume", calls[1].Method)
	must.Eq(t, paths.TargetPath("alloc-2", "shared"), calls[1].TargetPath)
	must.Eq(t, "NodeUnstageVolume", calls[2].Method)
	must.Eq(t, staging, calls[2].StagingPath)
	must.SliceEmpty(t, h.c.Usage().All())
	_, err = os.Stat(staging)
	must.True(t, os.IsNotExist(err), must.Sprint("the staging directory is removed"))

	// A repeated detach (the server lost the answer) is done already.
	must.NoError(t, detach("alloc-2"))

	// Now the controller side can go.
	must.NoError(t, h.call("ControllerDetachVolume", &structs.ClientCSIControllerDetachVolumeRequest{
		PluginID: "dev", VolumeID: ext, ClientCSINodeID: "storage-a"}, &structs.ClientCSIEmptyResponse{}))
}

// A controller call of a leader that went (its caller gave up; the agent
// cancels it when its stream ends) has finished with the plugin before the
// next leader's call on the same volume reaches it.
func TestClientCSI_ControllerCallsOnAVolumeDoNotOverlap(t *testing.T) {
	t.Parallel()
	h := newCSIHarness(t)
	vol := h.createVolume(t, "db", fsCaps)
	key := controllerLockKey("dev", vol)
	refs := func() int {
		h.c.volumeLocks.mu.Lock()
		defer h.c.volumeLocks.mu.Unlock()
		if l := h.c.volumeLocks.locks[key]; l != nil {
			return l.refs
		}
		return 0
	}
	waitRefs := func(n int) {
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			return refs() == n, fmt.Errorf("%d calls hold or wait for the volume's controller lock, want %d", refs(), n)
		})
	}
	must.NoError(t, devplugin.SetFault(h.stateDir, "ControllerUnpublishVolume", devplugin.Fault{Hang: true, Times: 1}))
	detach := &structs.ClientCSIControllerDetachVolumeRequest{PluginID: "dev", VolumeID: vol, ClientCSINodeID: "storage-a"}

	oldLeader, leave := context.WithCancel(context.Background())
	defer leave()
	first := make(chan error, 1)
	go func() {
		first <- rpc.CallOnSessionContext(oldLeader, h.sess, "ClientCSI.ControllerDetachVolume", detach, &structs.ClientCSIEmptyResponse{})
	}()
	waitRefs(1)

	second := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		second <- rpc.CallOnSessionContext(ctx, h.sess, "ClientCSI.ControllerDetachVolume", detach, &structs.ClientCSIEmptyResponse{})
	}()
	waitRefs(2) // the next leader's call waits for the volume
	select {
	case err := <-second:
		t.Fatalf("the second call ended (%v) while the first still ran", err)
	default:
	}

	leave() // the old leader goes
	must.Error(t, <-first)
	must.NoError(t, <-second)
	// The plugin logs the hung call when its handler sees the cancel, which
	// reaches it after the client gave the call up.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		calls := h.calls(t, csi.MethodControllerUnpublishVolume)
		return len(calls) == 2, fmt.Errorf("the plugin logged %d ControllerUnpublishVolume calls, want 2: the hung call, then the next leader's", len(calls))
	})
}
