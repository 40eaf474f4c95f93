package csi

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/driver"
	"github.com/shoenig/test/must"
	"go.uber.org/mock/gomock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestNewClient_Endpoints(t *testing.T) {
	cases := []struct {
		endpoint string
		want     string // socket path, or "" for an error
	}{
		{"unix:///run/csi/disk.sock", "/run/csi/disk.sock"},
		{"unix:/run/csi/disk.sock", "/run/csi/disk.sock"},
		{"/run/csi/../csi/disk.sock", "/run/csi/disk.sock"},
		{"unix://run/csi.sock", ""},
		{"tcp://127.0.0.1:9000", ""},
		{"disk.sock", ""},
		{"", ""},
		{"unix://", ""},
		{"/" + strings.Repeat("x", 120), ""},
	}
	for _, tc := range cases {
		t.Run(tc.endpoint, func(t *testing.T) {
			c, err := NewClient(tc.endpoint, nil)
			if tc.want == "" {
				must.Error(t, err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, c.Socket())
			must.NoError(t, c.Close())
			must.NoError(t, c.Close()) // twice is harmless
		})
	}
}

// TestClient_MissingSocket: the first call fails at once with a clear
// reason; it is retryable, as the plugin may be about to start.
func TestClient_MissingSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	c, err := NewClient(sock, nil)
	must.NoError(t, err)
	defer c.Close()

	_, err = c.Probe(context.Background())
	must.EqError(t, err, "Probe: rpc error: code = Unavailable desc = plugin socket "+sock+": no such file")
	must.Eq(t, ClassRetryable, ClassOf(MethodProbe, err))

	_, _, err = c.Fingerprint(context.Background(), "disk", "")
	must.EqError(t, err, "plugin socket "+sock+": no such file")
	must.Eq(t, codes.Unavailable, status.Code(err))
}

func TestClient_NotASocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "csi.sock")
	must.NoError(t, os.WriteFile(path, []byte("hello"), 0o600))
	c, err := NewClient(path, nil)
	must.NoError(t, err)
	defer c.Close()

	_, _, err = c.Fingerprint(context.Background(), "disk", "")
	must.EqError(t, err, "plugin socket "+path+": not a unix socket")
}

// TestClient_NotAGRPCServer: something that is not gRPC owns the socket.
// The call fails, quickly, as unavailable.
func TestClient_NotAGRPCServer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", sock)
	must.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			_ = conn.Close()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})

	c, err := NewClient(sock, nil, WithRetries(2, time.Millisecond))
	must.NoError(t, err)
	defer c.Close()
	// The deadline only keeps a regression from hanging the test; the call
	// is expected to fail long before it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, _, err = c.Fingerprint(ctx, "disk", "")
	must.Error(t, err)
	must.Eq(t, codes.Unavailable, status.Code(err))
	must.StrHasPrefix(t, "GetPluginInfo: rpc error: code = Unavailable", err.Error())
	must.NoError(t, ctx.Err())
}

// TestClient_NotACSIPlugin: a gRPC server without the CSI Identity service.
func TestClient_NotACSIPlugin(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.Listen("unix", sock)
	must.NoError(t, err)
	srv := grpc.NewServer()
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	t.Cleanup(func() {
		srv.Stop()
		wg.Wait()
	})

	c, err := NewClient("unix://"+sock, nil)
	must.NoError(t, err)
	defer c.Close()

	_, _, err = c.Fingerprint(context.Background(), "disk", "")
	must.EqError(t, err, "not a CSI plugin: unknown service csi.v1.Identity")
	must.Eq(t, codes.Unimplemented, status.Code(err))
	must.Eq(t, ClassFinal, ClassOf("", err))
}

// TestClient_PluginRestart: the same client keeps working across a plugin
// restart; while the plugin is gone, calls fail at once.
func TestClient_PluginRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	start := func() *driver.MockCSIDriver {
		ctrl := gomock.NewController(t)
		identity := driver.NewMockIdentityServer(ctrl)
		identity.EXPECT().Probe(gomock.Any(), gomock.Any()).Return(&csipb.ProbeResponse{}, nil).AnyTimes()
		drv := driver.NewMockCSIDriver(&driver.MockCSIDriverServers{
			Identity:         identity,
			Controller:       driver.NewMockControllerServer(ctrl),
			Node:             driver.NewMockNodeServer(ctrl),
			SnapshotMetadata: driver.NewMockSnapshotMetadataServer(ctrl),
		})
		must.NoError(t, drv.StartOnAddress("unix", sock))
		return drv
	}
	c, err := NewClient(sock, nil, WithRetries(3, time.Millisecond))
	must.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	drv := start()
	ready, err := c.Probe(ctx)
	must.NoError(t, err)
	must.True(t, ready)

	drv.Stop() // removes the socket
	_, err = c.Probe(ctx)
	must.ErrorContains(t, err, "no such file")

	drv = start()
	defer drv.Stop()
	ready, err = c.Probe(ctx)
	must.NoError(t, err)
	must.True(t, ready)
}
