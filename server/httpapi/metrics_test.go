package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
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

// TestMetrics_RaftAndGroupCommit scrapes a 3-server cluster's leader after
// concurrent registers, on each log store: Raft's own figures are there
// (hashicorp/raft's and the log store's, through go-metrics), a follower
// named only in a label, never in a metric's name; and the group commit's
// entries are counted with every request they carried.
func TestMetrics_RaftAndGroupCommit(t *testing.T) {
	for backend, storeSeries := range map[string]string{
		server.LogStoreBoltDB: `volplane_raft_boltdb_storeLogs_count `,
		server.LogStoreWAL:    `volplane_raft_wal_log_appends `,
	} {
		t.Run(backend, func(t *testing.T) {
			testRaftAndGroupCommitMetrics(t, backend, storeSeries)
		})
	}
}

func testRaftAndGroupCommitMetrics(t *testing.T, backend, storeSeries string) {
	servers := server.TestCluster(t, 3, func(_ int, c *server.Config) { c.RaftLogStore = backend })
	leader := server.WaitForLeader(t, servers...)
	scrape := func() string {
		resp, err := http.Get("http://" + leader.HTTPAddr() + "/v1/metrics?format=prometheus")
		must.NoError(t, err)
		defer resp.Body.Close()
		must.Eq(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		must.NoError(t, err)
		return string(b)
	}
	const requestsSum = `volplane_raft_entry_requests_sum{kind="register"}`
	// The registry is the process's, which earlier tests' servers fed too:
	// what this cluster did is what grew while it ran.
	raftSeries := []string{
		`volplane_raft_entry_requests_count{kind="register"}`,
		`volplane_raft_commitTime_count`,
		`volplane_raft_leader_dispatchLog_count`,
		`volplane_raft_fsm_applyBatch_count`,
		storeSeries,
		`volplane_raft_replication_appendEntries_rpc_count{peer_id="`,
	}
	first := scrape()
	before := testutil.SeriesValue(t, first, requestsSum)
	counts := make(map[string]float64, len(raftSeries))
	for _, series := range raftSeries {
		counts[series] = testutil.SeriesTotal(t, first, series)
	}

	var nodeResp structs.NodeUpdateResponse
	must.NoError(t, leader.RPC("Node.Register", &structs.NodeRegisterRequest{Node: mock.Node("dev")}, &nodeResp))
	const registers = 16
	errs := make(chan error, registers)
	for range registers {
		go func() {
			vol := mock.CSIVolume("dev")
			errs <- leader.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}},
				&structs.CSIVolumeRegisterResponse{})
		}()
	}
	for range registers {
		must.NoError(t, <-errs)
	}

	text := scrape()
	must.GreaterEq(t, float64(registers), testutil.SeriesValue(t, text, requestsSum)-before)
	for _, series := range raftSeries {
		must.Greater(t, counts[series], testutil.SeriesTotal(t, text, series), must.Sprint(series, " did not grow"))
	}
	for _, s := range servers {
		for _, line := range strings.Split(text, "\n") {
			name, _, _ := strings.Cut(line, "{")
			must.StrNotContains(t, name, strings.ReplaceAll(s.NodeID(), "-", "_"),
				must.Sprint("a metric named after a server: ", line))
		}
	}
}
