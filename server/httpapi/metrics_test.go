package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/structs"
)

func TestMetricsRoute_ServesTheHandler(t *testing.T) {
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Config{
		Backend: noBackend{},
		Metrics: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			io.WriteString(w, "volplane_test 1\n")
		}),
	}))
	defer srv.Close()
	code, body := getText(t, srv.URL+"/v1/metrics")
	must.Eq(t, http.StatusOK, code)
	must.True(t, strings.HasPrefix(body, "volplane_test 1"))
}

// TestMetrics_RealServer scrapes a real server after a call to a client
// agent, which no server reaches and which is timed all the same.
func TestMetrics_RealServer(t *testing.T) {
	srv := server.TestServer(t, nil)
	server.WaitForLeader(t, srv)

	req := &structs.ClientCSINodeDetachVolumeRequest{VolumeID: "v1", AllocID: "a1"}
	req.NodeID = "nowhere"
	err := srv.RPC("ClientCSI.NodeDetachVolume", req, &structs.ClientCSIEmptyResponse{})
	must.Eq(t, structs.ErrCodeNoNodeConn, structs.CodeOf(err))

	resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/metrics?format=prometheus")
	must.NoError(t, err)
	defer resp.Body.Close()
	must.Eq(t, http.StatusOK, resp.StatusCode)
	must.StrContains(t, resp.Header.Get("Content-Type"), "text/plain")
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	text := string(b)
	for _, want := range []string{
		`volplane_csi_past_claims{state="unpublishing"} 0`,
		`volplane_claim_release_attempts_total{step="node-detach"}`,
		`volplane_claim_release_failures_total{step="controller-detach"}`,
		`volplane_client_rpc_duration_seconds_count{code="no-path-to-node",method="ClientCSI.NodeDetachVolume"}`,
		"volplane_volumewatcher_queue_depth ",
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		must.StrContains(t, text, want)
	}
}

// TestMetrics_RealServerNomadJSON reads a real server's metrics with
// Nomad's client, which asks for JSON.
func TestMetrics_RealServerNomadJSON(t *testing.T) {
	srv := server.TestServer(t, nil)
	server.WaitForLeader(t, srv)
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/metrics")
	must.NoError(t, err)
	defer resp.Body.Close()
	must.Eq(t, http.StatusOK, resp.StatusCode)
	var s struct {
		Timestamp string
		Gauges    []struct {
			Name  string
			Value float32
		}
	}
	must.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	must.NotEq(t, "", s.Timestamp)
	must.SliceContainsFunc(t, s.Gauges, "volplane_volumewatcher_queue_depth", func(g struct {
		Name  string
		Value float32
	}, name string) bool {
		return g.Name == name
	})
}
