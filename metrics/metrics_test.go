package metrics

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// scrape returns the text exposition the handler serves.
func scrape(t *testing.T) string {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/metrics?format=prometheus", nil))
	must.Eq(t, http.StatusOK, rec.Code)
	must.StrContains(t, rec.Header().Get("Content-Type"), "text/plain")
	body, err := io.ReadAll(rec.Body)
	must.NoError(t, err)
	return string(body)
}

// value returns the value of one series in a scrape, 0 when it is absent.
func value(t *testing.T, text, series string) float64 {
	t.Helper()
	return testutil.SeriesValue(t, text, series)
}

func TestMetrics_ServedInTextFormat(t *testing.T) {
	// The registry is the process's: compare with what earlier runs left.
	counters := []string{
		`volplane_claim_release_attempts_total{step="node-detach"}`,
		`volplane_claim_release_failures_total{step="controller-detach"}`,
		`volplane_client_rpc_duration_seconds_count{code="ok",method="ClientCSI.NodeDetachVolume"}`,
		`volplane_client_rpc_duration_seconds_count{code="no-path-to-node",method="ClientCSI.NodeDetachVolume"}`,
		`volplane_client_rpc_duration_seconds_count{code="internal",method="ClientCSI.ControllerDetachVolume"}`,
	}
	before := scrape(t)

	ReleaseAttempt(StepNode)
	ReleaseAttempt(StepNode)
	ReleaseFailure(StepController)
	var err error
	ObserveClientRPC("ClientCSI.NodeDetachVolume", time.Now(), &err)
	err = structs.NewError(structs.ErrCodeNoNodeConn, "no path to node %q", "n1")
	ObserveClientRPC("ClientCSI.NodeDetachVolume", time.Now(), &err)
	err = errors.New("untyped")
	ObserveClientRPC("ClientCSI.ControllerDetachVolume", time.Now(), &err)

	SetQueueDepthFunc(func() int { return 7 })
	SetPastClaimsFunc(func() map[string]int { return map[string]int{"unpublishing": 3, "node-detached": 0} })
	t.Cleanup(func() {
		SetQueueDepthFunc(nil)
		SetPastClaimsFunc(nil)
	})

	text := scrape(t)
	for series, delta := range map[string]float64{counters[0]: 2, counters[1]: 1, counters[2]: 1, counters[3]: 1, counters[4]: 1} {
		must.Eq(t, delta, value(t, text, series)-value(t, before, series), must.Sprint(series))
	}
	for _, line := range []string{
		`volplane_claim_release_failures_total{step="free"} `,
		`volplane_volumewatcher_queue_depth 7`,
		`volplane_csi_past_claims{state="unpublishing"} 3`,
		`volplane_csi_past_claims{state="node-detached"} 0`,
		"# TYPE volplane_client_rpc_duration_seconds histogram",
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		must.StrContains(t, text, line)
	}
}

func TestMetrics_CallbacksRemoved(t *testing.T) {
	SetQueueDepthFunc(func() int { return 5 })
	SetPastClaimsFunc(func() map[string]int { return map[string]int{"unpublishing": 1} })
	SetQueueDepthFunc(nil)
	SetPastClaimsFunc(nil)

	text := scrape(t)
	must.StrContains(t, text, "volplane_volumewatcher_queue_depth 0")
	must.StrNotContains(t, text, "volplane_csi_past_claims{")
}

func TestMetrics_ReleaseCounts(t *testing.T) {
	attempts, failures := ReleaseCounts(StepController)
	ReleaseAttempt(StepController)
	ReleaseAttempt(StepController)
	ReleaseFailure(StepController)
	a, f := ReleaseCounts(StepController)
	must.Eq(t, attempts+2, a)
	must.Eq(t, failures+1, f)
	text := scrape(t)
	must.Eq(t, a, value(t, text, `volplane_claim_release_attempts_total{step="controller-detach"}`), must.Sprint("the counters the scrape shows"))
	must.Eq(t, f, value(t, text, `volplane_claim_release_failures_total{step="controller-detach"}`))
}

// TestMetrics_NomadJSON: by default the handler answers Nomad's JSON
// summary of the same registry: gauges, counters (their totals) and
// histograms (as samples), by family name and labels.
func TestMetrics_NomadJSON(t *testing.T) {
	ReleaseAttempt(StepNode)
	var err error
	ObserveClientRPC("ClientCSI.NodeDetachVolume", time.Now(), &err)

	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/metrics", nil))
	must.Eq(t, http.StatusOK, rec.Code)
	must.Eq(t, "application/json", rec.Header().Get("Content-Type"))
	var s structs.MetricsSummary
	must.NoError(t, json.NewDecoder(rec.Body).Decode(&s))
	_, err = time.Parse("2006-01-02 15:04:05 -0700 MST", s.Timestamp)
	must.NoError(t, err)

	find := func(list []structs.SampledValue, name string, labels map[string]string) *structs.SampledValue {
		for i := range list {
			if list[i].Name == name && maps.Equal(list[i].Labels, labels) {
				return &list[i]
			}
		}
		return nil
	}
	c := find(s.Counters, "volplane_claim_release_attempts_total", map[string]string{"step": "node-detach"})
	must.NotNil(t, c)
	must.Positive(t, c.Sum)
	h := find(s.Samples, "volplane_client_rpc_duration_seconds", map[string]string{"code": "ok", "method": "ClientCSI.NodeDetachVolume"})
	must.NotNil(t, h)
	must.Positive(t, h.Count)
	gauges := map[string]bool{}
	for _, g := range s.Gauges {
		gauges[g.Name] = true
	}
	for _, want := range []string{"volplane_volumewatcher_queue_depth", "go_goroutines"} {
		must.True(t, gauges[want], must.Sprint(want))
	}
}

func TestGroupCommit_CountsRequestsAndLingers(t *testing.T) {
	o := GroupCommit("test-kind")
	before := scrape(t)
	o.Entry(3, 0)
	o.Entry(2, 1500*time.Microsecond)
	var none *EntryObserver
	none.Entry(9, time.Second) // a group commit without an observer records nothing

	text := scrape(t)
	for series, delta := range map[string]float64{
		`volplane_raft_entry_requests_count{kind="test-kind"}`:                   2,
		`volplane_raft_entry_requests_sum{kind="test-kind"}`:                     5,
		`volplane_raft_entry_requests_bucket{kind="test-kind",le="2"}`:           1,
		`volplane_raft_entry_linger_seconds_count{kind="test-kind"}`:             1,
		`volplane_raft_entry_linger_seconds_bucket{kind="test-kind",le="0.002"}`: 1,
		`volplane_raft_entry_linger_seconds_bucket{kind="test-kind",le="0.001"}`: 0,
	} {
		must.Eq(t, delta, value(t, text, series)-value(t, before, series), must.Sprint(series))
	}
}

func TestRaftSink_GoMetricsReachTheRegistry(t *testing.T) {
	InstallRaftSink()
	InstallRaftSink() // once per process; a second call changes nothing
	// The registry is the process's: compare with what earlier runs left.
	before := scrape(t)
	gometrics.MeasureSince([]string{"raft", "test", "timer"}, time.Now().Add(-3*time.Millisecond))
	gometrics.IncrCounterWithLabels([]string{"raft", "test", "counter"}, 2, []gometrics.Label{{Name: "peer_id", Value: "p1"}})

	text := scrape(t)
	delta := func(series string) float64 { return value(t, text, series) - value(t, before, series) }
	must.Eq(t, 1, delta("volplane_raft_test_timer_count"))
	must.GreaterEq(t, 3, delta("volplane_raft_test_timer_sum")) // milliseconds
	must.Eq(t, 2, delta(`volplane_raft_test_counter{peer_id="p1"}`))

	// Nomad's JSON form carries them too.
	s, err := Gather(time.Now())
	must.NoError(t, err)
	var found bool
	for _, v := range s.Samples {
		found = found || v.Name == "volplane_raft_test_timer" && v.Count >= 1
	}
	must.True(t, found, must.Sprint("no volplane_raft_test_timer sample in ", s.Samples))
}

func TestHandler_PrettyJSON(t *testing.T) {
	for query, indented := range map[string]bool{"": false, "?pretty": true, "?pretty=1": true} {
		rec := httptest.NewRecorder()
		Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/metrics"+query, nil))
		must.Eq(t, http.StatusOK, rec.Code)
		must.Eq(t, indented, strings.Contains(rec.Body.String(), "\n    \"Gauges\": ["), must.Sprint(query))
		var s structs.MetricsSummary
		must.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s), must.Sprint(query))
	}
}
