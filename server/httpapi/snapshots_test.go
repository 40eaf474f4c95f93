package httpapi

import (
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
	"github.com/volplane/volplane/structs"
)

// TestSnapshots_SecretsInAndNeverOut: a snapshot's secrets reach the server
// from the body, and from X-Nomad-CSI-Secrets for keys the body lacks; the
// answer never holds them, nor the name or parameters of the creation.
func TestSnapshots_SecretsInAndNeverOut(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodPut, "/v1/volumes/snapshot",
		`{"Snapshots":[{"SourceVolumeID":"vol1","Name":"n","Secrets":{"a":"body-secret-1"},"Parameters":{"k":"v"},"SizeBytes":7}],"Namespace":"default"}`,
		"X-Nomad-CSI-Secrets", "a=header-secret-1,b=header-secret-2")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	for _, secret := range []string{"body-secret-1", "header-secret-1", "header-secret-2", `"Name"`, `"Parameters"`} {
		must.StrNotContains(t, rec.Body.String(), secret)
	}
	args := be.call("CSIVolume.CreateSnapshot").(*structs.CSISnapshotCreateRequest)
	must.Len(t, 1, args.Snapshots)
	must.Eq(t, structs.CSISecrets{"a": "body-secret-1", "b": "header-secret-2"}, args.Snapshots[0].Secrets)
	must.Eq(t, map[string]string{"k": "v"}, args.Snapshots[0].Parameters)
	must.Zero(t, args.Snapshots[0].SizeBytes, must.Sprint("what the plugin says is not taken from a request"))
}

// TestSnapshots_BadInput: what the routes refuse before any call.
func TestSnapshots_BadInput(t *testing.T) {
	_, h := newTestHandler(t)
	for _, tc := range []struct{ method, path, body, want string }{
		{http.MethodPut, "/v1/volumes/snapshot", `{"Snapshots":[]}`, "no snapshots"},
		{http.MethodPut, "/v1/volumes/snapshot", `{"Snapshots":[null]}`, "snapshot 1 in the body is null"},
		{http.MethodPut, "/v1/volumes/snapshot", `{"Snapshot":[{}]}`, "unknown field"},
		{http.MethodDelete, "/v1/volumes/snapshot?plugin_id=p", "", "snapshot_id"},
		{http.MethodDelete, "/v1/volumes/snapshot?snapshot_id=s", "", "plugin_id"},
		{http.MethodGet, "/v1/volumes/snapshot?plugin_id=" + httpapitest.CompatPluginID + "&per_page=-1", "", "per_page"},
		{http.MethodGet, "/v1/volumes/external?plugin_id=" + httpapitest.CompatPluginID + "&per_page=x", "", "per_page"},
	} {
		rec := do(t, h, tc.method, tc.path, tc.body)
		mustError(t, rec, http.StatusBadRequest, tc.want)
	}
	rec := do(t, h, http.MethodDelete, "/v1/volumes/snapshot?plugin_id=p&snapshot_id=s", "", "X-Nomad-CSI-Secrets", "novalue")
	mustError(t, rec, http.StatusBadRequest, "X-Nomad-CSI-Secrets")
}

// TestSystemGC answers what was collected, with the write's index.
func TestSystemGC(t *testing.T) {
	_, h := newTestHandler(t)
	rec := do(t, h, http.MethodPut, "/v1/system/gc", "{}")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.StrContains(t, rec.Body.String(), `"Nodes":[]`)
	must.NotEq(t, "", rec.Header().Get("X-Nomad-Index"))
	must.Eq(t, http.StatusMethodNotAllowed, do(t, h, http.MethodGet, "/v1/system/gc", "").Code)
}
