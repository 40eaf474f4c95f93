package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/go-uuid"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/metrics"
)

// raftDrainTimeout bounds how long a shutdown waits for the Raft
// transport's goroutines serving other servers' connections to end (see
// rpc.RaftLayer.Drain). Their connections are closed by then, so they end
// at once unless one is in the middle of a store write.
const raftDrainTimeout = 5 * time.Second

const (
	nodeIDFile      = "node-id"
	raftDirName     = "raft"
	raftDBFile      = "raft.db"
	snapshotsRetain = 2
	logCacheSize    = 512
)

// loadOrCreateNodeID returns the server's persistent ID, creating it on
// first start. A restarted server must come back with the same Raft ID, or
// the cluster would see a stranger at a known address.
func loadOrCreateNodeID(dataDir string) (string, error) {
	if dataDir == "" {
		return uuid.GenerateUUID()
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("creating the data dir %s: %w", dataDir, err)
	}
	path := filepath.Join(dataDir, nodeIDFile)
	buf, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(buf))
		if _, perr := uuid.ParseUUID(id); perr != nil {
			return "", fmt.Errorf("node ID file %s is corrupt (%q): remove it only if this server's Raft data is removed too", path, id)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("reading the node ID file: %w", err)
	}
	id, err := uuid.GenerateUUID()
	if err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the node ID file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("writing the node ID file: %w", err)
	}
	return id, nil
}

func (s *Server) setupRaft() error {
	conf := *s.config.RaftConfig
	conf.LocalID = raft.ServerID(s.nodeID)
	conf.Logger = s.config.Logger.Named("raft")
	// Raft's figures go to GET /v1/metrics (metrics.InstallRaftSink),
	// with the follower a replication figure is about as its peer_id
	// label only: the legacy copies with the ID in the metric's name
	// would add series per server ever known.
	metrics.InstallRaftSink()
	conf.NoLegacyTelemetry = true
	// A leader that commits its own removal (remove-peer naming it) steps
	// down and keeps its Raft, as Nomad's servers do: the server is still
	// running, its join loop asks to be added again, and it follows once
	// it is. Raft's default stops Raft for good, leaving a process that
	// answers nothing, and that the leader would add back as a voter that
	// never votes.
	conf.ShutdownOnRemove = false
	// Leadership changes arrive here; the buffer lets raft never block on us.
	notify := make(chan bool, 10)
	conf.NotifyCh = notify
	s.leaderNotify = notify

	var stream raft.StreamLayer = s.raftLayer
	if s.gate != nil {
		stream = gatedStream{StreamLayer: stream, g: s.gate}
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 3,
		Timeout: s.config.RaftTimeout,
		Logger:  s.config.Logger.Named("raft-net"),
	})
	// Set at once, so that a NewServer that fails below closes it: its
	// goroutine accepting Raft connections would otherwise outlive the
	// server, logging each failed accept.
	s.raftTransport = trans

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if s.config.DevMode && s.config.DataDir == "" {
		store := raft.NewInmemStore()
		logs, stable = store, store
		snaps = raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(s.config.DataDir, raftDirName)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating the raft dir: %w", err)
		}
		stores, err := openLogStore(dir, s.config.RaftLogStore, s.config.walSegmentSize, s.config.Logger.Named("raft-logstore"))
		if err != nil {
			return err
		}
		s.raftStore = stores
		cache, err := raft.NewLogCache(logCacheSize, stores.logs)
		if err != nil {
			return err
		}
		logs, stable = cache, stores.logs
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, snapshotsRetain, s.config.Logger.Named("snapshot"))
		if err != nil {
			return fmt.Errorf("opening the snapshot store: %w", err)
		}
		snaps = fss
	}

	hasState, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("reading raft state: %w", err)
	}
	s.members.setBootstrapped(hasState)
	if s.config.BootstrapExpect == 1 && !hasState {
		cfg := raft.Configuration{Servers: []raft.Server{{
			ID: conf.LocalID, Address: trans.LocalAddr(), Suffrage: raft.Voter,
		}}}
		if err := raft.BootstrapCluster(&conf, logs, stable, snaps, trans, cfg); err != nil {
			return fmt.Errorf("bootstrapping a single-server cluster: %w", err)
		}
		s.members.setBootstrapped(true)
	}
	var machine raft.BatchingFSM = s.fsm
	if s.config.wrapFSM != nil {
		machine = s.config.wrapFSM(machine)
	}
	r, err := raft.NewRaft(&conf, machine, logs, stable, snaps, trans)
	if err != nil {
		return fmt.Errorf("starting raft: %w", err)
	}
	s.raft = r
	if r.Stats()["last_snapshot_index"] != "0" {
		// NewRaft restored the latest snapshot: the whole state decoded
		// and inserted in one go, whose garbage (the decoder's buffers,
		// the restore transaction's copies) leaves the heap at its peak.
		// The runtime returns free pages to the OS only slowly, so a
		// restarted server held about twice the memory of one that built
		// the same state live; give them back now, once.
		debug.FreeOSMemory()
	}
	return nil
}
