package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// The servers' heartbeat timings in TestE2E_ClientAgents: short, so that a
// killed client is marked down within seconds, yet several heartbeats
// (every TTL/2) fit in them on a loaded machine.
const (
	clientHeartbeatTTL = 2 * time.Second
	clientNodeGrace    = time.Second
	// clientDownAfter is the longest a silent node stays ready: the TTL
	// and grace counted from its last heartbeat.
	clientDownAfter = clientHeartbeatTTL + clientNodeGrace
)

// TestE2E_ClientAgents runs 3 servers, 2 client agents and, for each
// client, an instance of the development CSI plugin on its own socket, the
// two instances sharing one storage system. It checks the plugin's health
// as the servers see it, creates and registers volumes through the CLI
// (which makes the servers call the plugin through a client), crashes and
// restarts a client, and crashes the server a client is attached to.
func TestE2E_ClientAgents(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: clientServerConfig})
	testClientAgents(t, c)
}

// clientServerConfig is the servers' configuration file in the tests with
// client agents: the short heartbeat timings above.
var clientServerConfig = fmt.Sprintf("server {\n  heartbeat_ttl     = %q\n  node_grace_period = %q\n}\n",
	clientHeartbeatTTL, clientNodeGrace)

// pluginID is the plugin ID the clients give the development plugin.
const pluginID = "dev"

// clientEnv is what the steps of the client agents test share.
type clientEnv struct {
	c        Cluster
	secret   string
	specDir  string
	stateDir string
	plugins  []Plugin
	clients  []Client
	// nodeIDs are the clients' node IDs, by client name.
	nodeIDs map[string]string
	// csiLog is what the test's own CSI client logged.
	csiLog *bytes.Buffer
}

// newClientEnv starts, once c has a leader, one storage system with two
// nodes, each an instance of the development plugin driven by a client
// agent, and waits until a follower of the leader, which it returns, has
// both nodes ready and the plugin healthy on both.
func newClientEnv(t *testing.T, c Cluster) (*clientEnv, Server) {
	t.Helper()
	return newClientEnvWith(t, c, ClientConfig{})
}

// newClientEnvWith is newClientEnv with the clients' settings other than
// their name and plugins taken from base.
func newClientEnvWith(t *testing.T, c Cluster, base ClientConfig) (*clientEnv, Server) {
	t.Helper()
	e := &clientEnv{
		c:        c,
		secret:   newSecret(t),
		specDir:  t.TempDir(),
		stateDir: t.TempDir(),
		nodeIDs:  map[string]string{},
		csiLog:   &bytes.Buffer{},
	}
	leader := WaitForLeader(t, c)
	for _, n := range []string{"a", "b"} {
		e.plugins = append(e.plugins, c.StartPlugin(t, PluginConfig{
			Name: "plugin-" + n, NodeID: "storage-" + n, StateDir: e.stateDir,
		}))
	}
	for i, p := range e.plugins {
		cfg := base
		cfg.Name, cfg.Plugins = fmt.Sprintf("c%d", i+1), map[string]Plugin{pluginID: p}
		cl := c.StartClient(t, cfg)
		e.clients = append(e.clients, cl)
		// A client killed by a test leaves its tasks running, as it
		// should; the test must not.
		t.Cleanup(func() { killTasksUnder(t, cl.DataDir()) })
	}
	follower := Followers(c, leader)[0]
	e.waitNodesReady(t, follower)
	e.waitPluginHealth(t, follower, 2)
	return e, follower
}

func testClientAgents(t *testing.T, c Cluster) {
	e, follower := newClientEnv(t, c)

	// Each step builds on the ones before it.
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"plugin health", func(t *testing.T) { e.checkPluginStatus(t, follower, 2) }},
		{"volumes", func(t *testing.T) { e.testVolumes(t, follower) }},
		{"client crash", e.testClientCrash},
		{"server crash", e.testServerCrash},
		{"secrets", e.checkSecrets},
	} {
		if !t.Run(step.name, step.run) {
			t.FailNow()
		}
	}
}

// cli runs a CLI command and checks that its output shows no secret.
func (e *clientEnv) cli(t *testing.T, s Server, command string, args ...string) CLIResult {
	t.Helper()
	res := e.c.CLI(t, s, command, args...)
	noSecret(t, e.secret, "volplane "+command, res.Stdout+res.Stderr)
	return res
}

// get reads url and decodes its 200 answer into out, checking that the
// body shows no secret.
func (e *clientEnv) get(url string, out any) error {
	res, err := doHTTP(http.MethodGet, url, nil, tokenHeader(e.c)...)
	if err != nil {
		return err
	}
	if strings.Contains(string(res.Body), e.secret) {
		return fmt.Errorf("GET %s shows the secret %q: %s", url, e.secret, res.Body)
	}
	if res.Status != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, res.Status, bytes.TrimSpace(res.Body))
	}
	return decodeJSON(res.Body, out)
}

// nodes reads the node list from s, by node name.
func (e *clientEnv) nodes(s Server, query string) (map[string]*structs.NodeListStub, error) {
	var stubs []*structs.NodeListStub
	if err := e.get(s.HTTPAddr()+"/v1/nodes"+query, &stubs); err != nil {
		return nil, err
	}
	out := map[string]*structs.NodeListStub{}
	for _, n := range stubs {
		if out[n.Name] != nil {
			return nil, fmt.Errorf("two nodes are named %s: %s and %s", n.Name, out[n.Name].ID, n.ID)
		}
		out[n.Name] = n
	}
	return out, nil
}

// waitNodesReady waits until s lists exactly the clients' nodes, each
// ready, and records their IDs; a node ID seen before must not change.
func (e *clientEnv) waitNodesReady(t *testing.T, s Server) {
	t.Helper()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		nodes, err := e.nodes(s, "")
		if err != nil {
			return false, err
		}
		if len(nodes) != len(e.clients) {
			return false, fmt.Errorf("%d nodes, want %d: %v", len(nodes), len(e.clients), slices.Sorted(maps.Keys(nodes)))
		}
		for _, cl := range e.clients {
			n := nodes[cl.Name()]
			if n == nil {
				return false, fmt.Errorf("no node named %s", cl.Name())
			}
			if n.Status != structs.NodeStatusReady {
				return false, fmt.Errorf("node %s (%s) is %s", cl.Name(), n.ID, n.Status)
			}
		}
		return true, nil
	})
	nodes, err := e.nodes(s, "")
	must.NoError(t, err)
	for _, cl := range e.clients {
		id := nodes[cl.Name()].ID
		if old, ok := e.nodeIDs[cl.Name()]; ok {
			must.Eq(t, old, id, must.Sprintf("client %s came back under another node ID", cl.Name()))
		}
		e.nodeIDs[cl.Name()] = id
	}
}

// plugin reads the plugin from s.
func (e *clientEnv) plugin(s Server) (*structs.CSIPlugin, error) {
	var p structs.CSIPlugin
	if err := e.get(s.HTTPAddr()+"/v1/plugin/csi/"+pluginID, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// waitPluginHealth waits until the plugin, read through s, has healthy
// controller and node instances on exactly the first healthy clients, and
// unhealthy ones on the others.
func (e *clientEnv) waitPluginHealth(t *testing.T, s Server, healthy int) {
	t.Helper()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		p, err := e.plugin(s)
		if err != nil {
			return false, err
		}
		// Done only once the plugin matches (returning true with an
		// error would end the wait as soon as the plugin exists).
		err = e.pluginHealth(p, healthy)
		return err == nil, err
	})
}

// pluginHealth checks that the plugin has a controller and a node instance
// on every client's node, healthy on the first healthy clients and
// unhealthy on the rest, with the counts to match.
func (e *clientEnv) pluginHealth(p *structs.CSIPlugin, healthy int) error {
	var errs []error
	want := func(what string, got, want int) {
		if got != want {
			errs = append(errs, fmt.Errorf("%s: %d, want %d", what, got, want))
		}
	}
	want("healthy controllers", p.ControllersHealthy, healthy)
	want("expected controllers", p.ControllersExpected, len(e.clients))
	want("healthy nodes", p.NodesHealthy, healthy)
	want("expected nodes", p.NodesExpected, len(e.clients))
	for i, cl := range e.clients {
		id := e.nodeIDs[cl.Name()]
		for kind, m := range map[string]map[string]*structs.CSIInfo{"controller": p.Controllers, "node": p.Nodes} {
			info := m[id]
			switch {
			case info == nil:
				errs = append(errs, fmt.Errorf("no %s instance on %s (%s)", kind, cl.Name(), id))
			case info.Healthy != (i < healthy):
				errs = append(errs, fmt.Errorf("%s instance on %s: healthy %v (%s)", kind, cl.Name(), info.Healthy, info.HealthDescription))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("plugin %s: %w", p.ID, errors.Join(errs...))
	}
	return nil
}

// checkPluginStatus checks `plugin status` through s, as JSON and as the
// table an operator reads, with healthy instances on the first healthy
// clients.
func (e *clientEnv) checkPluginStatus(t *testing.T, s Server, healthy int) {
	t.Helper()
	res := e.cli(t, s, "plugin status", "-json", pluginID)
	must.Zero(t, res.Code, must.Sprint(res))
	var p structs.CSIPlugin
	must.NoError(t, decodeJSON([]byte(res.Stdout), &p))
	must.Eq(t, pluginID, p.ID)
	must.Eq(t, devplugin.PluginName, p.Provider)
	must.True(t, p.ControllerRequired, must.Sprint("the development plugin offers the controller service"))
	must.NoError(t, e.pluginHealth(&p, healthy), must.Sprint(res))
	for i, cl := range e.clients {
		info := p.Nodes[e.nodeIDs[cl.Name()]]
		must.NotNil(t, info.NodeInfo, must.Sprintf("node info of %s", cl.Name()))
		must.Eq(t, e.plugins[i].NodeID(), info.NodeInfo.ID, must.Sprintf("the storage node ID of %s", cl.Name()))
	}

	res = e.cli(t, s, "plugin status", "-verbose", pluginID)
	must.Zero(t, res.Code, must.Sprint(res))
	for what, n := range map[string]int{
		"Controllers Healthy": healthy, "Controllers Expected": len(e.clients),
		"Nodes Healthy": healthy, "Nodes Expected": len(e.clients),
	} {
		must.RegexMatch(t, regexp.MustCompile(`(?m)^`+what+`\s+= `+fmt.Sprint(n)+`$`), res.Stdout, must.Sprint(res))
	}
	_, nodeTable, found := strings.Cut(res.Stdout, "\nNodes\n")
	must.True(t, found, must.Sprint(res))
	rows := tableRows(nodeTable)
	for i, cl := range e.clients {
		row := rowOf(rows, e.nodeIDs[cl.Name()])
		must.SliceNotEmpty(t, row, must.Sprintf("no row for %s in:\n%s", cl.Name(), res.Stdout))
		must.Eq(t, fmt.Sprint(i < healthy), row[1], must.Sprintf("health of %s in:\n%s", cl.Name(), res.Stdout))
		must.SliceContains(t, row, e.plugins[i].NodeID(), must.Sprintf("external node ID of %s in:\n%s", cl.Name(), res.Stdout))
	}
}

// rowOf returns the row whose first field is first, or nil.
func rowOf(rows [][]string, first string) []string {
	for _, r := range rows {
		if r[0] == first {
			return r
		}
	}
	return nil
}

// writeSpec writes the HCL specification of a single-node-writer
// file-system volume of the plugin with a secret derived from e's, plus
// extra attributes, and returns its path.
func (e *clientEnv) writeSpec(t *testing.T, id, extra string) string {
	t.Helper()
	return writeFile(t, e.specDir, id+".hcl", fmt.Sprintf(`id        = %q
name      = %q
type      = "csi"
plugin_id = %q
%s
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

secrets {
  token = %q
}
`, id, id, pluginID, extra, e.secret+"-"+id))
}

// volID is the volume allocation N of a per_alloc job of source "vol"
// claims.
func volID(i int) string { return fmt.Sprintf("vol[%d]", i) }

// createVolumes creates vol[0] to vol[n-1] through the CLI on s, and
// returns their external IDs, by volume ID.
func (e *clientEnv) createVolumes(t *testing.T, s Server, n int) map[string]string {
	t.Helper()
	exts := map[string]string{}
	for i := range n {
		id := volID(i)
		res := e.cli(t, s, "volume create", e.writeSpec(t, id, `capacity_min = "1MiB"`))
		must.Zero(t, res.Code, must.Sprint(res))
		exts[id] = e.volume(t, s, id).ExternalID
	}
	return exts
}

// createdRE reads what `volume create` prints.
var createdRE = regexp.MustCompile(`Created volume "([^"]+)" with external ID "([^"]+)"`)

// createInPlugin creates a volume in the storage system through the
// socket of p, as an operator would with the storage system's own tools,
// and returns its ID there.
func (e *clientEnv) createInPlugin(t *testing.T, p Plugin, name string) string {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Name: "e2e-csi", Level: hclog.Trace, Output: e.csiLog})
	client, err := csi.NewClient(p.Endpoint(), logger)
	must.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	resp, err := client.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:        name,
		CapacityMin: 1 << 20,
		Capabilities: []*csi.VolumeCapability{{
			AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		}},
		Secrets: structs.CSISecrets{"token": e.secret + "-" + name},
	})
	must.NoError(t, err, must.Sprintf("CreateVolume %s through %s", name, p.Name()))
	must.NotEq(t, "", resp.ExternalID)
	return resp.ExternalID
}

// callsOf returns the calls of method on volumeID in the storage
// system's call log that ended with code.
func (e *clientEnv) callsOf(t *testing.T, method, volumeID string, code codes.Code) []devplugin.Call {
	t.Helper()
	calls, err := devplugin.ReadCallLog(e.stateDir)
	must.NoError(t, err)
	var out []devplugin.Call
	for _, c := range calls {
		if c.Method == method && c.VolumeID == volumeID && c.Code == code {
			out = append(out, c)
		}
	}
	return out
}

// checkServedByAClient checks that the call log has a call of method on
// volumeID that ended with code, served by one of the clients' plugin
// instances, and none injected.
func (e *clientEnv) checkServedByAClient(t *testing.T, method, volumeID string, code codes.Code) {
	t.Helper()
	calls := e.callsOf(t, method, volumeID, code)
	must.SliceNotEmpty(t, calls, must.Sprintf("no %s of %s ended with %v in the call log", method, volumeID, code))
	var instances []string
	for _, p := range e.plugins {
		instances = append(instances, p.NodeID())
	}
	for _, c := range calls {
		must.SliceContains(t, instances, c.Instance, must.Sprintf("%s of %s served by an unknown instance", method, volumeID))
		must.False(t, c.Injected)
	}
}

// volume reads a volume through the CLI's JSON output.
func (e *clientEnv) volume(t *testing.T, s Server, id string) *structs.CSIVolume {
	t.Helper()
	res := e.cli(t, s, "volume status", "-json", id)
	must.Zero(t, res.Code, must.Sprint(res))
	var vol structs.CSIVolume
	must.NoError(t, decodeJSON([]byte(res.Stdout), &vol))
	must.Eq(t, id, vol.ID)
	must.Eq(t, pluginID, vol.PluginID)
	must.Eq(t, devplugin.PluginName, vol.Provider)
	must.MapEmpty(t, vol.Secrets, must.Sprint("secrets never leave the servers"))
	must.True(t, vol.Schedulable, must.Sprintf("%s: the plugin is healthy", id))
	return &vol
}

func (e *clientEnv) testVolumes(t *testing.T, s Server) {
	// Created through the CLI: the servers have a client's controller
	// create it in the storage system.
	res := e.cli(t, s, "volume create", e.writeSpec(t, "vol-created", `capacity_min = "1MiB"`))
	must.Zero(t, res.Code, must.Sprint(res))
	m := createdRE.FindStringSubmatch(res.Stdout)
	must.SliceLen(t, 3, m, must.Sprint(res))
	must.Eq(t, "vol-created", m[1])
	created := m[2]
	must.NotEq(t, "vol-created", created, must.Sprint("the external ID is the plugin's"))
	vol := e.volume(t, s, "vol-created")
	must.Eq(t, created, vol.ExternalID)
	must.GreaterEq(t, int64(1<<20), vol.Capacity)
	e.checkServedByAClient(t, "CreateVolume", created, codes.OK)

	// Registered: the volume exists in the storage system already, and
	// the servers have a client's controller validate it.
	external := e.createInPlugin(t, e.plugins[1], "made-by-hand")
	res = e.cli(t, s, "volume register", e.writeSpec(t, "vol-registered", fmt.Sprintf("external_id = %q", external)))
	must.Zero(t, res.Code, must.Sprint(res))
	must.Eq(t, external, e.volume(t, s, "vol-registered").ExternalID)
	e.checkServedByAClient(t, "ValidateVolumeCapabilities", external, codes.OK)

	res = e.cli(t, s, "volume status")
	must.Zero(t, res.Code, must.Sprint(res))
	must.Eq(t, []string{"vol-created", "vol-registered"}, firstColumn(tableRows(res.Stdout)), must.Sprint(res))

	// A volume the storage system does not have is refused, by name, and
	// not registered.
	res = e.cli(t, s, "volume register", e.writeSpec(t, "vol-unknown", `external_id = "no-such-volume"`))
	must.One(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stderr, `"vol-unknown"`, must.Sprint(res))
	must.StrContains(t, res.Stderr, "no-such-volume", must.Sprint(res))
	t.Logf("refused registration: %s", strings.TrimSpace(res.Stderr))
	e.checkServedByAClient(t, "ValidateVolumeCapabilities", "no-such-volume", codes.NotFound)
	res = e.cli(t, s, "volume status", "vol-unknown")
	must.One(t, res.Code, must.Sprint(res))
}

// nodeStatus reads a node's status through any running server, with a
// stale read (answered during an election too).
func (e *clientEnv) nodeStatus(name string) (string, error) {
	var errs []error
	for _, s := range e.c.Running() {
		status, err := e.nodeStatusOn(s, name)
		if err == nil {
			return status, nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// nodeStatusOn reads a node's status from s's own state.
func (e *clientEnv) nodeStatusOn(s Server, name string) (string, error) {
	var n structs.Node
	if err := e.get(s.HTTPAddr()+"/v1/node/"+e.nodeIDs[name]+"?stale", &n); err != nil {
		return "", fmt.Errorf("%s: %w", s.Name(), err)
	}
	return n.Status, nil
}

// checkNodeTable checks the statuses `node status` prints, by client name.
func (e *clientEnv) checkNodeTable(t *testing.T, s Server, want map[string]string) {
	t.Helper()
	res := e.cli(t, s, "node status", "-verbose")
	must.Zero(t, res.Code, must.Sprint(res))
	rows := tableRows(res.Stdout)
	must.SliceLen(t, len(e.clients), rows, must.Sprint(res))
	for name, status := range want {
		row := rowOf(rows, e.nodeIDs[name])
		must.SliceNotEmpty(t, row, must.Sprintf("no row for %s:\n%s", name, res.Stdout))
		// ID, Name, Drain, Eligibility, Status, Plugins, as Nomad's order.
		must.Eq(t, []string{e.nodeIDs[name], name, "false", structs.NodeSchedulingEligible, status, pluginID}, row[:6], must.Sprint(res))
	}
}

func (e *clientEnv) testClientCrash(t *testing.T) {
	s := WaitForLeader(t, e.c)
	crashed := e.clients[1]
	e.c.Kill(t, crashed)
	killed := time.Now()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		status, err := e.nodeStatus(crashed.Name())
		if err != nil || status != structs.NodeStatusDown {
			return false, fmt.Errorf("node of %s is %q: %v", crashed.Name(), status, err)
		}
		return true, nil
	})
	down := time.Since(killed)
	t.Logf("node of %s marked down %s after its agent was killed (TTL %s, grace %s)",
		crashed.Name(), down.Round(time.Millisecond), clientHeartbeatTTL, clientNodeGrace)
	// The client heartbeats about every TTL/2, so its last heartbeat was
	// well within a TTL before the kill: at least the grace period is left.
	must.GreaterEq(t, clientNodeGrace, down,
		must.Sprint("a node must not be marked down before its TTL and grace have passed"))
	e.waitPluginHealth(t, s, 1)
	e.checkNodeTable(t, s, map[string]string{"c1": structs.NodeStatusReady, crashed.Name(): structs.NodeStatusDown})
	e.checkPluginStatus(t, s, 1)

	// Back with the same data dir: the same node, ready again.
	e.c.Restart(t, crashed)
	e.waitNodesReady(t, s)
	e.waitPluginHealth(t, s, 2)
	e.checkNodeTable(t, s, map[string]string{"c1": structs.NodeStatusReady, crashed.Name(): structs.NodeStatusReady})
	e.checkPluginStatus(t, s, 2)
}

// attachedTo returns the running servers that hold a session with the
// client's node.
func (e *clientEnv) attachedTo(pool *rpc.ConnPool, name string) ([]Server, error) {
	var out []Server
	for _, s := range e.c.Running() {
		var resp structs.NodeConnQueryResponse
		req := &structs.NodeSpecificRequest{NodeID: e.nodeIDs[name]}
		if err := pool.RPC(s.RPCAddr(), "Status.HasNodeConn", req, &resp); err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		if resp.Connected {
			out = append(out, s)
		}
	}
	return out, nil
}

// testServerCrash crashes the server a client is attached to, then, if
// that was a follower, brings it back and crashes the leader: the clients
// move on, and their nodes never go down.
func (e *clientEnv) testServerCrash(t *testing.T) {
	pool := rpc.NewPool(rpc.PoolConfig{CallTimeout: requestTimeout})
	defer pool.Close()
	leader := WaitForLeader(t, e.c)
	var attached []Server
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var err error
		attached, err = e.attachedTo(pool, e.clients[0].Name())
		if err == nil && len(attached) != 1 {
			err = fmt.Errorf("%s is attached to %d servers", e.clients[0].Name(), len(attached))
		}
		return err == nil, err
	})
	victim := attached[0]
	e.crashServer(t, pool, victim, leader)
	if victim != leader {
		e.c.Restart(t, victim)
		leader = WaitForLeader(t, e.c)
		e.crashServer(t, pool, leader, leader)
	}

	// The cluster still reaches a client's plugin for a new volume.
	leader = WaitForLeader(t, e.c)
	s := Followers(e.c, leader)[0]
	e.waitPluginHealth(t, s, 2)
	e.checkNodeTable(t, s, map[string]string{"c1": structs.NodeStatusReady, "c2": structs.NodeStatusReady})
	external := e.createInPlugin(t, e.plugins[0], "made-after-failover")
	res := e.cli(t, s, "volume register", e.writeSpec(t, "vol-after-failover", fmt.Sprintf("external_id = %q", external)))
	must.Zero(t, res.Code, must.Sprint(res))
	e.checkServedByAClient(t, "ValidateVolumeCapabilities", external, codes.OK)

	// Only the crashed client was ever marked down, not even for a moment.
	var marked []string
	for name, log := range e.c.Logs(t) {
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "node missed its heartbeats") {
				marked = append(marked, name+": "+line)
			}
		}
	}
	must.SliceNotEmpty(t, marked, must.Sprint("the crashed client was marked down"))
	for _, line := range marked {
		must.StrContains(t, line, e.nodeIDs["c2"], must.Sprint("only the crashed client was marked down"))
	}
}

// crashServer kills victim (leader is the leader before) and watches
// the nodes: the clients attached to it move to another server, and no
// node shows down until well past the time a silent one would be marked
// down, counted from when the survivors know a leader.
func (e *clientEnv) crashServer(t *testing.T, pool *rpc.ConnPool, victim, leader Server) {
	t.Helper()
	// Every server has caught up with the nodes being ready, so that a
	// stale read during the watch below shows a node down only if it was
	// marked down since.
	var moving []string
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		moving = nil
		for _, cl := range e.clients {
			for _, s := range e.c.Running() {
				status, err := e.nodeStatusOn(s, cl.Name())
				if err == nil && status != structs.NodeStatusReady {
					err = fmt.Errorf("%s has node %s %s", s.Name(), cl.Name(), status)
				}
				if err != nil {
					return false, err
				}
			}
			attached, err := e.attachedTo(pool, cl.Name())
			if err != nil {
				return false, err
			}
			if slices.Contains(attached, victim) {
				moving = append(moving, cl.Name())
			}
		}
		return true, nil
	})
	role := "a follower"
	if victim == leader {
		role = "the leader"
	}
	t.Logf("crashing %s, %s, to which %v are attached", victim.Name(), role, moving)
	e.c.Kill(t, victim)
	killed := time.Now()

	var settled time.Time
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for _, cl := range e.clients {
			status, err := e.nodeStatus(cl.Name())
			if err != nil {
				return false, err
			}
			if status != structs.NodeStatusReady {
				t.Fatalf("node of %s is %s %s after %s was killed", cl.Name(), status,
					time.Since(killed).Round(time.Millisecond), victim.Name())
			}
		}
		if settled.IsZero() {
			for _, name := range moving {
				now, err := e.attachedTo(pool, name)
				if err != nil || len(now) == 0 {
					return false, fmt.Errorf("%s is not attached to a server: %v", name, err)
				}
			}
			var known string
			if err := getJSON(e.c.Running()[0].HTTPAddr()+"/v1/status/leader?stale", &known); err != nil {
				return false, err
			}
			if known == "" || known == victim.RPCAddr() {
				return false, fmt.Errorf("the survivors know no leader but %q", known)
			}
			settled = time.Now()
			t.Logf("%v attached elsewhere and leader %s known %s after the crash", moving, known,
				settled.Sub(killed).Round(time.Millisecond))
		}
		if left := clientDownAfter + clientHeartbeatTTL/2 - time.Since(settled); left > 0 {
			return false, fmt.Errorf("watching the nodes for %s more", left)
		}
		return true, nil
	})
}

// checkSecrets checks that no process logged a secret of the specs, nor
// the test's own CSI client, and that the storage system stored none.
func (e *clientEnv) checkSecrets(t *testing.T) {
	logs := e.c.Logs(t)
	for _, p := range e.plugins {
		must.MapContainsKey(t, logs, p.Name())
	}
	for _, cl := range e.clients {
		must.MapContainsKey(t, logs, cl.Name())
	}
	for name, log := range logs {
		noSecret(t, e.secret, "the log of "+name, log)
	}
	noSecret(t, e.secret, "the test's CSI client log", e.csiLog.String())
	err := filepath.WalkDir(e.stateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		noSecret(t, e.secret, path, string(b))
		return nil
	})
	must.NoError(t, err)
}
