package csi

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"github.com/kubernetes-csi/csi-test/v5/utils"
	"github.com/shoenig/test/must"
	"go.uber.org/mock/gomock"
	"google.golang.org/protobuf/proto"
)

// harness is a client talking over a real unix socket to the csi-test
// gomock servers. Expectations are set on identity, controller and node;
// any call nobody expected fails the test.
type harness struct {
	// ctx is cancelled when a mock fails fatally (in a server goroutine),
	// so that the client call in flight returns instead of hanging; pass
	// it to every client call.
	ctx        context.Context
	identity   *driver.MockIdentityServer
	controller *driver.MockControllerServer
	node       *driver.MockNodeServer
	client     *Client
	socket     string
	logs       *syncBuffer
}

// newHarness starts the mock plugin and a client of it that logs at trace
// level into h.logs and retries without noticeable waits.
func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	ctrl, ctx := gomock.WithContext(context.Background(), t)
	h := &harness{
		ctx:        ctx,
		identity:   driver.NewMockIdentityServer(ctrl),
		controller: driver.NewMockControllerServer(ctrl),
		node:       driver.NewMockNodeServer(ctrl),
		socket:     filepath.Join(t.TempDir(), "csi.sock"),
		logs:       &syncBuffer{},
	}
	// Every service gets a mock: the harness registers all four even when
	// one is nil, and a call to a nil mock would crash the test binary.
	drv := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{
		Identity:         h.identity,
		Controller:       h.controller,
		Node:             h.node,
		SnapshotMetadata: driver.NewMockSnapshotMetadataServer(ctrl),
	})
	must.NoError(t, drv.StartOnAddress("unix", h.socket))

	logger := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Trace, Output: h.logs})
	all := append([]Option{WithRetries(3, time.Millisecond)}, opts...)
	client, err := NewClient("unix://"+h.socket, logger, all...)
	must.NoError(t, err)
	h.client = client
	t.Cleanup(func() {
		must.NoError(t, client.Close())
		drv.Stop()
	})
	return h
}

// pb matches a request equal to want, field by field.
func pb(want proto.Message) gomock.Matcher { return utils.Protobuf(want) }

// syncBuffer is a log sink safe for concurrent writers.
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

// Canned answers.

func pluginInfo(name, version string) *csipb.GetPluginInfoResponse {
	return &csipb.GetPluginInfoResponse{Name: name, VendorVersion: version}
}

func pluginCaps(types ...csipb.PluginCapability_Service_Type) *csipb.GetPluginCapabilitiesResponse {
	resp := &csipb.GetPluginCapabilitiesResponse{}
	for _, typ := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.PluginCapability{
			Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{Type: typ}},
		})
	}
	return resp
}

func controllerCaps(types ...csipb.ControllerServiceCapability_RPC_Type) *csipb.ControllerGetCapabilitiesResponse {
	resp := &csipb.ControllerGetCapabilitiesResponse{}
	for _, typ := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.ControllerServiceCapability{
			Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: typ}},
		})
	}
	return resp
}

func nodeCaps(types ...csipb.NodeServiceCapability_RPC_Type) *csipb.NodeGetCapabilitiesResponse {
	resp := &csipb.NodeGetCapabilitiesResponse{}
	for _, typ := range types {
		resp.Capabilities = append(resp.Capabilities, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: typ}},
		})
	}
	return resp
}

// mountCap is the CSI capability of a file system volume.
func mountCap(mode csipb.VolumeCapability_AccessMode_Mode, fsType string, flags ...string) *csipb.VolumeCapability {
	return &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode},
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType, MountFlags: flags}},
	}
}
