// Package metrics holds volplane's Prometheus metrics and serves them in the
// Prometheus text format.
//
// The metrics live in one registry of their own (not the client library's
// global default, so nothing another package registers there leaks in) that
// belongs to the process. Counters and histograms are recorded through the
// package's functions; gauges that describe state are computed at scrape
// time from callbacks the server installs. Several servers in one process,
// as in tests, share the counters, and the last callback installed wins.
//
// Metrics:
//
//	volplane_csi_past_claims{state}                      gauge: claims being released, by state
//	volplane_claim_release_attempts_total{step}          counter: release steps tried
//	volplane_claim_release_failures_total{step}          counter: release steps that failed
//	volplane_client_rpc_duration_seconds{method,code}    histogram: server-to-client calls, code "ok" or the error code
//	volplane_volumewatcher_queue_depth                   gauge: volumes waiting in the release queue
//	volplane_conns_refused_total{listener,reason}        counter: connections refused (over a limit, plaintext, failed TLS)
//	volplane_rpc_refused_total{method,role}              counter: RPC calls a caller's certificate role does not allow
//	volplane_acl_denied_total{endpoint}                  counter: requests refused for their ACL token (403 Permission denied)
//	volplane_raft_entry_requests{kind}                   histogram: requests a group-committed Raft entry carried
//	volplane_raft_entry_linger_seconds{kind}             histogram: how long an entry waited for the callers expected back
//
// plus the Go runtime (go_*) and process (process_*) collectors, and the
// Raft stack's own figures (raft.go).
package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/volplane/volplane/structs"
)

// CodeOK is the code label of a call that succeeded.
const CodeOK = "ok"

// Release steps: the step label of the release counters. Their series exist
// at zero from the start, so a dashboard sees them before the first release.
const (
	StepNode       = "node-detach"
	StepController = "controller-detach"
	StepFree       = "free"
)

var (
	registry = prometheus.NewRegistry()

	releaseAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "volplane_claim_release_attempts_total",
		Help: "Claim release steps attempted by the volume watcher, by step.",
	}, []string{"step"})

	releaseFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "volplane_claim_release_failures_total",
		Help: "Claim release steps that failed and were requeued, by step.",
	}, []string{"step"})

	clientRPCDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "volplane_client_rpc_duration_seconds",
		Help: "Duration of calls from servers to client agents (CSI operations), by method and result code (\"ok\" or the typed error code).",
		// From a local unix-socket plugin answering at once up to the
		// two-minute client call deadline.
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"method", "code"})

	connsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "volplane_conns_refused_total",
		Help: "Connections refused, by listener (rpc, http) and reason (conn_limit, plaintext, tls_handshake, protocol).",
	}, []string{"listener", "reason"})

	rpcRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "volplane_rpc_refused_total",
		Help: "RPC calls refused because the caller's certificate role may not make them, by method and role.",
	}, []string{"method", "role"})

	aclDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "volplane_acl_denied_total",
		Help: "Requests refused because their ACL token is unknown, expired or lacks the capability, by endpoint.",
	}, []string{"endpoint"})

	entryRequests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "volplane_raft_entry_requests",
		Help: "Requests a group-committed Raft entry carried, by kind (register, claim, release), on the leader.",
		// Up to structs.MaxEntryBatch and the release batcher's bound.
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	}, []string{"kind"})

	entryLinger = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "volplane_raft_entry_linger_seconds",
		Help: "How long a group-committed Raft entry waited for the callers of the entry before it to come back, by kind, for the entries that waited.",
		// The linger is bounded at a few milliseconds.
		Buckets: []float64{.0001, .00025, .0005, .001, .002, .003, .005, .01},
	}, []string{"kind"})

	queueDepthFn  atomic.Pointer[func() int]
	pastClaimsFn  atomic.Pointer[func() map[string]int]
	pastClaimDesc = prometheus.NewDesc("volplane_csi_past_claims",
		"Claims being released (past claims), by release state, as this server's state holds them.",
		[]string{"state"}, nil)
)

func init() {
	registry.MustRegister(
		releaseAttempts,
		releaseFailures,
		clientRPCDuration,
		connsRefused,
		rpcRefused,
		aclDenied,
		entryRequests,
		entryLinger,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "volplane_volumewatcher_queue_depth",
			Help: "Volumes waiting in the volume watcher's release queue (0 on a server that is not the leader).",
		}, func() float64 {
			if fn := queueDepthFn.Load(); fn != nil {
				return float64((*fn)())
			}
			return 0
		}),
		pastClaimsCollector{},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, step := range []string{StepNode, StepController, StepFree} {
		releaseAttempts.WithLabelValues(step)
		releaseFailures.WithLabelValues(step)
	}
}

// ReleaseAttempt counts one attempt of a release step (StepNode,
// StepController, StepFree).
func ReleaseAttempt(step string) { releaseAttempts.WithLabelValues(step).Inc() }

// ReleaseFailure counts one failed attempt of a release step.
func ReleaseFailure(step string) { releaseFailures.WithLabelValues(step).Inc() }

// ConnRefused counts a connection refused by a listener ("rpc" or
// "http") for a reason.
func ConnRefused(listener, reason string) { connsRefused.WithLabelValues(listener, reason).Inc() }

// RPCRefused counts an RPC call refused to a caller of a certificate role.
func RPCRefused(method, role string) { rpcRefused.WithLabelValues(method, role).Inc() }

// ACLDenied counts a request refused for its ACL token, by endpoint (an RPC
// method, or an HTTP route's endpoint name).
func ACLDenied(endpoint string) { aclDenied.WithLabelValues(endpoint).Inc() }

// ACLDeniedCount is the count of ACLDenied for an endpoint so far.
func ACLDeniedCount(endpoint string) float64 { return counterValue(aclDenied, endpoint) }

// ReleaseCounts returns the attempts and failures of a release step counted
// so far by this process (every server in it), as the release counters
// show them.
func ReleaseCounts(step string) (attempts, failures float64) {
	return counterValue(releaseAttempts, step), counterValue(releaseFailures, step)
}

func counterValue(v *prometheus.CounterVec, label string) float64 {
	c, err := v.GetMetricWithLabelValues(label)
	if err != nil {
		return 0
	}
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// ObserveClientRPC records a call to a client agent that started at start
// and ended with *err. It is meant to be deferred with a pointer to the
// caller's named error result:
//
//	defer metrics.ObserveClientRPC(method, time.Now(), &err)
func ObserveClientRPC(method string, start time.Time, err *error) {
	code := CodeOK
	if err != nil && *err != nil {
		code = string(structs.CodeOf(*err))
	}
	clientRPCDuration.WithLabelValues(method, code).Observe(time.Since(start).Seconds())
}

// EntryObserver records the entries one group commit writes.
type EntryObserver struct {
	requests, linger prometheus.Observer
}

// GroupCommit returns the observer of the group commit of kind
// ("register", "claim", "release").
func GroupCommit(kind string) *EntryObserver {
	return &EntryObserver{requests: entryRequests.WithLabelValues(kind), linger: entryLinger.WithLabelValues(kind)}
}

// Entry records one entry: the requests it carried, and how long it
// lingered (0: it did not wait, and only the requests are recorded).
func (o *EntryObserver) Entry(requests int, lingered time.Duration) {
	if o == nil {
		return
	}
	o.requests.Observe(float64(requests))
	if lingered > 0 {
		o.linger.Observe(lingered.Seconds())
	}
}

// SetQueueDepthFunc installs the callback that reports the volume watcher's
// queue depth at scrape time; nil removes it (the gauge reads 0).
func SetQueueDepthFunc(fn func() int) {
	if fn == nil {
		queueDepthFn.Store(nil)
		return
	}
	queueDepthFn.Store(&fn)
}

// SetPastClaimsFunc installs the callback that counts past claims by state
// at scrape time; nil removes it (no series). It runs on every scrape, so it
// should read a consistent view of the state and not block.
func SetPastClaimsFunc(fn func() map[string]int) {
	if fn == nil {
		pastClaimsFn.Store(nil)
		return
	}
	pastClaimsFn.Store(&fn)
}

// pastClaimsCollector computes volplane_csi_past_claims when scraped: the
// count lives in the replicated state, so keeping a gauge in step with every
// write would only duplicate it.
type pastClaimsCollector struct{}

func (pastClaimsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- pastClaimDesc }

func (pastClaimsCollector) Collect(ch chan<- prometheus.Metric) {
	fn := pastClaimsFn.Load()
	if fn == nil {
		return
	}
	for state, n := range (*fn)() {
		ch <- prometheus.MustNewConstMetric(pastClaimDesc, prometheus.GaugeValue, float64(n), state)
	}
}
