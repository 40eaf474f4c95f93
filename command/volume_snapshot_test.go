package command

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// secretsSeen answers route with body, recording the X-Nomad-CSI-Secrets
// header of each request.
func (f *fakeAgent) secretsSeen(route string, body any) func() []string {
	var mu sync.Mutex
	var seen []string
	f.routes[route] = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Nomad-CSI-Secrets"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Nomad-Index", "12")
		must.NoError(f.t, json.NewEncoder(w).Encode(body))
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestVolumeSnapshotCreate(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/volumes/snapshot", 200, map[string]any{"Snapshots": []*structs.CSISnapshot{{
		ID: "snap-1", SourceVolumeID: "data", ExternalSourceVolumeID: "ext-data", SizeBytes: 1 << 30, CreateTime: 1700000000, IsReady: true,
	}}})
	r := run(t, "", "volume", "snapshot", "create", "-secret", "token=s3cret", "-parameter", "kind=full", "data", "nightly")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "snap-1")
	must.StrContains(t, r.out, "ext-data")
	must.StrContains(t, r.out, "1 GiB")
	must.StrNotContains(t, r.out, "s3cret")
	var body struct{ Snapshots []*structs.CSISnapshot }
	must.NoError(t, json.Unmarshal([]byte(f.requests()[0].Body), &body))
	must.Eq(t, []*structs.CSISnapshot{{SourceVolumeID: "data", Name: "nightly",
		Secrets: structs.CSISecrets{"token": "s3cret"}, Parameters: map[string]string{"kind": "full"}}}, body.Snapshots)

	r = run(t, "", "volume", "snapshot", "create")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "<volume id> [snapshot name]")
	r = run(t, "", "volume", "snapshot", "create", "-secret", "novalue", "data")
	must.Eq(t, 1, r.code)

	f.text("PUT /v1/volumes/snapshot", 400, `plugin "dev" cannot create snapshots: its controller does not advertise the CREATE_DELETE_SNAPSHOT capability`)
	r = run(t, "", "volume", "snapshot", "create", "data")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Error snapshotting volume: plugin \"dev\" cannot create snapshots")
}

func TestVolumeSnapshotList(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/plugins", 200, []*structs.CSIPluginListStub{{ID: "dev"}, {ID: "other"}})
	secrets := f.secretsSeen("GET /v1/volumes/snapshot", map[string]any{
		"Snapshots": []*structs.CSISnapshot{{ID: "snap-1", SourceVolumeID: "data", ExternalSourceVolumeID: "ext-data", IsReady: true}},
		"NextToken": "pos:1",
	})
	r := run(t, "", "volume", "snapshot", "list", "-plugin", "de", "-per-page", "1", "-secret", "k=v")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "snap-1")
	must.StrContains(t, r.out, "-page-token pos:1")
	q, err := url.ParseQuery(f.requests()[1].Query)
	must.NoError(t, err)
	must.Eq(t, "dev", q.Get("plugin_id"))
	must.Eq(t, "1", q.Get("per_page"))
	must.Eq(t, []string{"k=v"}, secrets())

	r = run(t, "", "volume", "snapshot", "list")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "several CSI plugins (dev, other)")
	r = run(t, "", "volume", "snapshot", "list", "-plugin", "nope")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, `no CSI plugin with ID or prefix "nope"`)
}

func TestVolumeSnapshotDelete(t *testing.T) {
	f := newFakeAgent(t)
	secrets := f.secretsSeen("DELETE /v1/volumes/snapshot", nil)
	r := run(t, "", "volume", "snapshot", "delete", "-secret", "a=b", "dev", "snap-1")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `Deleted snapshot "snap-1" of plugin "dev"`)
	q, err := url.ParseQuery(f.requests()[0].Query)
	must.NoError(t, err)
	must.Eq(t, "dev", q.Get("plugin_id"))
	must.Eq(t, "snap-1", q.Get("snapshot_id"))
	must.Eq(t, []string{"a=b"}, secrets())
	must.Eq(t, 1, run(t, "", "volume", "snapshot", "delete", "dev").code)
}

func TestSystemGC(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/system/gc", 200, map[string]any{"Nodes": []string{"n1"}, "Plugins": []string{},
		"Waiting": []string{`node "n2" still has claims being released: default/vol (allocation a1)`}, "Index": 12})
	r := run(t, "", "system", "gc")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Removed 1 nodes (n1) and 0 plugins")
	must.StrContains(t, r.stderr, `Kept: node "n2" still has claims being released`)
	must.Eq(t, 1, run(t, "", "system", "gc", "extra").code)
}

func TestVolumeStatus_External(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volumes", 200, []*structs.CSIVolListStub{{ID: "data", PluginID: "dev"}})
	f.json("GET /v1/volumes/external", 200, map[string]any{"Volumes": []*structs.CSIVolumeExternalStub{
		{ExternalID: "ext-data", CapacityBytes: 1 << 30, VolumeID: "data", Namespace: "default", PublishedExternalNodeIDs: []string{"node-a"}},
		{ExternalID: "ext-stray", SnapshotID: "snap-1"},
	}})
	r := run(t, "", "volume", "status", "-type", "csi", "-plugin_id", "dev", "-verbose")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "External Volumes of plugin dev")
	must.StrContains(t, r.out, "ext-data     default/data   1 GiB     <none>           node-a")
	must.StrContains(t, r.out, "ext-stray    <none>         <none>    snapshot snap-1  <none>")
	reqs := f.requests()
	q, err := url.ParseQuery(reqs[0].Query)
	must.NoError(t, err)
	must.Eq(t, "dev", q.Get("plugin_id"), must.Sprint("-plugin_id filters the volume list"))
	q, err = url.ParseQuery(reqs[1].Query)
	must.NoError(t, err)
	must.Eq(t, "dev", q.Get("plugin_id"))

	// Without -verbose only the list.
	r = run(t, "", "volume", "status", "-plugin_id", "dev")
	must.Eq(t, 0, r.code)
	must.StrNotContains(t, r.out, "External Volumes")

	r = run(t, "", "volume", "status", "-type", "host")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "volplane has CSI volumes and plugins only")
}
