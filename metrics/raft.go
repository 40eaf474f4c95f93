package metrics

import (
	"sync"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

// The Raft stack's own telemetry: hashicorp/raft, raft-boltdb and raft-wal
// report through go-metrics (its compat package, so whichever of
// armon/go-metrics or hashicorp/go-metrics the build selects), whose
// process-wide sink is, here, this registry. Their keys come out under the
// service name, dots turned to underscores, as Nomad's do under "nomad":
//
//	volplane_raft_commitTime                               time from an entry's dispatch to its commit (ms)
//	volplane_raft_leader_dispatchLog                       the leader's write of new entries to its log (ms)
//	volplane_raft_replication_appendEntries_rpc{peer_id}   an append round trip to one follower (ms)
//	volplane_raft_rpc_appendEntries_storeLogs              a follower's write of appended entries (ms)
//	volplane_raft_fsm_applyBatch                           the state machine's apply of a batch of entries (ms)
//	volplane_raft_boltdb_storeLogs, volplane_raft_wal_*    the log store's own figures, per backend
//
// and the rest of what those libraries emit. Timers are summaries in
// milliseconds: the 0.5, 0.9 and 0.99 quantiles of the last 10 seconds
// (the sink's window), with _sum and _count since the series began. A
// series not updated for raftMetricsExpiry goes, so a server that stopped
// leading stops showing the leader's figures.

// raftMetricsService prefixes every go-metrics key.
const raftMetricsService = "volplane"

// raftMetricsExpiry is how long a go-metrics series outlives its last
// update.
const raftMetricsExpiry = 10 * time.Minute

var raftSinkOnce sync.Once

// InstallRaftSink makes this registry the process's go-metrics sink, once;
// later calls do nothing. Servers call it before they start Raft. The
// sink's series are then served with the others at GET /v1/metrics.
func InstallRaftSink() {
	raftSinkOnce.Do(func() {
		if err := installRaftSink(registry); err != nil {
			// Only a name clash in the registry fails this, which is a
			// programming error: the sink's collector name is fixed.
			panic("metrics: installing the go-metrics sink: " + err.Error())
		}
	})
}

func installRaftSink(reg prometheus.Registerer) error {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{
		Name:       "volplane_go_metrics",
		Expiration: raftMetricsExpiry,
		Registerer: reg,
	})
	if err != nil {
		return err
	}
	cfg := gometrics.DefaultConfig(raftMetricsService)
	// The Go runtime's figures come from the Go collector already, and a
	// host name in every key would make series per machine, not per role.
	cfg.EnableHostname = false
	cfg.EnableHostnameLabel = false
	cfg.EnableRuntimeMetrics = false
	_, err = gometrics.NewGlobal(cfg, sink)
	return err
}
