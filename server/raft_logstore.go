package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	walmetrics "github.com/hashicorp/raft-wal/metrics"
	"go.etcd.io/bbolt"
)

// The Raft log store backends, named as Consul's raft_logstore.backend.
//
// wal (hashicorp/raft-wal) keeps the log in append-only segment files:
// an append is one write and one fsync, and truncating the log after a
// snapshot deletes whole files. boltdb (hashicorp/raft-boltdb) keeps it
// in a copy-on-write B-tree: every append commits a transaction with two
// fsyncs (the pages, then the meta page), and the space truncations free
// is tracked in a freelist the file never gives back. On this project's
// 2-core test machine a bare 3-server Raft cluster on wal applies 1.7-2x
// as many entries per second with 16 writers as on boltdb, which is what
// volume registers and claims wait on.
//
// A new server starts on wal, as Consul's servers do (its documentation
// for 1.21: "Consul logs the Raft index with the write-ahead log (WAL)
// LogStore backend"; BoltDB was the default of previous versions), and as
// Nomad's can, with "nomad operator raft migrate-backend" to move a
// server's log from boltdb. A server whose raft dir already holds a boltdb
// log keeps it until the operator moves it ("volplane operator raft
// migrate-backend", see MigrateLogStore); raft_logstore.backend = "boltdb"
// still starts a new server on boltdb.
const (
	LogStoreWAL    = "wal"
	LogStoreBoltDB = "boltdb"
	// DefaultLogStore is the backend of a server whose raft dir holds no
	// log yet.
	DefaultLogStore = LogStoreWAL
)

// walDirName is the wal backend's directory in the raft dir, beside where
// boltdb keeps raft.db.
const walDirName = "wal"

// ValidLogStoreBackend checks a raft_logstore.backend setting; "" picks
// the backend the raft dir already holds, or the default.
func ValidLogStoreBackend(b string) error {
	switch b {
	case "", LogStoreWAL, LogStoreBoltDB:
		return nil
	}
	return fmt.Errorf("raft_logstore.backend %q is not one of %q or %q", b, LogStoreWAL, LogStoreBoltDB)
}

// RaftLogStore is a backend's store: Raft's log and its stable store
// (terms and votes) in one.
type RaftLogStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// OpenLogStore opens a log store of backend ("" for DefaultLogStore) in
// dir as a server opens its own, for Raft run outside a server (the
// bench's bare cluster).
func OpenLogStore(dir, backend string, logger hclog.Logger) (RaftLogStore, error) {
	stores, err := openLogStore(dir, backend, 0, logger)
	if err != nil {
		return nil, err
	}
	return stores.logs, nil
}

// raftStores holds what must be closed after Raft shuts down: the log
// store, when the server has one on disk, and which backend it is.
type raftStores struct {
	logs    RaftLogStore
	backend string
}

func (r raftStores) Close() error {
	if r.logs != nil {
		return r.logs.Close()
	}
	return nil
}

// storedLogBackend reports which backend's log the raft dir holds: ""
// when none. Both at once is refused: which one the server last wrote
// cannot be told, and taking the wrong one would roll its log back.
func storedLogBackend(dir string) (string, error) {
	bolt, err := exists(filepath.Join(dir, raftDBFile))
	if err != nil {
		return "", err
	}
	wal, err := exists(filepath.Join(dir, walDirName))
	if err != nil {
		return "", err
	}
	switch {
	case bolt && wal:
		return "", fmt.Errorf("raft dir %s holds both a boltdb log (%s) and a wal log (%s/): "+
			"one of them is left over from an earlier setup; move the one this server did not last run with out of the raft dir",
			dir, raftDBFile, walDirName)
	case bolt:
		return LogStoreBoltDB, nil
	case wal:
		return LogStoreWAL, nil
	}
	return "", nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("checking the raft dir: %w", err)
}

// openLogStore opens the log store in the raft dir: the backend asked,
// or when none is, the one the dir already holds, or DefaultLogStore for
// a new server. A server's log cannot change backend in place: its log
// and its snapshots must agree, so asking for another backend than the
// stored one is an error that says how to move.
func openLogStore(dir, asked string, walSegmentSize int, logger hclog.Logger) (raftStores, error) {
	if err := ValidLogStoreBackend(asked); err != nil {
		return raftStores{}, err
	}
	stored, err := storedLogBackend(dir)
	if err != nil {
		return raftStores{}, err
	}
	backend := asked
	switch {
	case asked == "" && stored != "":
		backend = stored
	case asked == "":
		backend = DefaultLogStore
	case stored != "" && stored != asked:
		return raftStores{}, fmt.Errorf("raft_logstore.backend is %q but the raft dir %s holds a %s log: "+
			"a server's log store cannot be changed in place. Either set backend = %q (or remove the setting), or, "+
			"to move this server to %s, stop it and run \"volplane operator raft migrate-backend -to=%s %s\", "+
			"which copies its log and keeps the old one as a backup",
			asked, dir, stored, stored, asked, asked, filepath.Dir(dir))
	}
	store, err := openStoreAt(storePath(dir, backend), backend, walSegmentSize, nil, logger)
	if err != nil {
		return raftStores{}, fmt.Errorf("opening the raft log store (%s) in %s: %w", backend, dir, err)
	}
	logger.Info("raft log store opened", "backend", backend, "dir", dir)
	return raftStores{logs: store, backend: backend}, nil
}

// openStoreAt opens, or creates, a store of backend at path: the wal
// backend's directory or the boltdb backend's file. bolt, when set, is
// the boltdb file's options (a read-only open); a walSegmentSize of 0 is
// raft-wal's default.
func openStoreAt(path, backend string, walSegmentSize int, bolt *bbolt.Options, logger hclog.Logger) (RaftLogStore, error) {
	if backend != LogStoreWAL {
		return raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: bolt})
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("creating the raft log dir: %w", err)
	}
	// raft-wal's figures (appends, bytes written, segment rotations,
	// truncations) go to the process's go-metrics sink as raft.wal.*, as
	// raft-boltdb's go there as raft.boltdb.*. The collector keeps the
	// sink installed when it is made, so it is made here.
	return raftwal.Open(path, raftwal.WithLogger(logger), raftwal.WithSegmentSize(walSegmentSize),
		raftwal.WithMetricsCollector(walmetrics.NewGoMetricsCollector([]string{"raft", "wal"}, nil, nil)))
}

var _ io.Closer = raftStores{}
