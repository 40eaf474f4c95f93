package client

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// Two clients, each with an instance of the development plugin on its own
// socket (sharing one storage system), make the plugin show two healthy
// controllers and two healthy nodes.
func TestClient_PluginOnTwoNodes(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 3)
	stateDir := t.TempDir()
	var clients []*Client
	for i := range 2 {
		p := startPlugin(t, pluginSocket(t, "dev"), stateDir, fmt.Sprintf("storage-node-%d", i))
		c := testClient(t, addrs(servers[i]), func(cfg *Config) {
			cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: p.Endpoint()}}
		})
		clients = append(clients, c)
	}
	waitPlugin(t, servers[2], "dev", func(p *structs.CSIPlugin) error {
		if p == nil || p.ControllersHealthy != 2 || p.NodesHealthy != 2 {
			return fmt.Errorf("plugin is %+v", p)
		}
		return nil
	})
	p, err := servers[2].State().CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.Eq(t, devplugin.PluginName, p.Provider)
	must.True(t, p.ControllerRequired)
	for i, c := range clients {
		n := p.Nodes[c.NodeID()]
		must.NotNil(t, n, must.Sprintf("node instance of client %d", i))
		must.Eq(t, fmt.Sprintf("storage-node-%d", i), n.NodeInfo.ID, must.Sprint("the provider's node ID comes from NodeGetInfo"))
		must.True(t, n.NodeInfo.RequiresNodeStageVolume)
		must.True(t, p.Controllers[c.NodeID()].ControllerInfo.SupportsAttachDetach)

		node := waitNode(t, servers[2], c.NodeID(), nodeStatus(structs.NodeStatusReady))
		must.Eq(t, "client-"+t.Name(), node.Name)
		must.Eq(t, DefaultDatacenter, node.Datacenter)
	}

	// The clients hold sessions with servers 0 and 1; calls made on server
	// 2 reach them through the servers that hold their sessions.
	var created structs.ClientCSIControllerCreateVolumeResponse
	must.NoError(t, servers[2].RPC("ClientCSI.ControllerCreateVolume", &structs.ClientCSIControllerCreateVolumeRequest{
		PluginID: "dev", Name: "shared", Capabilities: fsCaps, CapacityMin: 1 << 20,
	}, &created))
	var attached structs.ClientCSIControllerAttachVolumeResponse
	must.NoError(t, servers[2].RPC("ClientCSI.ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: created.ExternalVolumeID, ClientCSINodeID: "storage-node-1",
		AccessMode: fsCaps[0].AccessMode, AttachmentMode: fsCaps[0].AttachmentMode,
	}, &attached))
	must.MapNotEmpty(t, attached.PublishContext)
	detach := &structs.ClientCSINodeDetachVolumeRequest{
		PluginID: "dev", VolumeID: "shared", ExternalID: created.ExternalVolumeID, AllocID: "alloc-1",
		AccessMode: fsCaps[0].AccessMode, AttachmentMode: fsCaps[0].AttachmentMode,
	}
	detach.NodeID = clients[1].NodeID()
	must.NoError(t, servers[2].RPC("ClientCSI.NodeDetachVolume", detach, &structs.ClientCSIEmptyResponse{}),
		must.Sprint("nothing published: the detach has nothing to do"))
	calls, err := devplugin.ReadCallLog(stateDir)
	must.NoError(t, err)
	unpublished := slices.ContainsFunc(calls, func(c devplugin.Call) bool {
		return c.Method == "NodeUnpublishVolume" && c.Instance == "storage-node-1" &&
			c.TargetPath == clients[1].Paths().TargetPath("alloc-1", "shared")
	})
	must.True(t, unpublished, must.Sprint("the detach ran on the allocation's node"))
}

// A probe that fails once does not make the plugin unhealthy; failing as
// many times as the threshold does, with the reason; the next success
// makes it healthy again.
func TestClient_ProbeHysteresis(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	stateDir := t.TempDir()
	p := startPlugin(t, pluginSocket(t, "dev"), stateDir, "storage-node")

	var mu sync.Mutex
	type outcome struct {
		failures int
		healthy  bool
	}
	var seen []outcome
	c := testClient(t, addrs(servers...), func(cfg *Config) {
		cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: p.Endpoint(), Type: structs.CSIPluginTypeMonolith}}
		cfg.onFingerprint = func(_ string, failures int, healthy bool) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, outcome{failures, healthy})
		}
	})
	waitPlugin(t, servers[0], "dev", instanceHealth(c.NodeID(), true, "healthy"))
	node := waitNode(t, servers[0], c.NodeID(), nodeStatus(structs.NodeStatusReady))

	// One failed probe.
	mu.Lock()
	seen = nil
	mu.Unlock()
	must.NoError(t, devplugin.SetFault(stateDir, "Probe", devplugin.Fault{Code: codes.Internal, Message: "blip", Times: 1}))
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		failed := slices.IndexFunc(seen, func(o outcome) bool { return o.failures > 0 })
		if failed < 0 || !slices.ContainsFunc(seen[failed:], func(o outcome) bool { return o.failures == 0 }) {
			return false, fmt.Errorf("no failure followed by a success yet: %v", seen)
		}
		return true, nil
	})
	mu.Lock()
	for _, o := range seen {
		must.True(t, o.healthy, must.Sprintf("one failed probe made the plugin unhealthy: %v", seen))
	}
	mu.Unlock()
	again, err := servers[0].State().NodeByID(nil, c.NodeID())
	must.NoError(t, err)
	must.Eq(t, node.ModifyIndex, again.ModifyIndex, must.Sprint("the servers saw no change"))

	// Failing probes, as many as the threshold and more, until the servers
	// saw the plugin unhealthy; then success again.
	must.NoError(t, devplugin.SetFault(stateDir, "Probe", devplugin.Fault{Code: codes.Internal, Message: "disk on fire"}))
	waitPlugin(t, servers[0], "dev", instanceHealth(c.NodeID(), false, "disk on fire"))
	mu.Lock()
	failures := 0
	for _, o := range seen {
		if !o.healthy {
			failures = o.failures
			break
		}
	}
	mu.Unlock()
	must.Eq(t, 3, failures, must.Sprint("unhealthy at the threshold's failure, not before"))
	must.NoError(t, devplugin.ClearFaults(stateDir))
	waitPlugin(t, servers[0], "dev", func(p *structs.CSIPlugin) error {
		if p.NodesHealthy != 1 || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin has %d/%d healthy nodes and %d/%d healthy controllers",
				p.NodesHealthy, p.NodesExpected, p.ControllersHealthy, p.ControllersExpected)
		}
		return nil
	})
}

// A plugin socket that is gone is unhealthy with the reason, and once gone
// for longer than the TTL the instance disappears from the plugin. When
// the plugin comes back, so does the instance.
func TestClient_GoneSocketRemovesInstance(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	stateDir := t.TempDir()
	socket := pluginSocket(t, "dev")
	p := startPlugin(t, socket, stateDir, "storage-node")
	c := testClient(t, addrs(servers...), func(cfg *Config) {
		cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: p.Endpoint()}}
		cfg.PluginGoneTTL = 1500 * time.Millisecond
	})
	waitPlugin(t, servers[0], "dev", instanceHealth(c.NodeID(), true, "healthy"))

	p.Stop()
	waitPlugin(t, servers[0], "dev", instanceHealth(c.NodeID(), false, "plugin socket "+socket+": no such file"))
	waitPlugin(t, servers[0], "dev", func(p *structs.CSIPlugin) error {
		if p != nil && (p.Nodes[c.NodeID()] != nil || p.Controllers[c.NodeID()] != nil) {
			return fmt.Errorf("plugin still has an instance on the node")
		}
		return nil
	})
	node, err := servers[0].State().NodeByID(nil, c.NodeID())
	must.NoError(t, err)
	must.MapEmpty(t, node.CSINodePlugins)
	must.Eq(t, structs.NodeStatusReady, node.Status, must.Sprint("a node without plugins is still ready"))

	startPlugin(t, socket, stateDir, "storage-node")
	waitPlugin(t, servers[0], "dev", instanceHealth(c.NodeID(), true, "healthy"))
}

// A socket where no CSI plugin listens, a file that is not a socket, or no
// socket at all give an unhealthy instance with a clear reason on the node.
// (The servers make no plugin row for a plugin never seen healthy.)
func TestClient_BadSockets(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	dir := socketDir(t)
	missing := filepath.Join(dir, "missing.sock")
	notSocket := filepath.Join(dir, "file.sock")
	must.NoError(t, os.WriteFile(notSocket, []byte("x"), 0o600))
	// A gRPC server with no CSI service on it.
	other := filepath.Join(dir, "other.sock")
	ln, err := net.Listen("unix", other)
	must.NoError(t, err)
	g := grpc.NewServer()
	go g.Serve(ln)
	t.Cleanup(g.Stop)

	c := testClient(t, addrs(servers...), func(cfg *Config) {
		cfg.Plugins = []PluginConfig{
			{ID: "missing", Endpoint: "unix://" + missing},
			{ID: "file", Endpoint: "unix://" + notSocket, Type: structs.CSIPluginTypeController},
			{ID: "other", Endpoint: "unix://" + other, Type: structs.CSIPluginTypeMonolith},
		}
	})
	waitRegistered(t, c)
	want := map[string]string{
		"missing": "plugin socket " + missing + ": no such file",
		"file":    "plugin socket " + notSocket + ": not a unix socket",
		"other":   "not a CSI plugin",
	}
	waitNode(t, servers[0], c.NodeID(), func(n *structs.Node) error {
		for id, reason := range want {
			info := n.CSINodePlugins[id]
			if id == "file" {
				info = n.CSIControllerPlugins[id]
			}
			switch {
			case info == nil:
				return fmt.Errorf("node reports no instance of %q", id)
			case info.Healthy || !strings.Contains(info.HealthDescription, reason):
				return fmt.Errorf("plugin %q: healthy=%v %q, want unhealthy with %q", id, info.Healthy, info.HealthDescription, reason)
			}
		}
		if n.CSIControllerPlugins["other"] == nil {
			return fmt.Errorf("a monolith reports its controller side too")
		}
		return nil
	})
	for _, id := range []string{"missing", "file", "other"} {
		p, err := servers[0].State().CSIPluginByID(nil, id)
		must.NoError(t, err)
		must.Nil(t, p)
	}
}

// The client's server is shut down: the client moves to another server it
// learned of, and its node never goes down.
func TestClient_Failover(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 3)
	// Only the first server is configured: the others are learned from its
	// replies.
	c := testClient(t, addrs(servers[0]), nil)
	waitRegistered(t, c)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		all, _ := c.Servers()
		return len(all) == 3, fmt.Errorf("client knows servers %v", all)
	})
	node := waitNode(t, servers[1], c.NodeID(), nodeStatus(structs.NodeStatusReady))
	_, cur := c.Servers()
	must.Eq(t, servers[0].RPCAddr(), cur)

	must.NoError(t, servers[0].Shutdown())
	rest := servers[1:]
	server.WaitForLeader(t, rest...)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		_, cur := c.Servers()
		for _, s := range rest {
			if s.RPCAddr() != cur {
				continue
			}
			var reply structs.NodeConnQueryResponse
			if err := s.RPC("Status.HasNodeConn", &structs.NodeSpecificRequest{NodeID: c.NodeID()}, &reply); err != nil {
				return false, err
			}
			return reply.Connected, fmt.Errorf("server %s does not hold the node's session yet", cur)
		}
		return false, fmt.Errorf("client still uses %s", cur)
	})

	// Wait past the TTL and grace for any change to the node: there must
	// be none (a node marked down and back would have changed twice).
	args := &structs.NodeSpecificRequest{NodeID: c.NodeID()}
	args.MinQueryIndex = node.ModifyIndex
	args.MaxQueryTime = testTTL + testGrace + time.Second
	var reply structs.SingleNodeResponse
	must.NoError(t, rest[0].RPC("Node.GetNode", args, &reply))
	must.NotNil(t, reply.Node)
	must.Eq(t, structs.NodeStatusReady, reply.Node.Status)
	must.Eq(t, node.ModifyIndex, reply.Node.ModifyIndex, must.Sprint("the node changed during the failover"))
}

// A client whose identity file was tampered with is refused by the
// servers; it says so at error level and keeps running.
func TestClient_WrongSecretRefused(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	dataDir := t.TempDir()
	first := testClient(t, addrs(servers...), func(cfg *Config) { cfg.DataDir = dataDir })
	waitRegistered(t, first)
	must.NoError(t, first.Shutdown())

	path := filepath.Join(dataDir, identityFile)
	buf, err := os.ReadFile(path)
	must.NoError(t, err)
	var id identity
	must.NoError(t, json.Unmarshal(buf, &id))
	id.SecretID = "not-the-secret"
	buf, err = json.Marshal(id)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(path, buf, 0o600))

	var logs testutil.Buffer
	second := testClient(t, addrs(servers...), func(cfg *Config) {
		cfg.DataDir = dataDir
		cfg.Logger = testLogger(t, "tampered", &logs)
	})
	must.Eq(t, first.NodeID(), second.NodeID())
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "[ERROR]") && strings.Contains(line, "node secret does not match") {
				return true, nil
			}
		}
		return false, fmt.Errorf("no error logged yet")
	})
	select {
	case <-second.Registered():
		t.Fatal("a client with the wrong secret registered")
	default:
	}
	must.StrNotContains(t, logs.String(), "not-the-secret", must.Sprint("the secret is never logged"))
	must.NoError(t, second.Shutdown())
}

// A node whose client stops is marked down after the TTL and grace, and
// ready again when the client comes back.
func TestClient_NodeDownAfterTTL(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	dataDir := t.TempDir()
	c := testClient(t, addrs(servers...), func(cfg *Config) { cfg.DataDir = dataDir })
	waitRegistered(t, c)
	waitNode(t, servers[0], c.NodeID(), nodeStatus(structs.NodeStatusReady))

	must.NoError(t, c.Shutdown())
	stopped := time.Now()
	waitNode(t, servers[0], c.NodeID(), nodeStatus(structs.NodeStatusDown))
	must.Greater(t, testTTL, time.Since(stopped), must.Sprint("marked down before the TTL passed"))

	back := testClient(t, addrs(servers...), func(cfg *Config) { cfg.DataDir = dataDir })
	must.Eq(t, c.NodeID(), back.NodeID())
	waitNode(t, servers[0], c.NodeID(), nodeStatus(structs.NodeStatusReady))
}
