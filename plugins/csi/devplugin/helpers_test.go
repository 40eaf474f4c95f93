package devplugin

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// instance is a started plugin and a client connected to it over its
// socket.
type instance struct {
	*Plugin
	csi.IdentityClient
	csi.ControllerClient
	csi.NodeClient
	csi.GroupControllerClient
	logs *syncBuffer
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startInstance starts a plugin on stateDir with node ID nodeID; change
// adjusts the config first. It is stopped when the test ends.
func startInstance(t *testing.T, stateDir, nodeID string, change func(*Config)) *instance {
	t.Helper()
	logs := &syncBuffer{}
	cfg := Config{
		Endpoint: "unix://" + filepath.Join(t.TempDir(), "csi.sock"),
		StateDir: stateDir,
		NodeID:   nodeID,
		Logger:   hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Trace}),
	}
	if change != nil {
		change(&cfg)
	}
	p, err := New(cfg)
	must.NoError(t, err)
	must.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	conn, err := grpc.NewClient(p.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &instance{Plugin: p, IdentityClient: csi.NewIdentityClient(conn),
		ControllerClient: csi.NewControllerClient(conn), NodeClient: csi.NewNodeClient(conn),
		GroupControllerClient: csi.NewGroupControllerClient(conn), logs: logs}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	must.Eq(t, want, status.Code(err), must.Sprintf("error: %v", err))
}

func mountCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	}
}

var (
	snw  = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	mnmw = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	mnsw = csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
)

func createVolume(t *testing.T, c csi.ControllerClient, name string, mode csi.VolumeCapability_AccessMode_Mode) *csi.Volume {
	t.Helper()
	resp, err := c.CreateVolume(ctx(t), &csi.CreateVolumeRequest{Name: name,
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(mode)}})
	must.NoError(t, err)
	return resp.GetVolume()
}

// claim is one volume's use on one node: the paths and the publish context.
type claim struct {
	vol, node, staging, target string
	mode                       csi.VolumeCapability_AccessMode_Mode
	pubCtx                     map[string]string
}

func newClaim(t *testing.T, vol string, in *instance, mode csi.VolumeCapability_AccessMode_Mode) *claim {
	return &claim{vol: vol, node: in.NodeID(), staging: t.TempDir(),
		target: filepath.Join(t.TempDir(), "target"), mode: mode}
}

func (c *claim) controllerPublish(t *testing.T, in *instance) error {
	resp, err := in.ControllerPublishVolume(ctx(t), &csi.ControllerPublishVolumeRequest{
		VolumeId: c.vol, NodeId: c.node, VolumeCapability: mountCap(c.mode)})
	if err == nil {
		c.pubCtx = resp.GetPublishContext()
	}
	return err
}

func (c *claim) stage(t *testing.T, in *instance) error {
	_, err := in.NodeStageVolume(ctx(t), &csi.NodeStageVolumeRequest{VolumeId: c.vol,
		StagingTargetPath: c.staging, VolumeCapability: mountCap(c.mode), PublishContext: c.pubCtx})
	return err
}

func (c *claim) publish(t *testing.T, in *instance) error {
	_, err := in.NodePublishVolume(ctx(t), &csi.NodePublishVolumeRequest{VolumeId: c.vol,
		StagingTargetPath: c.staging, TargetPath: c.target, VolumeCapability: mountCap(c.mode),
		PublishContext: c.pubCtx})
	return err
}

func (c *claim) unpublish(t *testing.T, in *instance) error {
	_, err := in.NodeUnpublishVolume(ctx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: c.vol, TargetPath: c.target})
	return err
}

func (c *claim) unstage(t *testing.T, in *instance) error {
	_, err := in.NodeUnstageVolume(ctx(t), &csi.NodeUnstageVolumeRequest{VolumeId: c.vol, StagingTargetPath: c.staging})
	return err
}

func (c *claim) controllerUnpublish(t *testing.T, in *instance) error {
	_, err := in.ControllerUnpublishVolume(ctx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: c.vol, NodeId: c.node})
	return err
}

// attach runs the whole claim: controller publish, stage, publish.
func (c *claim) attach(t *testing.T, in *instance) {
	t.Helper()
	must.NoError(t, c.controllerPublish(t, in))
	must.NoError(t, c.stage(t, in))
	must.NoError(t, c.publish(t, in))
}

// detach runs the release in the spec's order.
func (c *claim) detach(t *testing.T, in *instance) {
	t.Helper()
	must.NoError(t, c.unpublish(t, in))
	must.NoError(t, c.unstage(t, in))
	must.NoError(t, c.controllerUnpublish(t, in))
}
