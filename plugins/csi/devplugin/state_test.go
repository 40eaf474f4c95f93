package devplugin

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCorruptStateFile(t *testing.T) {
	dir := t.TempDir()
	in := startInstance(t, dir, "node-a", nil)
	createVolume(t, in, "v", snw)
	file := filepath.Join(dir, "state.json")
	must.NoError(t, os.WriteFile(file, []byte(`{"version": 1, "volumes": [`), 0o600))

	// A running instance answers with the reason instead of crashing.
	_, err := in.ListVolumes(ctx(t), &csi.ListVolumesRequest{})
	mustCode(t, codes.Internal, err)
	must.StrContains(t, status.Convert(err).Message(), file+" is corrupt")
	_, err = in.Probe(ctx(t), &csi.ProbeRequest{})
	mustCode(t, codes.FailedPrecondition, err)

	// A new one does not start.
	_, err = New(Config{Endpoint: filepath.Join(t.TempDir(), "csi.sock"), StateDir: dir, NodeID: "node-b"})
	must.ErrorContains(t, err, "is corrupt")

	must.NoError(t, os.WriteFile(file, []byte(`{"version": 99}`), 0o600))
	_, err = New(Config{Endpoint: filepath.Join(t.TempDir(), "csi.sock"), StateDir: dir, NodeID: "node-b"})
	must.ErrorContains(t, err, "version 99")
}

func TestNew_ChecksConfig(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	for name, cfg := range map[string]Config{
		"no endpoint":      {StateDir: t.TempDir()},
		"tcp endpoint":     {Endpoint: "tcp://127.0.0.1:1", StateDir: t.TempDir()},
		"no state dir":     {Endpoint: sock},
		"negative max":     {Endpoint: sock, StateDir: t.TempDir(), MaxVolumesPerNode: -1},
		"empty topo key":   {Endpoint: sock, StateDir: t.TempDir(), Topology: map[string]string{"": "x"}},
		"empty topo value": {Endpoint: sock, StateDir: t.TempDir(), Topology: map[string]string{"zone": ""}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(cfg)
			must.Error(t, err)
		})
	}

	host, err := os.Hostname()
	must.NoError(t, err)
	for _, endpoint := range []string{"unix://" + sock, "unix:" + sock, sock} {
		p, err := New(Config{Endpoint: endpoint, StateDir: t.TempDir()})
		must.NoError(t, err)
		must.Eq(t, "unix://"+sock, p.Endpoint())
		must.Eq(t, host, p.NodeID())
	}
}

func TestStart_ReplacesAStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	must.NoError(t, err)
	l.SetUnlinkOnClose(false)
	must.NoError(t, l.Close())
	must.FileExists(t, sock)

	p, err := New(Config{Endpoint: sock, StateDir: t.TempDir(), NodeID: "n"})
	must.NoError(t, err)
	must.NoError(t, p.Start())
	must.Error(t, p.Start())
	p.Stop()
	p.Stop()
	_, err = os.Stat(sock)
	must.True(t, os.IsNotExist(err))

	// Anything but a socket is left alone.
	must.NoError(t, os.WriteFile(sock, []byte("mine"), 0o600))
	p, err = New(Config{Endpoint: sock, StateDir: t.TempDir(), NodeID: "n"})
	must.NoError(t, err)
	must.ErrorContains(t, p.Start(), "not a socket")
}

func TestIdentity(t *testing.T) {
	in := startInstance(t, t.TempDir(), "node-a", nil)
	info, err := in.GetPluginInfo(ctx(t), &csi.GetPluginInfoRequest{})
	must.NoError(t, err)
	must.Eq(t, "dev.csi.volplane.io", info.GetName())
	must.NotEq(t, "", info.GetVendorVersion())

	caps, err := in.GetPluginCapabilities(ctx(t), &csi.GetPluginCapabilitiesRequest{})
	must.NoError(t, err)
	var services []csi.PluginCapability_Service_Type
	for _, c := range caps.GetCapabilities() {
		if c.GetService() != nil {
			services = append(services, c.GetService().GetType())
		}
	}
	// No topology configured: no accessibility constraints.
	must.Eq(t, []csi.PluginCapability_Service_Type{
		csi.PluginCapability_Service_CONTROLLER_SERVICE,
		csi.PluginCapability_Service_GROUP_CONTROLLER_SERVICE,
	}, services)

	node, err := in.NodeGetInfo(ctx(t), &csi.NodeGetInfoRequest{})
	must.NoError(t, err)
	must.Nil(t, node.GetAccessibleTopology())
}
