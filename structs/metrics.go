package structs

// MetricsSummary is an agent's metrics in the JSON of GET /v1/metrics,
// Nomad's MetricsSummary, which Nomad's client and CLI decode: gauges with
// their value, counters with their total, histograms and summaries as
// samples with their count, sum and mean, each under its metric's name
// with its labels.
type MetricsSummary struct {
	Timestamp string
	Gauges    []GaugeValue
	Points    []PointValue
	Counters  []SampledValue
	Samples   []SampledValue
}

// GaugeValue is one gauge, as Nomad's.
type GaugeValue struct {
	Name   string
	Hash   string `json:"-"`
	Value  float32
	Labels map[string]string
}

// PointValue is Nomad's; volplane has none.
type PointValue struct {
	Name   string
	Points []float32
}

// SampledValue is one counter or distribution, as Nomad's. A counter's
// Count is 1 and its Sum, Min, Max and Mean its total: Prometheus counters
// are totals since the start, not Nomad's samples of an interval.
type SampledValue struct {
	Name   string
	Count  int
	Rate   float64
	Sum    float64
	Min    float64
	Max    float64
	Mean   float64
	Stddev float64
	Labels map[string]string
}
