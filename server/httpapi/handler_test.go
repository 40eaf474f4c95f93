package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
	"github.com/volplane/volplane/structs"
)

// Secrets seeded into the fake's state; no response may contain them.
const (
	testVolSecret     = "vol-secret-value-91c3"
	testFlagSecret    = "password=flag-secret-4be0"
	testPublishSecret = "publish-secret-0d7a"
)

// newTestHandler returns a handler over a fake backend that holds the
// compatibility fixture's node and plugin, and one claimed volume full of
// secrets.
func newTestHandler(t *testing.T) (*fakeBackend, http.Handler) {
	t.Helper()
	be := newFakeBackend()
	be.upsertNode(httpapitest.NewFixture().Node)
	be.mu.Lock()
	be.index++
	be.volumes[volKey("default", "vol1")] = &structs.CSIVolume{
		ID: "vol1", Namespace: "default", Name: "one", PluginID: httpapitest.CompatPluginID,
		RequestedCapabilities: []*structs.CSIVolumeCapability{{
			AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		}},
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		MountOptions:   &structs.CSIMountOptions{FSType: "xfs", MountFlags: []string{testFlagSecret}},
		Secrets:        structs.CSISecrets{"key": testVolSecret},
		WriteClaims: map[string]*structs.CSIVolumeClaim{"alloc1": {
			AllocationID: "alloc1", NodeID: httpapitest.CompatNodeID, Mode: structs.CSIVolumeClaimWrite,
			AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
			PublishContext: map[string]string{"token": testPublishSecret},
		}},
		CreateIndex: be.index, ModifyIndex: be.index,
	}
	be.mu.Unlock()
	return be, NewHandler(Config{Backend: be})
}

// do serves one request in process and returns the recorded answer.
func do(t *testing.T, h http.Handler, method, target, body string, headers ...string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// mustJSON asserts a 200 JSON answer and decodes it into out.
func mustJSON(t *testing.T, rec *httptest.ResponseRecorder, out any) {
	t.Helper()
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, "application/json", rec.Header().Get("Content-Type"))
	must.NoError(t, json.Unmarshal(rec.Body.Bytes(), out))
}

// mustError asserts a plain-text error answer with the given status whose
// body contains want.
func mustError(t *testing.T, rec *httptest.ResponseRecorder, status int, want string) {
	t.Helper()
	must.Eq(t, status, rec.Code, must.Sprint(rec.Body.String()))
	must.StrHasPrefix(t, "text/plain", rec.Header().Get("Content-Type"))
	must.StrContains(t, rec.Body.String(), want)
}

func TestNewHandler_NilBackendPanics(t *testing.T) {
	defer func() { must.NotNil(t, recover()) }()
	NewHandler(Config{})
}

func TestRoutes_UnknownPathIs404(t *testing.T) {
	_, h := newTestHandler(t)
	// "/" is not among them: it sends browsers to the UI (TestUI_Served).
	for _, p := range []string{
		"/v1", "/v1/volume", "/v1/volume/csi/", "/v1/volume/csi/vol1/extra",
		"/v1/volume/host/vol1", "/v1/volumes/other", "/v1/plugin/csi/", "/v1/node/",
		"/v1/job", "/v1/job/", "/v1/job/j/versions", "/v1/allocation/", "/v1/status", "/v1/operator/raft",
	} {
		rec := do(t, h, http.MethodGet, p, "")
		must.Eq(t, http.StatusNotFound, rec.Code, must.Sprint(p))
	}
}

func TestRoutes_WrongMethodIs405WithAllow(t *testing.T) {
	_, h := newTestHandler(t)
	cases := []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/volumes", "GET, HEAD"},
		{http.MethodPatch, "/v1/volume/csi/vol1", "DELETE, GET, HEAD, POST, PUT"},
		{http.MethodDelete, "/v1/plugin/csi/p", "GET, HEAD"},
		{http.MethodPut, "/v1/nodes", "GET, HEAD"},
		{http.MethodDelete, "/v1/node/n", "GET, HEAD"},
		{http.MethodPut, "/v1/status/leader", "GET, HEAD"},
		{http.MethodPost, "/v1/status/peers", "GET, HEAD"},
		{http.MethodDelete, "/v1/operator/raft/configuration", "GET, HEAD"},
		{http.MethodGet, "/v1/operator/raft/peer", "DELETE"},
		{http.MethodDelete, "/v1/jobs", "GET, HEAD, POST, PUT"},
		{http.MethodPatch, "/v1/job/j", "DELETE, GET, HEAD, POST, PUT"},
		{http.MethodPost, "/v1/job/j/allocations", "GET, HEAD"},
		{http.MethodPut, "/v1/allocations", "GET, HEAD"},
		{http.MethodDelete, "/v1/allocation/a", "GET, HEAD"},
	}
	for _, tc := range cases {
		rec := do(t, h, tc.method, tc.path, "")
		must.Eq(t, http.StatusMethodNotAllowed, rec.Code, must.Sprint(tc.method, " ", tc.path))
		must.Eq(t, tc.allow, rec.Header().Get("Allow"), must.Sprint(tc.method, " ", tc.path))
	}
}

func TestErrors_CodeToStatus(t *testing.T) {
	cases := []struct {
		code   structs.ErrorCode
		status int
	}{
		{structs.ErrCodeInvalid, http.StatusBadRequest},
		{structs.ErrCodeTooLarge, http.StatusRequestEntityTooLarge},
		{structs.ErrCodeNotFound, http.StatusNotFound},
		{structs.ErrCodeConflict, http.StatusConflict},
		{structs.ErrCodeMaxClaims, http.StatusConflict},
		{structs.ErrCodeUnschedulable, http.StatusConflict},
		{structs.ErrCodePermissionDenied, http.StatusForbidden},
		{structs.ErrCodeNoLeader, http.StatusServiceUnavailable},
		{structs.ErrCodeInternal, http.StatusInternalServerError},
		{structs.ErrCodeRetryable, http.StatusInternalServerError},
		{structs.ErrCodeNoNodeConn, http.StatusInternalServerError},
		{structs.ErrorCode("made-up"), http.StatusInternalServerError},
	}
	for _, tc := range cases {
		t.Run(string(tc.code), func(t *testing.T) {
			be, h := newTestHandler(t)
			msg := "the message for " + string(tc.code)
			be.failWith("CSIVolume.Get", structs.Wrap(&structs.Error{Code: tc.code, Message: msg}, "wrapped"))
			rec := do(t, h, http.MethodGet, "/v1/volume/csi/vol1", "")
			must.Eq(t, tc.status, rec.Code)
			must.Eq(t, "text/plain; charset=utf-8", rec.Header().Get("Content-Type"))
			// The body is the message alone, without the "code: " prefix.
			must.Eq(t, "wrapped: "+msg, rec.Body.String())
			must.Eq(t, "", rec.Header().Get("X-Nomad-Index"))
		})
	}
	t.Run("untyped error", func(t *testing.T) {
		be, h := newTestHandler(t)
		be.failWith("Node.List", errors.New("disk on fire"))
		mustError(t, do(t, h, http.MethodGet, "/v1/nodes", ""), http.StatusInternalServerError, "disk on fire")
	})
}

func TestErrors_EveryRoutePassesBackendErrorsThrough(t *testing.T) {
	routes := []struct{ rpc, method, path, body string }{
		{"CSIVolume.List", http.MethodGet, "/v1/volumes", ""},
		{"CSIVolume.Get", http.MethodGet, "/v1/volume/csi/vol1", ""},
		{"CSIVolume.Register", http.MethodPut, "/v1/volume/csi/vol1", `{"Volumes":[{"ID":"vol1"}]}`},
		{"CSIVolume.Deregister", http.MethodDelete, "/v1/volume/csi/vol1", ""},
		{"CSIPlugin.List", http.MethodGet, "/v1/plugins", ""},
		{"CSIPlugin.Get", http.MethodGet, "/v1/plugin/csi/p", ""},
		{"Node.List", http.MethodGet, "/v1/nodes", ""},
		{"Node.GetNode", http.MethodGet, "/v1/node/n", ""},
		{"Node.UpdateDrain", http.MethodPut, "/v1/node/n/drain", `{"DrainSpec":{"Deadline":60000000000}}`},
		{"Node.UpdateEligibility", http.MethodPut, "/v1/node/n/eligibility", `{"Eligibility":"ineligible"}`},
		{"Status.Leader", http.MethodGet, "/v1/status/leader", ""},
		{"Status.Peers", http.MethodGet, "/v1/status/peers", ""},
		{"Operator.RaftListPeers", http.MethodGet, "/v1/operator/raft/configuration", ""},
		{"Operator.RaftRemovePeer", http.MethodDelete, "/v1/operator/raft/peer?id=x", ""},
		{"Job.Register", http.MethodPut, "/v1/jobs", `{"Job":{"ID":"j"}}`},
		{"Job.Register", http.MethodPost, "/v1/job/j", `{"Job":{"ID":"j"}}`},
		{"Job.Deregister", http.MethodDelete, "/v1/job/j", ""},
		{"Job.List", http.MethodGet, "/v1/jobs", ""},
		{"Job.GetJob", http.MethodGet, "/v1/job/j", ""},
		{"Job.Allocations", http.MethodGet, "/v1/job/j/allocations", ""},
		{"Alloc.List", http.MethodGet, "/v1/allocations", ""},
		{"Alloc.GetAlloc", http.MethodGet, "/v1/allocation/a", ""},
	}
	for _, rt := range routes {
		be, h := newTestHandler(t)
		be.failWith(rt.rpc, structs.ErrNoLeader)
		rec := do(t, h, rt.method, rt.path, rt.body)
		mustError(t, rec, http.StatusServiceUnavailable, "no cluster leader")
		must.Eq(t, "", rec.Header().Get("X-Nomad-Index"), must.Sprint(rt.rpc))
		must.NotNil(t, be.call(rt.rpc), must.Sprint(rt.rpc))
	}
}

func TestLogging_DebugLineWithoutBodyOrQuery(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug, JSONFormat: true})
	be := newFakeBackend()
	be.upsertNode(httpapitest.NewFixture().Node)
	h := NewHandler(Config{Backend: be, Logger: logger})

	body := `{"Volumes":[{"ID":"v9","PluginID":"` + httpapitest.CompatPluginID + `","Secrets":{"k":"` + testVolSecret + `"},` +
		`"RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}]}]}`
	rec := do(t, h, http.MethodPut, "/v1/volume/csi/v9?namespace=secret-ns", body, "X-Nomad-Token", "tok-secret")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))

	var line map[string]any
	must.NoError(t, json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line))
	must.Eq[any](t, "debug", line["@level"])
	must.Eq[any](t, "PUT", line["method"])
	must.Eq[any](t, "/v1/volume/csi/v9", line["path"])
	must.Eq[any](t, float64(http.StatusOK), line["status"])
	must.MapContainsKey(t, line, "duration")
	for _, s := range []string{testVolSecret, "tok-secret", "secret-ns"} {
		must.StrNotContains(t, buf.String(), s)
	}
}

type panicBackend struct{}

func (panicBackend) RPC(string, any, any) error { panic("boom") }

func TestPanicBecomes500(t *testing.T) {
	h := NewHandler(Config{Backend: panicBackend{}})
	mustError(t, do(t, h, http.MethodGet, "/v1/nodes", ""), http.StatusInternalServerError, "internal error")
}

func TestPrettyJSON(t *testing.T) {
	_, h := newTestHandler(t)
	rec := do(t, h, http.MethodGet, "/v1/status/peers?pretty", "")
	must.Eq(t, http.StatusOK, rec.Code)
	must.StrContains(t, rec.Body.String(), "[\n    \"10.0.0.1:4647\"")
}
