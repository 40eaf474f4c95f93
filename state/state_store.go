package state

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-memdb"
)

// StateStore is the replicated state of one server. The FSM is its only
// writer; every write takes the Raft index of the log entry it applies, so
// every replica holds the same rows with the same indexes.
//
// Rows returned by reads are shared with the store and with other readers:
// callers must copy them before changing anything.
type StateStore struct {
	db *memdb.MemDB

	// abandonCh is closed when a snapshot restore replaces this store, so
	// blocking queries waiting on it wake up and read the new one.
	abandonCh   chan struct{}
	abandonOnce sync.Once

	// events publishes every committed write (see events.go); nil for a
	// snapshot, which is never written.
	events *EventBroker

	// stubs memoizes complete volume lists (see stubMemo), and changes
	// records the latest volume writes, to bring them up to date; both are
	// shared with the store's snapshots, whose scans are keyed by their
	// own indexes.
	stubs   *stubMemo
	changes *volumeChanges
}

// NewStateStore returns an empty store.
func NewStateStore() (*StateStore, error) {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		return nil, fmt.Errorf("state: building schema: %w", err)
	}
	s := &StateStore{db: db, abandonCh: make(chan struct{}), stubs: &stubMemo{}, changes: &volumeChanges{}}
	s.events = newEventBroker(s)
	return s, nil
}

// StateSnapshot is a read-only, point-in-time view of a store: later writes
// to the store do not show through it. It has every read method of
// StateStore.
type StateSnapshot struct {
	StateStore
}

// Snapshot returns a point-in-time view of the store. It costs O(1): memdb
// trees are immutable, so the view shares them.
func (s *StateStore) Snapshot() (*StateSnapshot, error) {
	return &StateSnapshot{StateStore{db: s.db.Snapshot(), abandonCh: make(chan struct{}), stubs: s.stubs, changes: s.changes}}, nil
}

// AbandonCh is closed by Abandon. Blocking queries add it to their watch set
// so that a snapshot restore, which swaps the store out from under them,
// wakes them up.
func (s *StateStore) AbandonCh() <-chan struct{} { return s.abandonCh }

// Abandon marks the store as replaced. It may be called more than once.
func (s *StateStore) Abandon() {
	s.abandonOnce.Do(func() { close(s.abandonCh) })
}

// writeTxn opens a write transaction that records what it changes, so that
// commit knows which index rows to bump.
func (s *StateStore) writeTxn() *memdb.Txn {
	txn := s.db.Txn(true)
	txn.TrackChanges()
	// Runs only if the transaction commits, after commit bumped its index
	// rows: the events carry that index.
	txn.Defer(func() {
		changes := txn.Changes()
		s.recordVolumeChanges(changes)
		s.publishCommitted(changes)
	})
	return txn
}

// commit bumps the index row of every table the transaction changed, then
// commits. A transaction that changed nothing bumps nothing, so watchers of a
// table do not wake for a write that was skipped as a no-op.
func commit(txn *memdb.Txn, index uint64) error {
	return commitTables(txn, func(string) uint64 { return index })
}

// commitTables is commit with each changed table's index given by indexOf.
func commitTables(txn *memdb.Txn, indexOf func(table string) uint64) error {
	var tables []string
	for _, ch := range txn.Changes() {
		if ch.Table != TableIndex && !slices.Contains(tables, ch.Table) {
			tables = append(tables, ch.Table)
		}
	}
	for _, t := range tables {
		if err := bumpIndexTxn(txn, t, indexOf(t)); err != nil {
			return err
		}
	}
	txn.Commit()
	return nil
}

// bumpIndexTxn records index as the table's last change. Raft indexes only
// grow, but a row is never moved backwards: a lower value would make a
// blocking query return stale results as fresh.
func bumpIndexTxn(txn *memdb.Txn, table string, index uint64) error {
	raw, err := txn.First(TableIndex, indexID, table)
	if err != nil {
		return fmt.Errorf("state: reading index of %s: %w", table, err)
	}
	if raw != nil && raw.(*IndexEntry).Value >= index {
		return nil
	}
	if err := txn.Insert(TableIndex, &IndexEntry{Key: table, Value: index}); err != nil {
		return fmt.Errorf("state: writing index of %s: %w", table, err)
	}
	return nil
}

// Index returns the Raft index of the table's last change, 0 if none.
func (s *StateStore) Index(table string) (uint64, error) {
	return indexWatchTxn(s.db.Txn(false), nil, table)
}

// LatestIndex returns the highest index over all tables.
func (s *StateStore) LatestIndex() (uint64, error) {
	iter, err := s.db.Txn(false).Get(TableIndex, indexID)
	if err != nil {
		return 0, fmt.Errorf("state: listing indexes: %w", err)
	}
	var latest uint64
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		latest = max(latest, raw.(*IndexEntry).Value)
	}
	return latest, nil
}

// IndexWatch returns the highest index of the given tables and adds their
// index rows to ws, so a blocking query on them wakes when any changes.
func (s *StateStore) IndexWatch(ws memdb.WatchSet, tables ...string) (uint64, error) {
	txn := s.db.Txn(false)
	var latest uint64
	for _, t := range tables {
		idx, err := indexWatchTxn(txn, ws, t)
		if err != nil {
			return 0, err
		}
		latest = max(latest, idx)
	}
	return latest, nil
}

// Indexes iterates over every row of the index table (*IndexEntry), for
// snapshots.
func (s *StateStore) Indexes() (memdb.ResultIterator, error) {
	iter, err := s.db.Txn(false).Get(TableIndex, indexID)
	if err != nil {
		return nil, fmt.Errorf("state: listing indexes: %w", err)
	}
	return iter, nil
}

func indexWatchTxn(txn *memdb.Txn, ws memdb.WatchSet, table string) (uint64, error) {
	ch, raw, err := txn.FirstWatch(TableIndex, indexID, table)
	if err != nil {
		return 0, fmt.Errorf("state: reading index of %s: %w", table, err)
	}
	watch(ws, ch)
	if raw == nil {
		return 0, nil
	}
	return raw.(*IndexEntry).Value, nil
}

// watch adds ch to ws when the caller asked to be told of changes.
func watch(ws memdb.WatchSet, ch <-chan struct{}) {
	if ws != nil && ch != nil {
		ws.Add(ch)
	}
}

// StateRestore loads rows from a snapshot into a fresh store in one
// transaction. Rows are taken as they were persisted: derived rows (plugins)
// are restored, not recomputed, and index rows come from the snapshot.
type StateRestore struct {
	txn *memdb.Txn
}

// Restore opens a restore transaction. The caller must Commit or Abort it.
func (s *StateStore) Restore() (*StateRestore, error) {
	return &StateRestore{txn: s.db.Txn(true)}, nil
}

// Commit makes every restored row visible at once.
func (r *StateRestore) Commit() error {
	r.txn.Commit()
	return nil
}

// Abort drops every restored row. It is a no-op after Commit.
func (r *StateRestore) Abort() { r.txn.Abort() }

// IndexRestore restores one index row.
func (r *StateRestore) IndexRestore(e *IndexEntry) error {
	if err := r.txn.Insert(TableIndex, &IndexEntry{Key: e.Key, Value: e.Value}); err != nil {
		return fmt.Errorf("state: restoring index of %s: %w", e.Key, err)
	}
	return nil
}
