package httpapi

import (
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
)

// TestNoSecretInAnyResponse walks every route, successes and failures, over
// state that holds a volume secret, a secret mount flag, a publish context
// and a node secret, and asserts that none of them appears in any body.
func TestNoSecretInAnyResponse(t *testing.T) {
	be, h := newTestHandler(t)
	regBody := `{"Volumes":[{"ID":"vol1","PluginID":"` + plug + `","Secrets":{"k":"` + testVolSecret + `"},` +
		`"MountOptions":{"FSType":"ext4","MountFlags":["` + testFlagSecret + `"]},` +
		`"RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}]}]}`
	requests := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/volumes?type=csi", ""},
		{http.MethodGet, "/v1/volumes?type=csi&node_id=" + httpapitest.CompatNodeID, ""},
		{http.MethodGet, "/v1/volume/csi/vol1", ""},
		{http.MethodGet, "/v1/volume/csi/vol1?pretty", ""},
		{http.MethodPut, "/v1/volume/csi/vol1", regBody},
		// A refused registration must not echo the secrets it was sent.
		{http.MethodPut, "/v1/volume/csi/other", regBody},
		{http.MethodPut, "/v1/volume/csi/vol1", regBody[:len(regBody)-3]},
		{http.MethodGet, "/v1/plugins?type=csi", ""},
		{http.MethodGet, "/v1/plugin/csi/" + plug, ""},
		{http.MethodGet, "/v1/nodes", ""},
		{http.MethodGet, "/v1/node/" + httpapitest.CompatNodeID, ""},
		{http.MethodGet, "/v1/node/" + httpapitest.CompatNodeID + "?pretty", ""},
		{http.MethodGet, "/v1/status/leader", ""},
		{http.MethodGet, "/v1/status/peers", ""},
		{http.MethodGet, "/v1/operator/raft/configuration", ""},
		{http.MethodDelete, "/v1/volume/csi/vol1?force=true", ""},
	}
	for _, rq := range requests {
		rec := do(t, h, rq.method, rq.path, rq.body)
		for _, secret := range []string{testVolSecret, testFlagSecret, testPublishSecret, httpapitest.CompatNodeSecret} {
			must.StrNotContains(t, rec.Body.String(), secret, must.Sprintf("%s %s", rq.method, rq.path))
		}
	}
	// The reads above did see the secrets' owners, so the test is not
	// passing on empty answers.
	must.NotNil(t, be.call("CSIVolume.Get"))
	must.NotNil(t, be.call("Node.GetNode"))
}
