package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// querySeeds are query strings as Nomad's client, curl and a careless
// script send them.
var querySeeds = []string{
	"index=42&wait=30s&stale&namespace=ns1&region=r1&prefix=pre&per_page=5&next_token=tok",
	"index=18446744073709551615&wait=2s",
	"index=18446744073709551616",
	"wait=1500ms&stale=",
	"wait=99999999999999999999",
	"wait=-1s",
	"stale=false&reverse=true",
	"filter=x&per_page=-1",
	"%zz",
	"a=1;b=2",
	"purge=true&force=1&type=csi&plugin_id=p&node_id=n",
	"",
}

// FuzzQueryOptions parses arbitrary query strings the way every read and
// write does: it never panics, a refusal is always the invalid code (a 400,
// never a 500), and what it accepts is in range: a wait between zero and
// the cap, a page size that is not negative.
func FuzzQueryOptions(f *testing.F) {
	for _, q := range querySeeds {
		f.Add(q, "token")
	}
	f.Fuzz(func(t *testing.T, rawQuery, token string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/volumes", nil)
		r.URL.RawQuery = rawQuery
		r.Header.Set(headerToken, token)

		var q structs.QueryOptions
		v, err := parseQueryOptions(r, &q)
		if err != nil {
			must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
			must.Nil(t, v)
		} else {
			must.NotNil(t, v)
			must.NonNegative(t, q.MaxQueryTime)
			must.LessEq(t, structs.MaxBlockingQueryTime, q.MaxQueryTime)
			must.NonNegative(t, q.PerPage)
			must.Eq(t, r.Header.Get(headerToken), q.AuthToken)
		}

		var w structs.WriteRequest
		if _, werr := parseWriteRequest(r, &w); werr != nil {
			must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(werr), must.Sprint(werr))
		}
	})
}

// handlerMethods are the methods FuzzHandler picks from by its first byte.
var handlerMethods = []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodHead, "PATCH"}

// FuzzHandler sends arbitrary requests (method, path and query, body) to
// the whole handler over a backend that holds a volume with secrets: it
// never panics, answers every request with a status, and never shows a
// secret, whatever the request.
func FuzzHandler(f *testing.F) {
	paths := []string{
		"/v1/volumes?type=csi&prefix=v", "/v1/volume/csi/vol1", "/v1/volume/csi/vol1?namespace=*",
		"/v1/volume/csi/vol1/detach?node=n1", "/v1/plugins?type=csi", "/v1/plugin/csi/x", "/v1/nodes",
		"/v1/node/x?index=3&wait=1s", "/v1/status/leader?stale", "/v1/status/peers",
		"/v1/operator/raft/configuration", "/v1/operator/raft/peer?address=10.0.0.2:4647",
		"/v1/volume/csi/%2e%2e", "/v1/volume/csi/vol1?force=maybe", "//v1//volumes", "/v1/volume/csi/vol%00",
	}
	for i, p := range paths {
		f.Add(byte(i), p, []byte(nil))
	}
	f.Add(byte(1), "/v1/volume/csi/vol2", []byte(`{"Volumes":[{"ID":"vol2","PluginID":"p","RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}]}]}`))
	f.Add(byte(1), "/v1/volume/csi/vol2", []byte(`{"Volumes":[null]}`))
	f.Add(byte(2), "/v1/volume/csi/vol2", []byte(`{"Volumes":[{"ID":"vol2","Secrets":{"a":"b"}}], "Extra": 1}`))
	f.Fuzz(func(t *testing.T, m byte, target string, body []byte) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(target, "/") {
			return
		}
		req := httptest.NewRequest(handlerMethods[int(m)%len(handlerMethods)], "/", bytes.NewReader(body))
		req.URL, req.RequestURI = u, target
		_, h := newTestHandler(t)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		must.Between(t, 100, rec.Code, 599)
		for _, secret := range []string{testVolSecret, testFlagSecret, testPublishSecret} {
			must.StrNotContains(t, rec.Body.String(), secret)
		}
	})
}
