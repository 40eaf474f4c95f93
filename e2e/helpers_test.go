package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// newSecret returns a value no agent could print by accident: finding it in
// an output means a secret leaked.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, err := rand.Read(b)
	must.NoError(t, err)
	return "e2e-secret-" + hex.EncodeToString(b)
}

// noSecret fails the test when text shows the secret.
func noSecret(t *testing.T, secret, what, text string) {
	t.Helper()
	if strings.Contains(text, secret) {
		t.Fatalf("%s shows the secret %q:\n%s", what, secret, text)
	}
}

// writeVolumeSpec writes the HCL specification of a single-node-writer
// file-system volume of the plugin "dev", whose secret token is
// secret+"-"+id, and returns its path.
func writeVolumeSpec(t *testing.T, dir, id, secret string) string {
	t.Helper()
	spec := fmt.Sprintf(`# written by the e2e tests
id          = %q
name        = %q
type        = "csi"
plugin_id   = "dev"
external_id = %q

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

secrets {
  token = %q
}
`, id, "name-"+id, "ext-"+id, secret+"-"+id)
	return writeFile(t, dir, id+".hcl", spec)
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	must.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

// registerNodes registers n client nodes, each running a healthy monolith
// instance of plugin, over the RPC port of s, as client agents do, and keeps
// them alive with heartbeats until the test ends.
func registerNodes(t *testing.T, c Cluster, s Server, n int, plugin string) []*structs.Node {
	t.Helper()
	pool := rpc.NewPool(rpc.PoolConfig{CallTimeout: requestTimeout})
	defer pool.Close()
	var nodes []*structs.Node
	for range n {
		node := mock.Node(plugin)
		var resp structs.NodeUpdateResponse
		err := pool.RPC(s.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: node}, &resp)
		must.NoError(t, err, must.Sprintf("registering node %s through %s", node.ID, s.Name()))
		must.Positive(t, resp.Index)
		must.SliceContains(t, resp.Servers, s.RPCAddr(), must.Sprint("the reply lists the servers for failover"))
		nodes = append(nodes, node)
	}
	heartbeat(t, c, nodes)
	return nodes
}

// heartbeatInterval is well within the servers' heartbeat TTL (10s), past
// which the leader would mark the nodes down and their plugin unhealthy.
const heartbeatInterval = 2 * time.Second

// heartbeat sends the nodes' heartbeats to a running server, as their client
// agents would, until the test ends.
func heartbeat(t *testing.T, c Cluster, nodes []*structs.Node) {
	// Short calls: a server may be paused between the choice and the call.
	pool := rpc.NewPool(rpc.PoolConfig{CallTimeout: 2 * time.Second})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(heartbeatInterval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, n := range nodes {
				req := &structs.NodeUpdateStatusRequest{NodeID: n.ID, SecretID: n.SecretID, Status: structs.NodeStatusReady}
				var errs []string
				for _, s := range c.Running() {
					var resp structs.NodeUpdateResponse
					err := pool.RPC(s.RPCAddr(), "Node.UpdateStatus", req, &resp)
					if err == nil {
						errs = nil
						break
					}
					errs = append(errs, s.Name()+": "+err.Error())
				}
				if errs != nil {
					t.Logf("heartbeat of node %s failed: %s", n.ID, strings.Join(errs, "; "))
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		pool.Close()
	})
}

// checkPluginHealthy checks, with a consistent read through s, that plugin
// has n healthy node instances. The test nodes run node-only instances (no
// controller), since no agent of theirs answers controller calls.
func checkPluginHealthy(t *testing.T, s Server, plugin string, n int) {
	t.Helper()
	var p structs.CSIPlugin
	must.NoError(t, getJSON(s.HTTPAddr()+"/v1/plugin/csi/"+plugin, &p))
	must.Eq(t, plugin, p.ID)
	must.False(t, p.ControllerRequired)
	must.Eq(t, n, p.NodesHealthy, must.Sprint("healthy nodes"))
	must.Eq(t, n, p.NodesExpected, must.Sprint("expected nodes"))
}

// checkVolume checks that got is the volume writeVolumeSpec described for
// id, read back without its secrets.
func checkVolume(t *testing.T, what, id string, got *structs.CSIVolume) {
	t.Helper()
	must.NotNil(t, got, must.Sprint(what))
	must.Eq(t, id, got.ID, must.Sprint(what))
	must.Eq(t, structs.DefaultNamespace, got.Namespace, must.Sprint(what))
	must.Eq(t, "name-"+id, got.Name, must.Sprint(what))
	must.Eq(t, "ext-"+id, got.ExternalID, must.Sprint(what))
	must.Eq(t, "dev", got.PluginID, must.Sprint(what))
	must.Eq(t, "dev.csi.volplane.io", got.Provider, must.Sprint(what))
	must.Eq(t, []*structs.CSIVolumeCapability{{
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}}, got.RequestedCapabilities, must.Sprint(what))
	must.MapEmpty(t, got.Secrets, must.Sprintf("%s: secrets must never leave the servers", what))
	must.True(t, got.Schedulable, must.Sprintf("%s: the plugin is healthy, so the volume is schedulable", what))
}

// getVolume reads one volume over HTTP from s, checking that the answer
// shows no secret.
func getVolume(t *testing.T, s Server, id, query, secret string) *structs.CSIVolume {
	t.Helper()
	url := s.HTTPAddr() + "/v1/volume/csi/" + id + query
	res, err := doHTTP(http.MethodGet, url, nil)
	must.NoError(t, err)
	noSecret(t, secret, "GET "+url, string(res.Body))
	must.Eq(t, http.StatusOK, res.Status, must.Sprintf("GET %s: %s", url, res.Body))
	var vol structs.CSIVolume
	must.NoError(t, decodeJSON(res.Body, &vol))
	return &vol
}

// waitVolume waits until s serves the volume from its own state (a stale
// read: s has caught up with the write) and returns it.
func waitVolume(t *testing.T, s Server, id, secret string) *structs.CSIVolume {
	t.Helper()
	url := s.HTTPAddr() + "/v1/volume/csi/" + id + "?stale"
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		res, err := doHTTP(http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		if res.Status != http.StatusOK {
			return false, fmt.Errorf("%s has not caught up: GET %s: %d %s", s.Name(), url, res.Status, res.Body)
		}
		return true, nil
	})
	return getVolume(t, s, id, "?stale", secret)
}

// volumeList reads GET /v1/volumes from s and returns the volume IDs and
// the X-Nomad-Index of the answer.
func volumeList(t *testing.T, s Server, query string) ([]string, uint64) {
	t.Helper()
	url := s.HTTPAddr() + "/v1/volumes" + query
	res, err := doHTTP(http.MethodGet, url, nil)
	must.NoError(t, err)
	must.Eq(t, http.StatusOK, res.Status, must.Sprintf("GET %s: %s", url, res.Body))
	var stubs []*structs.CSIVolListStub
	must.NoError(t, decodeJSON(res.Body, &stubs))
	ids := make([]string, 0, len(stubs))
	for _, v := range stubs {
		ids = append(ids, v.ID)
	}
	index, err := strconv.ParseUint(res.Header.Get("X-Nomad-Index"), 10, 64)
	must.NoError(t, err, must.Sprintf("GET %s: X-Nomad-Index", url))
	return ids, index
}

// tableRows splits the rows of a table the CLI printed into their fields,
// without the header line. Fields must not contain spaces.
func tableRows(out string) [][]string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rows [][]string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			// The table ends at the first blank line; a note may follow
			// (the cluster's security, under node status and list-peers).
			break
		}
		rows = append(rows, f)
	}
	return rows
}
