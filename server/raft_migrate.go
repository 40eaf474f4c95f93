package server

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"go.etcd.io/bbolt"
)

// A server's Raft log moves from one backend to the other offline, as
// Nomad's "operator raft migrate-backend" moves it: every entry and the
// stable store's term and vote are copied into a new store beside the
// old one, read back and compared, and only then does the new store take
// its name and the old one step aside as a backup. At every moment a
// crash leaves a raft dir the server either opens as it was, or refuses
// to open with a message that says what is left over (both logs at once,
// see storedLogBackend); never one that opens as an empty log, which
// would let the server forget its vote.

// stableKeys are the keys hashicorp/raft keeps in its stable store: the
// current term and the last vote, term and candidate.
var stableKeys = struct{ uint64s, bytes [][]byte }{
	uint64s: [][]byte{[]byte("CurrentTerm"), []byte("LastVoteTerm")},
	bytes:   [][]byte{[]byte("LastVoteCand")},
}

// migrateBatch bounds the entries of one append to the new store.
const migrateBatch = 512

// lockWait is how long opening a store waits for the lock a running
// server holds before it says the server is running.
const lockWait = time.Second

// LogStoreMigration is what MigrateLogStore did.
type LogStoreMigration struct {
	From, To string
	// Entries is the number of log entries copied, FirstIndex and
	// LastIndex their range (0 and 0 for an empty log).
	Entries               uint64
	FirstIndex, LastIndex uint64
	// Backup is where the old store now is.
	Backup string
}

// MigrateLogStore moves the Raft log in dataDir's raft dir to backend to
// (LogStoreWAL or LogStoreBoltDB). The server must be stopped: a store
// another process holds is refused. progress, when set, is called after
// each batch of entries with the count copied so far and the total.
func MigrateLogStore(dataDir, to string, logger hclog.Logger, progress func(done, total uint64)) (*LogStoreMigration, error) {
	if to == "" {
		return nil, errors.New("no backend to migrate to")
	}
	if err := ValidLogStoreBackend(to); err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, raftDirName)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a server's data dir: it has no %s/ dir", dataDir, raftDirName)
	} else if err != nil {
		return nil, fmt.Errorf("reading the data dir: %w", err)
	}
	from, err := storedLogBackend(dir)
	if err != nil {
		return nil, err
	}
	switch from {
	case "":
		return nil, fmt.Errorf("the raft dir %s holds no Raft log (neither %s nor %s/)", dir, raftDBFile, walDirName)
	case to:
		return nil, fmt.Errorf("the raft dir %s already holds a %s log", dir, to)
	}
	m := &LogStoreMigration{From: from, To: to}

	// The new store is built under a name no server opens; one left by
	// a migration that stopped half way is started over.
	final, building := storePath(dir, to), storePath(dir, to)+".migrating"
	if err := os.RemoveAll(building); err != nil {
		return nil, fmt.Errorf("removing the unfinished migration at %s: %w", building, err)
	}
	if err := buildCopy(dir, from, to, building, m, progress, logger); err != nil {
		os.RemoveAll(building)
		return nil, err
	}

	// The new store takes its name while the old one still has its own:
	// a crash between the two renames leaves both, which a server
	// refuses to open, saying which is which.
	if err := os.Rename(building, final); err != nil {
		return nil, fmt.Errorf("moving the new %s store into place: %w", to, err)
	}
	if m.Backup, err = backupPath(storePath(dir, from)); err != nil {
		return nil, err
	}
	if err := os.Rename(storePath(dir, from), m.Backup); err != nil {
		return nil, fmt.Errorf("the %s log is in place but the %s one could not be moved aside to %s: %w; "+
			"move %s out of the raft dir before starting the server", to, from, m.Backup, err, storePath(dir, from))
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	logger.Info("raft log store migrated", "from", from, "to", to, "entries", m.Entries,
		"first_index", m.FirstIndex, "last_index", m.LastIndex, "backup", m.Backup)
	return m, nil
}

// buildCopy copies the log of backend from in dir into a new store of
// backend to at building, and closes both.
func buildCopy(dir, from, to, building string, m *LogStoreMigration, progress func(done, total uint64), logger hclog.Logger) (err error) {
	src, err := openMigrationSource(dir, from, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := src.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the %s store: %w", from, cerr)
		}
	}()
	dst, err := openStoreAt(building, to, 0, nil, logger)
	if err != nil {
		return fmt.Errorf("creating the new %s store at %s: %w", to, building, err)
	}
	if err := copyLog(src, dst, m, progress); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("closing the new %s store: %w", to, err)
	}
	return nil
}

// backupPath names the backup of the store at path: path.backup-<time>,
// with a number after it when a backup of that second exists already (a
// rename onto a file would replace it).
func backupPath(path string) (string, error) {
	base := fmt.Sprintf("%s.backup-%s", path, time.Now().UTC().Format("20060102T150405Z"))
	for i := 1; ; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		switch ok, err := exists(name); {
		case err != nil:
			return "", err
		case !ok:
			return name, nil
		}
	}
}

// storePath is where backend keeps its log in the raft dir.
func storePath(dir, backend string) string {
	if backend == LogStoreWAL {
		return filepath.Join(dir, walDirName)
	}
	return filepath.Join(dir, raftDBFile)
}

// openMigrationSource opens the stored log, refusing one a running
// server holds. raft-wal waits without end for its metadata file's lock,
// so that lock is tried first, read-only, with a bound.
func openMigrationSource(dir, backend string, logger hclog.Logger) (RaftLogStore, error) {
	lockFile := filepath.Join(dir, raftDBFile)
	if backend == LogStoreWAL {
		lockFile = filepath.Join(dir, walDirName, metadb.FileName)
	}
	probe, err := bbolt.Open(lockFile, 0o600, &bbolt.Options{ReadOnly: true, Timeout: lockWait})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("the %s log in %s is in use: stop the server before migrating its log store", backend, dir)
		}
		return nil, fmt.Errorf("opening the %s log in %s: %w", backend, dir, err)
	}
	if err := probe.Close(); err != nil {
		return nil, err
	}
	// Read-only, so the stored log stays as it was.
	store, err := openStoreAt(storePath(dir, backend), backend, 0, &bbolt.Options{ReadOnly: true, Timeout: lockWait}, logger)
	if err != nil {
		return nil, fmt.Errorf("opening the %s log in %s: %w", backend, dir, err)
	}
	return store, nil
}

// copyLog copies src's entries and stable keys into dst, then reads every
// entry back from dst and compares it with src's.
func copyLog(src, dst RaftLogStore, m *LogStoreMigration, progress func(done, total uint64)) error {
	first, err := src.FirstIndex()
	if err != nil {
		return fmt.Errorf("reading the first index: %w", err)
	}
	last, err := src.LastIndex()
	if err != nil {
		return fmt.Errorf("reading the last index: %w", err)
	}
	if last > 0 {
		m.FirstIndex, m.LastIndex, m.Entries = first, last, last-first+1
	}
	batch := make([]*raft.Log, 0, migrateBatch)
	flush := func(done uint64) error {
		if len(batch) == 0 {
			return nil
		}
		if err := dst.StoreLogs(batch); err != nil {
			return fmt.Errorf("writing entries %d-%d: %w", batch[0].Index, batch[len(batch)-1].Index, err)
		}
		batch = batch[:0]
		if progress != nil {
			progress(done, m.Entries)
		}
		return nil
	}
	for i := first; last > 0 && i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return fmt.Errorf("reading entry %d of %d-%d: %w", i, first, last, err)
		}
		if batch = append(batch, l); len(batch) == migrateBatch {
			if err := flush(i - first + 1); err != nil {
				return err
			}
		}
	}
	if err := flush(m.Entries); err != nil {
		return err
	}
	if err := copyStable(stableKeys.uint64s, src.GetUint64, dst.SetUint64); err != nil {
		return err
	}
	if err := copyStable(stableKeys.bytes, src.Get, dst.Set); err != nil {
		return err
	}
	return verifyLog(src, dst, first, last)
}

// copyStable copies the stable store's keys from get to set; a key never
// set stays unset.
func copyStable[T any](keys [][]byte, get func([]byte) (T, error), set func([]byte, T) error) error {
	for _, k := range keys {
		v, err := get(k)
		switch {
		case isNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("reading %s: %w", k, err)
		}
		if err := set(k, v); err != nil {
			return fmt.Errorf("writing %s: %w", k, err)
		}
	}
	return nil
}

// verifyLog reads back every entry and the range from dst.
func verifyLog(src, dst RaftLogStore, first, last uint64) error {
	if last == 0 {
		return nil
	}
	df, err := dst.FirstIndex()
	if err != nil {
		return err
	}
	dl, err := dst.LastIndex()
	if err != nil {
		return err
	}
	if df != first || dl != last {
		return fmt.Errorf("the new store holds entries %d-%d, want %d-%d", df, dl, first, last)
	}
	var a, b raft.Log
	for i := first; i <= last; i++ {
		if err := src.GetLog(i, &a); err != nil {
			return fmt.Errorf("reading entry %d again: %w", i, err)
		}
		if err := dst.GetLog(i, &b); err != nil {
			return fmt.Errorf("reading entry %d back from the new store: %w", i, err)
		}
		if a.Index != b.Index || a.Term != b.Term || a.Type != b.Type ||
			!bytes.Equal(a.Data, b.Data) || !bytes.Equal(a.Extensions, b.Extensions) {
			return fmt.Errorf("entry %d reads back differently from the new store", i)
		}
	}
	return nil
}

// isNotFound reports a stable store's answer for a key never set: each
// backend has its own.
func isNotFound(err error) bool {
	return errors.Is(err, raftwal.ErrNotFound) || errors.Is(err, raftboltdb.ErrKeyNotFound)
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing the raft dir: %w", err)
	}
	return nil
}
