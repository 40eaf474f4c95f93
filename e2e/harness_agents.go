package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volplane/volplane/testutil"
)

// The client agents and CSI plugins of a ProcessCluster.

// procPlugin is a `volplane csi-dev-plugin` process.
type procPlugin struct {
	*process
	nodeID   string
	socket   string
	stateDir string
}

func (p *procPlugin) NodeID() string   { return p.nodeID }
func (p *procPlugin) Endpoint() string { return "unix://" + p.socket }
func (p *procPlugin) StateDir() string { return p.stateDir }

// procClient is a `volplane agent -client` process.
type procClient struct {
	*process
	dataDir string
}

func (cl *procClient) DataDir() string { return cl.dataDir }

// maxSocketPath keeps a socket path within the 107 bytes a unix socket
// address holds, with room to spare.
const maxSocketPath = 100

// StartPlugin implements Cluster. The socket is in the cluster's directory,
// or in a short temporary directory when that path would be too long for a
// socket.
func (c *ProcessCluster) StartPlugin(t testing.TB, cfg PluginConfig) Plugin {
	t.Helper()
	c.checkName(t, cfg.Name)
	if cfg.NodeID == "" || cfg.StateDir == "" {
		t.Fatalf("e2e: plugin %s needs a node ID and a state dir", cfg.Name)
	}
	socket := filepath.Join(c.dir, cfg.Name+".sock")
	if len(socket) > maxSocketPath {
		dir, err := os.MkdirTemp("", "vpe2e-")
		if err != nil {
			t.Fatalf("e2e: a directory for the socket of %s: %v", cfg.Name, err)
		}
		c.extraDirs = append(c.extraDirs, dir)
		socket = filepath.Join(dir, cfg.Name+".sock")
	}
	p := &procPlugin{
		process: &process{
			name: cfg.Name,
			args: []string{"csi-dev-plugin",
				"-endpoint", "unix://" + socket,
				"-state-dir", cfg.StateDir,
				"-node-id", cfg.NodeID,
				// Debug, so that the secret checks read every line.
				"-log-level", "debug",
			},
			logPath: filepath.Join(c.dir, cfg.Name+".log"),
		},
		nodeID:   cfg.NodeID,
		socket:   socket,
		stateDir: cfg.StateDir,
	}
	p.ready = func(t testing.TB) { c.waitSocket(t, p) }
	c.plugins = append(c.plugins, p)
	c.start(t, p.process)
	p.ready(t)
	return p
}

// waitSocket waits until the plugin accepts connections on its socket.
func (c *ProcessCluster) waitSocket(t testing.TB, p *procPlugin) {
	t.Helper()
	testutil.WaitForResult(t, startTimeout, func() (bool, error) {
		if !p.alive() {
			t.Fatalf("e2e: %s exited while starting: %v", p.name, p.exitError())
		}
		conn, err := net.DialTimeout("unix", p.socket, time.Second)
		if err != nil {
			return false, fmt.Errorf("%s: %v", p.name, err)
		}
		conn.Close()
		return true, nil
	})
}

// StartClient implements Cluster.
func (c *ProcessCluster) StartClient(t testing.TB, cfg ClientConfig) Client {
	t.Helper()
	c.checkName(t, cfg.Name)
	var servers []string
	for _, s := range c.servers {
		servers = append(servers, s.rpcAddr)
	}
	dataDir := filepath.Join(c.dir, cfg.Name)
	args := []string{"agent", "-client",
		"-node-name", cfg.Name,
		"-data-dir", dataDir,
		"-servers", strings.Join(servers, ","),
		"-log-level", "debug",
	}
	for _, id := range slices.Sorted(maps.Keys(cfg.Plugins)) {
		args = append(args, "-csi-plugin", id+"="+cfg.Plugins[id].Endpoint())
	}
	if cfg.IntroToken != "" {
		args = append(args, "-intro-token", cfg.IntroToken)
	}
	if c.tls != nil {
		path := filepath.Join(c.dir, cfg.Name+".hcl")
		if err := os.WriteFile(path, []byte(c.tls.block(c.tls.client)), 0o644); err != nil {
			t.Fatalf("e2e: writing the config of %s: %v", cfg.Name, err)
		}
		args = append(args, "-config", path)
	}
	cl := &procClient{
		process: &process{name: cfg.Name, args: args, logPath: filepath.Join(c.dir, cfg.Name+".log")},
		dataDir: dataDir,
	}
	cl.ready = func(t testing.TB) { c.waitClientStarted(t, cl) }
	c.clients = append(c.clients, cl)
	c.start(t, cl.process)
	cl.ready(t)
	return cl
}

// clientStarted is what a client agent prints once it runs.
const clientStarted = "volplane client started: node "

// waitClientStarted waits until the client's latest start has printed that
// it runs (it then has its node ID, and registers in the background),
// failing at once if it exits instead.
func (c *ProcessCluster) waitClientStarted(t testing.TB, cl *procClient) {
	t.Helper()
	testutil.WaitForResult(t, startTimeout, func() (bool, error) {
		if !cl.alive() {
			t.Fatalf("e2e: %s exited while starting: %v", cl.name, cl.exitError())
		}
		b, err := os.ReadFile(cl.logPath)
		if err != nil {
			return false, err
		}
		out := string(b)
		// Only what the latest start printed.
		out = out[strings.LastIndex(out, startMarker):]
		if !strings.Contains(out, clientStarted) {
			return false, errors.New(cl.name + " has not started yet")
		}
		return true, nil
	})
}

// checkName fails the test if name is empty or already names a process.
func (c *ProcessCluster) checkName(t testing.TB, name string) {
	t.Helper()
	if name == "" || strings.ContainsAny(name, `/\`) {
		t.Fatalf("e2e: %q is not a process name", name)
	}
	for _, p := range c.all() {
		if p.name == name {
			t.Fatalf("e2e: there is already a process named %s", name)
		}
	}
}
