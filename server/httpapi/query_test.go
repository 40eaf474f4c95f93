package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestQueryOptions_PassedThrough(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodGet,
		"/v1/volumes?type=csi&index=42&wait=30s&stale&namespace=ns1&region=r1&prefix=pre&per_page=5&next_token=tok&plugin_id=p1&node_id=n1",
		"", "X-Nomad-Token", "secret-token")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, &structs.CSIVolumeListRequest{
		PluginID: "p1",
		NodeID:   "n1",
		QueryOptions: structs.QueryOptions{
			Region: "r1", Namespace: "ns1", AuthToken: "secret-token",
			MinQueryIndex: 42, MaxQueryTime: 30 * time.Second, AllowStale: true,
			Prefix: "pre", PerPage: 5, NextToken: "tok",
		},
	}, be.call("CSIVolume.List").(*structs.CSIVolumeListRequest))
}

// Every read passes the blocking parameters and the token on.
func TestQueryOptions_EveryRead(t *testing.T) {
	reads := []struct {
		rpc, path string
		opts      func(args any) *structs.QueryOptions
	}{
		{"CSIVolume.List", "/v1/volumes", func(a any) *structs.QueryOptions { return &a.(*structs.CSIVolumeListRequest).QueryOptions }},
		{"CSIVolume.Get", "/v1/volume/csi/vol1", func(a any) *structs.QueryOptions { return &a.(*structs.CSIVolumeGetRequest).QueryOptions }},
		{"CSIPlugin.List", "/v1/plugins", func(a any) *structs.QueryOptions { return &a.(*structs.CSIPluginListRequest).QueryOptions }},
		{"CSIPlugin.Get", "/v1/plugin/csi/x", func(a any) *structs.QueryOptions { return &a.(*structs.CSIPluginGetRequest).QueryOptions }},
		{"Node.List", "/v1/nodes", func(a any) *structs.QueryOptions { return &a.(*structs.NodeListRequest).QueryOptions }},
		{"Node.GetNode", "/v1/node/x", func(a any) *structs.QueryOptions { return &a.(*structs.NodeSpecificRequest).QueryOptions }},
		{"Status.Leader", "/v1/status/leader", func(a any) *structs.QueryOptions { return &a.(*structs.GenericRequest).QueryOptions }},
		{"Status.Peers", "/v1/status/peers", func(a any) *structs.QueryOptions { return &a.(*structs.GenericRequest).QueryOptions }},
		{"Operator.RaftListPeers", "/v1/operator/raft/configuration", func(a any) *structs.QueryOptions { return &a.(*structs.GenericRequest).QueryOptions }},
	}
	for _, rd := range reads {
		be, h := newTestHandler(t)
		// Nomad's client sends the wait in milliseconds and a bare stale.
		do(t, h, http.MethodGet, rd.path+"?index=7&wait=1500ms&stale=&region=r2", "", "X-Nomad-Token", "tok")
		args := be.call(rd.rpc)
		must.NotNil(t, args, must.Sprint(rd.rpc))
		q := rd.opts(args)
		must.Eq(t, uint64(7), q.MinQueryIndex, must.Sprint(rd.rpc))
		must.Eq(t, 1500*time.Millisecond, q.MaxQueryTime, must.Sprint(rd.rpc))
		must.True(t, q.AllowStale, must.Sprint(rd.rpc))
		must.Eq(t, "r2", q.Region, must.Sprint(rd.rpc))
		must.Eq(t, "tok", q.AuthToken, must.Sprint(rd.rpc))
	}
}

func TestQueryOptions_Stale(t *testing.T) {
	for query, want := range map[string]bool{
		"": false, "?stale": true, "?stale=": true, "?stale=true": true, "?stale=false": false,
	} {
		be, h := newTestHandler(t)
		must.Eq(t, http.StatusOK, do(t, h, http.MethodGet, "/v1/nodes"+query, "").Code)
		must.Eq(t, want, be.call("Node.List").(*structs.NodeListRequest).AllowStale, must.Sprint(query))
	}
}

func TestParseWait(t *testing.T) {
	ok := map[string]time.Duration{
		"30s":          30 * time.Second,
		"5m":           5 * time.Minute,
		"1500ms":       1500 * time.Millisecond,
		"30":           30 * time.Second,
		"0":            0,
		"11m":          structs.MaxBlockingQueryTime,
		"601":          structs.MaxBlockingQueryTime,
		"999999999999": structs.MaxBlockingQueryTime,
		"2h":           structs.MaxBlockingQueryTime,
	}
	for in, want := range ok {
		got, err := parseWait(in)
		must.NoError(t, err, must.Sprint(in))
		must.Eq(t, want, got, must.Sprint(in))
	}
	for _, in := range []string{"-1s", "abc", "1.5", "-5", "10 s"} {
		_, err := parseWait(in)
		must.Error(t, err, must.Sprint(in))
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
		must.StrContains(t, structs.MessageOf(err), "wait")
	}
}

func TestQueryOptions_MalformedIs400NamingTheParameter(t *testing.T) {
	cases := map[string]string{
		"index=abc":      "index",
		"index=-1":       "index",
		"wait=forever":   "wait",
		"wait=-3s":       "wait",
		"per_page=x":     "per_page",
		"per_page=-1":    "per_page",
		"per_page=9e99":  "per_page",
		"stale=perhaps":  "stale",
		"filter=ID==x":   "filter",
		"reverse=true":   "reverse",
		"index=%zz":      "malformed query string",
		"type=nfs":       `unsupported volume type "nfs"`,
		"type=csi&x=%%%": "malformed query string",
	}
	for query, want := range cases {
		be, h := newTestHandler(t)
		mustError(t, do(t, h, http.MethodGet, "/v1/volumes?"+query, ""), http.StatusBadRequest, want)
		must.Nil(t, be.call("CSIVolume.List"), must.Sprint(query))
	}
}

// TestVolumes_HostTypeIsEmpty: Nomad's CLI lists host volumes before CSI
// ones; volplane has none, so the list is empty, with the read headers
// Nomad's client needs, and no CSI list is made.
func TestVolumes_HostTypeIsEmpty(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodGet, "/v1/volumes?type=host&namespace=*", "")
	must.Eq(t, http.StatusOK, rec.Code)
	must.Eq(t, "[]\n", rec.Body.String())
	for _, hdr := range []string{"X-Nomad-Index", "X-Nomad-LastContact", "X-Nomad-KnownLeader"} {
		must.NotEq(t, "", rec.Header().Get(hdr), must.Sprint(hdr))
	}
	must.Nil(t, be.call("CSIVolume.List"))
}

func TestReadHeaders(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodGet, "/v1/volume/csi/vol1", "")
	must.Eq(t, http.StatusOK, rec.Code)
	must.Eq(t, "application/json", rec.Header().Get("Content-Type"))
	must.Eq(t, "3", rec.Header().Get("X-Nomad-Index"))
	must.Eq(t, "true", rec.Header().Get("X-Nomad-KnownLeader"))
	must.Eq(t, "1500", rec.Header().Get("X-Nomad-LastContact"))
	_, hasNext := rec.Header()["X-Nomad-Nexttoken"]
	must.False(t, hasNext)

	be.meta = structs.QueryMeta{KnownLeader: false, LastContact: 0}
	rec = do(t, h, http.MethodGet, "/v1/plugins?type=csi", "")
	must.Eq(t, "false", rec.Header().Get("X-Nomad-KnownLeader"))
	must.Eq(t, "0", rec.Header().Get("X-Nomad-LastContact"))
	must.Eq(t, "3", rec.Header().Get("X-Nomad-Index"))
}

func TestReadHeaders_NextToken(t *testing.T) {
	be, h := newTestHandler(t)
	be.volumes[volKey("default", "vol2")] = &structs.CSIVolume{ID: "vol2", Namespace: "default"}
	rec := do(t, h, http.MethodGet, "/v1/volumes?per_page=1", "")
	must.Eq(t, "vol2", rec.Header().Get("X-Nomad-NextToken"))
	var stubs []*structs.CSIVolListStub
	mustJSON(t, rec, &stubs)
	must.Len(t, 1, stubs)
	must.Eq(t, "vol1", stubs[0].ID)
}

func TestWriteOptions_PassedThrough(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodDelete, "/v1/volume/csi/vol1?force=true&region=r3&namespace=default", "",
		"X-Nomad-Token", "tok")
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, &structs.CSIVolumeDeregisterRequest{
		VolumeIDs:    []string{"vol1"},
		Force:        true,
		WriteRequest: structs.WriteRequest{Region: "r3", Namespace: "default", AuthToken: "tok"},
	}, be.call("CSIVolume.Deregister").(*structs.CSIVolumeDeregisterRequest))
}

// A single read that finds nothing still carries the index, so a caller can
// block until the object appears; a failed RPC carries no index at all.
func TestReadHeaders_NotFoundKeepsIndex(t *testing.T) {
	be, h := newTestHandler(t)
	for _, p := range []string{"/v1/volume/csi/nope", "/v1/plugin/csi/nope", "/v1/node/nope"} {
		rec := do(t, h, http.MethodGet, p, "")
		mustError(t, rec, http.StatusNotFound, `"nope" not found`)
		must.Eq(t, "3", rec.Header().Get("X-Nomad-Index"), must.Sprint(p))
		must.Eq(t, "true", rec.Header().Get("X-Nomad-KnownLeader"), must.Sprint(p))
	}
	be.failWith("CSIVolume.Get", structs.ErrNotFound("namespace %q not found", "x"))
	rec := do(t, h, http.MethodGet, "/v1/volume/csi/vol1", "")
	mustError(t, rec, http.StatusNotFound, `namespace "x" not found`)
	must.Eq(t, "", rec.Header().Get("X-Nomad-Index"))
}
