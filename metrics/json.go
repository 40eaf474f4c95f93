package metrics

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/volplane/volplane/structs"
)

// Gather reads the registry into Nomad's JSON form
// (structs.MetricsSummary), at now.
func Gather(now time.Time) (*structs.MetricsSummary, error) {
	return gatherFrom(registry, now)
}

func gatherFrom(g prometheus.Gatherer, now time.Time) (*structs.MetricsSummary, error) {
	families, err := g.Gather()
	if err != nil {
		return nil, err
	}
	s := &structs.MetricsSummary{Timestamp: now.UTC().Format("2006-01-02 15:04:05 -0700 MST"),
		Gauges: []structs.GaugeValue{}, Points: []structs.PointValue{}, Counters: []structs.SampledValue{}, Samples: []structs.SampledValue{}}
	for _, f := range families {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_GAUGE:
				s.Gauges = append(s.Gauges, structs.GaugeValue{Name: name, Value: float32(m.GetGauge().GetValue()), Labels: labels})
			case dto.MetricType_UNTYPED:
				s.Gauges = append(s.Gauges, structs.GaugeValue{Name: name, Value: float32(m.GetUntyped().GetValue()), Labels: labels})
			case dto.MetricType_COUNTER:
				v := m.GetCounter().GetValue()
				s.Counters = append(s.Counters, structs.SampledValue{Name: name, Count: 1, Rate: v, Sum: v, Min: v, Max: v, Mean: v, Labels: labels})
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				s.Samples = append(s.Samples, sampled(name, h.GetSampleCount(), h.GetSampleSum(), labels))
			case dto.MetricType_SUMMARY:
				sm := m.GetSummary()
				s.Samples = append(s.Samples, sampled(name, sm.GetSampleCount(), sm.GetSampleSum(), labels))
			}
		}
	}
	sort.SliceStable(s.Gauges, func(i, j int) bool { return s.Gauges[i].Name < s.Gauges[j].Name })
	return s, nil
}

func sampled(name string, count uint64, sum float64, labels map[string]string) structs.SampledValue {
	v := structs.SampledValue{Name: name, Count: int(count), Sum: sum, Labels: labels}
	if count > 0 {
		v.Mean = sum / float64(count)
	}
	return v
}

// maxScrapes bounds the reads of the registry at once: the past-claims
// gauge reads every volume with claims being released.
const maxScrapes = 4

// Handler serves the registry at GET /v1/metrics as Nomad's does: JSON
// (structs.MetricsSummary, indented with ?pretty) by default, the
// Prometheus text format with ?format=prometheus.
// Reads are bounded to a few at once; past that, a 503.
func Handler() http.Handler {
	text := promhttp.HandlerFor(registry, promhttp.HandlerOpts{MaxRequestsInFlight: maxScrapes})
	slots := make(chan struct{}, maxScrapes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") == "prometheus" {
			text.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(w, "too many metrics reads at once; try again", http.StatusServiceUnavailable)
			return
		}
		s, err := Gather(time.Now())
		if err != nil {
			http.Error(w, "reading metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		if _, pretty := r.URL.Query()["pretty"]; pretty {
			// As Nomad's API indents, which Nomad's "operator metrics
			// -pretty" asks for.
			enc.SetIndent("", "    ")
		}
		_ = enc.Encode(s)
	})
}
