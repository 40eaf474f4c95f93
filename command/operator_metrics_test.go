package command

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestOperatorMetrics_JSON(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/metrics", 200, &structs.MetricsSummary{
		Timestamp: "2026-11-28 17:00:00 +0000 UTC",
		Gauges:    []structs.GaugeValue{{Name: "volplane_volumewatcher_queue_depth", Value: 3, Labels: map[string]string{}}},
		Samples:   []structs.SampledValue{{Name: "volplane_raft_commitTime", Count: 2, Sum: 5, Mean: 2.5, Labels: map[string]string{}}},
	})

	// As the agent sends it.
	r := run(t, "", "operator", "metrics", "-token=t0k")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrHasPrefix(t, `{"Timestamp":"2026-11-28 17:00:00 +0000 UTC","Gauges":[{"Name":"volplane_volumewatcher_queue_depth","Value":3,`, r.out)
	must.Eq(t, request{Method: "GET", Path: "/v1/metrics", Token: "t0k"}, f.requests()[0])

	// Indented.
	r = run(t, "", "operator", "metrics", "-pretty")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "{\n    \"Timestamp\": \"2026-11-28 17:00:00 +0000 UTC\",\n    \"Gauges\": [\n        {\n")

	// Decoded, through a template.
	r = run(t, "", "operator", "metrics", "-t", `{{range .Samples}}{{.Name}} {{.Mean}}{{end}}`)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "volplane_raft_commitTime 2.5\n", r.out)

	r = run(t, "", "operator", "metrics", "-json")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "\"Name\": \"volplane_raft_commitTime\",\n")
}

func TestOperatorMetrics_Prometheus(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/metrics", 200, "# TYPE volplane_volumewatcher_queue_depth gauge\nvolplane_volumewatcher_queue_depth 3")
	r := run(t, "", "operator", "metrics", "-format", "prometheus")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "# TYPE volplane_volumewatcher_queue_depth gauge\nvolplane_volumewatcher_queue_depth 3\n", r.out)
	must.Eq(t, request{Method: "GET", Path: "/v1/metrics", Query: "format=prometheus"}, f.requests()[0])
}

func TestOperatorMetrics_BadFlags(t *testing.T) {
	newFakeAgent(t)
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-format", "xml"}, `Unknown -format "xml": the only other format than JSON is prometheus`},
		{[]string{"-format", "prometheus", "-pretty"}, "-format=prometheus prints the text format: -pretty, -json and -t apply to JSON"},
		{[]string{"-format", "prometheus", "-json"}, "-format=prometheus prints the text format"},
		{[]string{"extra"}, "This command takes no arguments"},
	} {
		r := run(t, "", append([]string{"operator", "metrics"}, tc.args...)...)
		must.Eq(t, 1, r.code, must.Sprint(tc.args))
		must.StrHasPrefix(t, tc.err, r.stderr, must.Sprint(tc.args))
	}
}
