package httpapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
	"github.com/volplane/volplane/structs"
)

func TestPluginList(t *testing.T) {
	be, h := newTestHandler(t)
	for _, q := range []string{"", "?type=csi", "?type=csi&prefix=nomad-"} {
		var stubs []*structs.CSIPluginListStub
		mustJSON(t, do(t, h, http.MethodGet, "/v1/plugins"+q, ""), &stubs)
		must.Len(t, 1, stubs)
		must.Eq(t, plug, stubs[0].ID)
		must.Eq(t, []int{1, 1, 1, 1}, []int{stubs[0].ControllersHealthy, stubs[0].ControllersExpected,
			stubs[0].NodesHealthy, stubs[0].NodesExpected})
	}
	must.Eq(t, "nomad-", be.call("CSIPlugin.List").(*structs.CSIPluginListRequest).Prefix)

	rec := do(t, h, http.MethodGet, "/v1/plugins?type=csi&prefix=zzz", "")
	must.Eq(t, "[]\n", rec.Body.String())
	mustError(t, do(t, h, http.MethodGet, "/v1/plugins?type=host", ""), http.StatusBadRequest, `unsupported plugin type "host"`)
}

func TestPluginGet(t *testing.T) {
	be, h := newTestHandler(t)
	var p structs.CSIPlugin
	mustJSON(t, do(t, h, http.MethodGet, "/v1/plugin/csi/"+plug+"?index=3", ""), &p)
	must.Eq(t, plug, p.ID)
	must.MapContainsKey(t, p.Controllers, httpapitest.CompatNodeID)
	must.MapContainsKey(t, p.Nodes, httpapitest.CompatNodeID)
	must.Eq(t, plug, be.call("CSIPlugin.Get").(*structs.CSIPluginGetRequest).ID)

	mustError(t, do(t, h, http.MethodGet, "/v1/plugin/csi/nope", ""), http.StatusNotFound, `plugin "nope" not found`)
}

func TestNodeList(t *testing.T) {
	be, h := newTestHandler(t)
	var stubs []*structs.NodeListStub
	mustJSON(t, do(t, h, http.MethodGet, "/v1/nodes?prefix=8f5b", ""), &stubs)
	must.Len(t, 1, stubs)
	must.Eq(t, httpapitest.CompatNodeID, stubs[0].ID)
	must.Eq(t, []string{plug}, stubs[0].CSINodePlugins)
	must.Eq(t, "8f5b", be.call("Node.List").(*structs.NodeListRequest).Prefix)

	rec := do(t, h, http.MethodGet, "/v1/nodes?prefix=zzz", "")
	must.Eq(t, "[]\n", rec.Body.String())
}

func TestNodeGet(t *testing.T) {
	_, h := newTestHandler(t)
	rec := do(t, h, http.MethodGet, "/v1/node/"+httpapitest.CompatNodeID, "")
	var n structs.Node
	mustJSON(t, rec, &n)
	must.Eq(t, httpapitest.CompatNodeID, n.ID)
	must.Eq(t, structs.NodeStatusReady, n.Status)
	must.True(t, n.CSINodePlugins[plug].Healthy)
	must.StrNotContains(t, rec.Body.String(), httpapitest.CompatNodeSecret)
	must.StrNotContains(t, rec.Body.String(), "SecretID")

	mustError(t, do(t, h, http.MethodGet, "/v1/node/nope", ""), http.StatusNotFound, `node "nope" not found`)
}

func TestStatus(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodGet, "/v1/status/leader", "")
	must.Eq(t, `"10.0.0.1:4647"`+"\n", rec.Body.String())
	must.Eq(t, "application/json", rec.Header().Get("Content-Type"))

	var peers []string
	mustJSON(t, do(t, h, http.MethodGet, "/v1/status/peers", ""), &peers)
	must.Eq(t, be.peers, peers)

	// No leader and no peers: an empty string and an empty array.
	be.leader, be.peers = "", nil
	must.Eq(t, `""`+"\n", do(t, h, http.MethodGet, "/v1/status/leader", "").Body.String())
	must.Eq(t, "[]\n", do(t, h, http.MethodGet, "/v1/status/peers", "").Body.String())
}

func TestRaftConfiguration(t *testing.T) {
	be, h := newTestHandler(t)
	var cfg structs.RaftConfigurationResponse
	mustJSON(t, do(t, h, http.MethodGet, "/v1/operator/raft/configuration?stale", ""), &cfg)
	must.Len(t, 3, cfg.Servers)
	must.True(t, cfg.Servers[0].Leader)
	must.Eq(t, "10.0.0.2:4647", cfg.Servers[1].Address)
	must.Eq(t, uint64(3), cfg.Index)
	must.True(t, be.call("Operator.RaftListPeers").(*structs.GenericRequest).AllowStale)

	be.peers = nil
	rec := do(t, h, http.MethodGet, "/v1/operator/raft/configuration", "")
	var raw map[string]json.RawMessage
	mustJSON(t, rec, &raw)
	must.Eq(t, "[]", string(raw["Servers"]))
}

func TestRaftRemovePeer(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodDelete, "/v1/operator/raft/peer?address=10.0.0.3:4647", "", "X-Nomad-Token", "tok")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, "4", rec.Header().Get("X-Nomad-Index"))
	must.Eq(t, "", rec.Body.String())
	must.Eq(t, &structs.RaftPeerRequest{
		Address: "10.0.0.3:4647", WriteRequest: structs.WriteRequest{AuthToken: "tok"},
	}, be.call("Operator.RaftRemovePeer").(*structs.RaftPeerRequest))

	rec = do(t, h, http.MethodDelete, "/v1/operator/raft/peer?id=id-10.0.0.2:4647", "")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, []string{"10.0.0.1:4647"}, be.peers)

	for _, q := range []string{"", "?id=", "?id=a&address=b"} {
		mustError(t, do(t, h, http.MethodDelete, "/v1/operator/raft/peer"+q, ""), http.StatusBadRequest,
			"exactly one of the id and address parameters")
	}
	mustError(t, do(t, h, http.MethodDelete, "/v1/operator/raft/peer?id=gone", ""), http.StatusNotFound, "gone")
}
