package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/server"
)

const (
	// baselineMaxPool and baselineTimeout are the transport settings the
	// volplane servers use for Raft.
	baselineMaxPool = 3
	baselineTimeout = 10 * time.Second
	// baselineLogCache is the volplane servers' log cache in front of
	// the log store: the baseline keeps it so that the two differ only by
	// what volplane adds.
	baselineLogCache = 512
	// applyTimeout is the enqueue timeout of raft.Apply, as the servers'.
	applyTimeout = 30 * time.Second
)

// baseline is a bare 3-node hashicorp/raft cluster on loopback TCP with
// the volplane servers' log store (Config.RaftLogStore), file snapshots,
// a no-op FSM and volplane's Raft configuration: the floor under what
// volplane can do with the same disk.
type baseline struct {
	nodes  []*baselineNode
	leader *raft.Raft
	entry  []byte
}

type baselineNode struct {
	raft  *raft.Raft
	trans *raft.NetworkTransport
	store server.RaftLogStore
	// closing silences the transport's errors about connections reset
	// while the cluster shuts down.
	closing atomic.Bool
}

// startBaseline starts the cluster, bootstrapped with all three nodes as
// voters, and waits for a leader. Every entry applied is entryBytes long
// until setEntryBytes.
func startBaseline(ctx context.Context, cfg *Config, dir string, entryBytes int) (_ *baseline, err error) {
	b := &baseline{}
	b.setEntryBytes(entryBytes)
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
		}
	}()

	var servers []raft.Server
	for i := range clusterSize {
		name := fmt.Sprintf("baseline%d", i)
		logger := cfg.Logger.Named(name)
		n := &baselineNode{}
		b.nodes = append(b.nodes, n)
		pprof.Do(ctx, pprof.Labels("cluster", "baseline"), func(context.Context) {
			n.trans, err = raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, baselineMaxPool, baselineTimeout,
				quietWhenClosing{logger, &n.closing})
		})
		if err != nil {
			return nil, fmt.Errorf("baseline transport: %w", err)
		}
		servers = append(servers, raft.Server{
			ID: raft.ServerID(name), Address: n.trans.LocalAddr(), Suffrage: raft.Voter,
		})
	}
	for i, n := range b.nodes {
		name := string(servers[i].ID)
		logger := cfg.Logger.Named(name)
		nodeDir := filepath.Join(dir, name)
		if err := os.MkdirAll(nodeDir, 0o700); err != nil {
			return nil, err
		}
		n.store, err = server.OpenLogStore(nodeDir, cfg.logStore(), logger)
		if err != nil {
			return nil, fmt.Errorf("baseline store: %w", err)
		}
		logs, err := raft.NewLogCache(baselineLogCache, n.store)
		if err != nil {
			return nil, err
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(nodeDir, 2, logger)
		if err != nil {
			return nil, fmt.Errorf("baseline snapshot store: %w", err)
		}
		// The production configuration of the volplane servers.
		conf := *server.DefaultConfig().RaftConfig
		conf.LocalID = servers[i].ID
		conf.Logger = logger
		if err := raft.BootstrapCluster(&conf, logs, n.store, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
			return nil, fmt.Errorf("bootstrapping the baseline: %w", err)
		}
		pprof.Do(ctx, pprof.Labels("cluster", "baseline"), func(context.Context) {
			n.raft, err = raft.NewRaft(&conf, noopFSM{}, logs, n.store, snaps, n.trans)
		})
		if err != nil {
			return nil, fmt.Errorf("starting baseline raft: %w", err)
		}
	}
	if err := b.waitForLeader(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *baseline) waitForLeader(ctx context.Context) error {
	deadline := time.Now().Add(formTimeout)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if r := b.agreedLeader(); r != nil {
			if err := r.Barrier(applyTimeout).Error(); err == nil {
				b.leader = r
				return nil
			}
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the baseline cluster has no leader after %s", formTimeout)
}

// agreedLeader returns the leader when every node knows it.
func (b *baseline) agreedLeader() *raft.Raft {
	var addr raft.ServerAddress
	for _, n := range b.nodes {
		a, _ := n.raft.LeaderWithID()
		if a == "" || addr != "" && a != addr {
			return nil
		}
		addr = a
	}
	for _, n := range b.nodes {
		if n.trans.LocalAddr() == addr {
			return n.raft
		}
	}
	return nil
}

// setEntryBytes makes every entry applied from now on n bytes long; not
// while applies are in flight.
func (b *baseline) setEntryBytes(n int) {
	b.entry = make([]byte, n)
	// Random bytes, so nothing on the way gets to compress them.
	rand.Read(b.entry)
}

// apply commits one entry through the leader.
func (b *baseline) apply() error {
	return b.leader.Apply(b.entry, applyTimeout).Error()
}

// close shuts every node down and closes its stores and connections.
func (b *baseline) close() error {
	var errs []error
	for _, n := range b.nodes {
		n.closing.Store(true)
	}
	for _, n := range b.nodes {
		if n.raft != nil {
			errs = append(errs, n.raft.Shutdown().Error())
		}
	}
	for _, n := range b.nodes {
		if n.trans != nil {
			// Close leaves the pooled outgoing connections open, and the
			// goroutine serving each on the other side blocked reading it.
			n.trans.CloseStreams()
			errs = append(errs, n.trans.Close())
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
	}
	return errors.Join(errs...)
}

// quietWhenClosing drops error logs once its node shuts down: closing the
// pooled connections makes the other side log a read error for each.
type quietWhenClosing struct {
	hclog.Logger
	closing *atomic.Bool
}

func (q quietWhenClosing) Error(msg string, args ...any) {
	if !q.closing.Load() {
		q.Logger.Error(msg, args...)
	}
}

// noopFSM applies nothing: the baseline measures Raft and its stores only.
type noopFSM struct{}

func (noopFSM) Apply(*raft.Log) any                 { return nil }
func (noopFSM) Snapshot() (raft.FSMSnapshot, error) { return noopSnapshot{}, nil }
func (noopFSM) Restore(r io.ReadCloser) error       { return r.Close() }

type noopSnapshot struct{}

func (noopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (noopSnapshot) Release()                             {}
