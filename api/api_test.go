package api

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// recorded is one request the fake agent received.
type recorded struct {
	Method, Path, Query, Token, Body string
}

// fakeAgent answers fixed routes with canned bodies and records every
// request, so tests can assert what the client sent.
type fakeAgent struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	routes map[string]func(w http.ResponseWriter)
}

func newFakeAgent(t *testing.T) *fakeAgent {
	f := &fakeAgent{t: t, routes: map[string]func(http.ResponseWriter){}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("X-Nomad-Token"), string(body)})
		h := f.routes[r.Method+" "+r.URL.EscapedPath()]
		f.mu.Unlock()
		if h == nil {
			http.Error(w, "no such route "+r.URL.Path, http.StatusNotFound)
			return
		}
		h(w)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAgent) json(route string, status int, body any, headers map[string]string) {
	f.routes[route] = func(w http.ResponseWriter) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		must.NoError(f.t, json.NewEncoder(w).Encode(body))
	}
}

func (f *fakeAgent) text(route string, status int, msg string) {
	f.routes[route] = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, msg)
	}
}

func (f *fakeAgent) last() recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	must.SliceNotEmpty(f.t, f.reqs)
	return f.reqs[len(f.reqs)-1]
}

func (f *fakeAgent) client(token string) *Client {
	c, err := NewClient(Config{Address: f.srv.URL, Token: token})
	must.NoError(f.t, err)
	return c
}

func TestVolumes_List(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volumes", 200, []*structs.CSIVolListStub{{ID: "v1", PluginID: "dev", CurrentReaders: 2}},
		map[string]string{"X-Nomad-Index": "42", "X-Nomad-KnownLeader": "true", "X-Nomad-LastContact": "15", "X-Nomad-NextToken": "v2"})

	vols, qm, err := f.client("secret").Volumes().List(&QueryOptions{
		Prefix: "v", PluginID: "dev", Namespace: "prod", PerPage: 1, WaitIndex: 7, WaitTime: 2 * time.Second, AllowStale: true,
	})
	must.NoError(t, err)
	must.Len(t, 1, vols)
	must.Eq(t, "v1", vols[0].ID)
	must.Eq(t, 2, vols[0].CurrentReaders)
	must.Eq(t, uint64(42), qm.LastIndex)
	must.True(t, qm.KnownLeader)
	must.Eq(t, 15*time.Millisecond, qm.LastContact)
	must.Eq(t, "v2", qm.NextToken)

	req := f.last()
	must.Eq(t, "GET", req.Method)
	must.Eq(t, "/v1/volumes", req.Path)
	must.Eq(t, "index=7&namespace=prod&per_page=1&plugin_id=dev&prefix=v&stale=true&type=csi&wait=2000ms", req.Query)
	must.Eq(t, "secret", req.Token)
}

func TestVolumes_InfoAndNotFound(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/v1", 200, &structs.CSIVolume{ID: "v1", PluginID: "dev",
		WriteClaims: map[string]*structs.CSIVolumeClaim{"a1": {AllocationID: "a1", Mode: structs.CSIVolumeClaimWrite}}},
		map[string]string{"X-Nomad-Index": "9"})
	f.text("GET /v1/volume/csi/missing", 404, "volume \"missing\" not found\n")

	c := f.client("")
	vol, qm, err := c.Volumes().Info("v1", nil)
	must.NoError(t, err)
	must.Eq(t, "v1", vol.ID)
	must.Eq(t, structs.CSIVolumeClaimWrite, vol.WriteClaims["a1"].Mode)
	must.Eq(t, uint64(9), qm.LastIndex)
	must.Eq(t, "", f.last().Token)

	_, _, err = c.Volumes().Info("missing", nil)
	var se *StatusError
	must.True(t, errors.As(err, &se))
	must.Eq(t, 404, se.Code)
	must.Eq(t, `volume "missing" not found`, err.Error())
	must.True(t, IsNotFound(err))
}

func TestVolumes_IDIsEscaped(t *testing.T) {
	f := newFakeAgent(t)
	_, _, err := f.client("").Volumes().Info("a b", nil)
	must.Error(t, err)
	must.Eq(t, "/v1/volume/csi/a%20b", f.last().Path)
}

func TestVolumes_Register(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/volume/csi/v1", 200, map[string]any{"Warnings": "first\nsecond\n", "Index": 12},
		map[string]string{"X-Nomad-Index": "12"})

	vol := &structs.CSIVolume{ID: "v1", PluginID: "dev", Secrets: structs.CSISecrets{"k": "s"}}
	warnings, wm, err := f.client("tok").Volumes().Register([]*structs.CSIVolume{vol}, &WriteOptions{Namespace: "prod"})
	must.NoError(t, err)
	must.Eq(t, []string{"first", "second"}, warnings)
	must.Eq(t, uint64(12), wm.LastIndex)

	req := f.last()
	must.Eq(t, "PUT", req.Method)
	must.Eq(t, "/v1/volume/csi/v1", req.Path)
	must.Eq(t, "namespace=prod", req.Query)
	must.Eq(t, "tok", req.Token)
	// Exactly {"Volumes":[...]}: the server refuses any other field.
	var body map[string][]map[string]any
	must.NoError(t, json.Unmarshal([]byte(req.Body), &body))
	must.MapLen(t, 1, body)
	must.Len(t, 1, body["Volumes"])
	must.Eq(t, "v1", body["Volumes"][0]["ID"])
	must.Eq[any](t, map[string]any{"k": "s"}, body["Volumes"][0]["Secrets"])

	_, _, err = f.client("").Volumes().Register(nil, nil)
	must.ErrorContains(t, err, "no volume to register")
}

func TestVolumes_Deregister(t *testing.T) {
	f := newFakeAgent(t)
	f.json("DELETE /v1/volume/csi/v1", 200, map[string]any{"Warnings": []string{"forced"}}, nil)
	f.text("DELETE /v1/volume/csi/busy", 409, `volume "busy" is in use`)
	c := f.client("")

	warnings, _, err := c.Volumes().Deregister("v1", true, nil)
	must.NoError(t, err)
	must.Eq(t, []string{"forced"}, warnings)
	must.Eq(t, "DELETE", f.last().Method)
	must.Eq(t, "force=true", f.last().Query)

	_, _, err = c.Volumes().Deregister("busy", false, nil)
	must.EqError(t, err, `volume "busy" is in use`)
	must.Eq(t, "", f.last().Query)
}

func TestPluginsNodesStatusOperator(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/plugins", 200, []*structs.CSIPluginListStub{{ID: "dev", NodesHealthy: 1}}, nil)
	f.json("GET /v1/plugin/csi/dev", 200, &structs.CSIPlugin{ID: "dev",
		Nodes: map[string]*structs.CSIInfo{"n1": {PluginID: "dev", Healthy: true}}}, nil)
	f.json("GET /v1/nodes", 200, []*structs.NodeListStub{{ID: "n1", Status: "ready"}}, nil)
	f.json("GET /v1/node/n1", 200, map[string]any{"ID": "n1", "Name": "one", "SecretID": "ignored"}, nil)
	f.json("GET /v1/status/leader", 200, "10.0.0.1:4647", nil)
	f.json("GET /v1/status/peers", 200, []string{"10.0.0.1:4647", "10.0.0.2:4647"}, nil)
	f.json("GET /v1/operator/raft/configuration", 200, &structs.RaftConfigurationResponse{
		Servers: []*structs.RaftServer{{ID: "s1", Leader: true, Voter: true}}, Index: 3}, nil)
	f.routes["DELETE /v1/operator/raft/peer"] = func(w http.ResponseWriter) { w.WriteHeader(200) }
	c := f.client("")

	plugins, _, err := c.Plugins().List(nil)
	must.NoError(t, err)
	must.Eq(t, "dev", plugins[0].ID)
	must.Eq(t, "type=csi", f.last().Query)

	plugin, _, err := c.Plugins().Info("dev", nil)
	must.NoError(t, err)
	must.True(t, plugin.Nodes["n1"].Healthy)

	nodes, _, err := c.Nodes().List(&QueryOptions{Prefix: "n"})
	must.NoError(t, err)
	must.Eq(t, "ready", nodes[0].Status)
	must.Eq(t, "prefix=n", f.last().Query)

	node, _, err := c.Nodes().Info("n1", nil)
	must.NoError(t, err)
	must.Eq(t, "one", node.Name)
	must.Eq(t, "", node.SecretID)

	leader, err := c.Status().Leader()
	must.NoError(t, err)
	must.Eq(t, "10.0.0.1:4647", leader)
	peers, err := c.Status().Peers()
	must.NoError(t, err)
	must.Len(t, 2, peers)

	cfg, err := c.Operator().RaftGetConfiguration(nil)
	must.NoError(t, err)
	must.Eq(t, "s1", cfg.Servers[0].ID)

	must.NoError(t, c.Operator().RaftRemovePeerByID("s2", nil))
	must.Eq(t, recorded{Method: "DELETE", Path: "/v1/operator/raft/peer", Query: "id=s2"}, f.last())
	must.NoError(t, c.Operator().RaftRemovePeerByAddress("10.0.0.2:4647", nil))
	must.Eq(t, "address=10.0.0.2%3A4647", f.last().Query)
	must.ErrorContains(t, c.Operator().RaftRemovePeerByID("", nil), "missing peer id")
}

func TestStatusError_EmptyBody(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/status/leader", 503, "")
	_, err := f.client("").Status().Leader()
	var se *StatusError
	must.True(t, errors.As(err, &se))
	must.Eq(t, 503, se.Code)
	must.Eq(t, "503 Service Unavailable", se.Error())
}

func TestConnectionRefused(t *testing.T) {
	// Take a free port and close it again, so nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	addr := l.Addr().String()
	must.NoError(t, l.Close())

	c, err := NewClient(Config{Address: addr})
	must.NoError(t, err)
	_, _, err = c.Volumes().List(nil)
	must.EqError(t, err, "could not reach a volplane agent at http://"+addr+": connection refused")
	var ce *ConnectError
	must.True(t, errors.As(err, &ce))
}

func TestNewClient_Address(t *testing.T) {
	t.Setenv(EnvAddress, "")
	must.Eq(t, LocalAddress, DefaultAddress())
	c, err := NewClient(Config{})
	must.NoError(t, err)
	must.Eq(t, LocalAddress, c.Address())

	t.Setenv(EnvAddress, "https://vp.example:8646/")
	must.Eq(t, "https://vp.example:8646/", DefaultAddress())
	c, err = NewClient(Config{})
	must.NoError(t, err)
	must.Eq(t, "https://vp.example:8646", c.Address())

	c, err = NewClient(Config{Address: "10.1.2.3:4646"})
	must.NoError(t, err)
	must.Eq(t, "http://10.1.2.3:4646", c.Address())

	_, err = NewClient(Config{Address: "ftp://x:1"})
	must.ErrorContains(t, err, "scheme must be http or https")
	_, err = NewClient(Config{Address: "http://"})
	must.ErrorContains(t, err, "missing host")
}
