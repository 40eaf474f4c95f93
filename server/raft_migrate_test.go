package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"
)

func otherBackend(b string) string {
	if b == LogStoreWAL {
		return LogStoreBoltDB
	}
	return LogStoreWAL
}

// fillLog writes entries 1..n of every kind to a new store of backend in
// dataDir's raft dir, drops the first cut of them as a snapshot's
// truncation does, sets the term and vote, and returns what it holds.
func fillLog(t *testing.T, dataDir, backend string, n, cut uint64) []*raft.Log {
	t.Helper()
	dir := filepath.Join(dataDir, raftDirName)
	must.NoError(t, os.MkdirAll(dir, 0o700))
	stores, err := openLogStore(dir, backend, 0, hclog.NewNullLogger())
	must.NoError(t, err)
	var logs []*raft.Log
	for i := uint64(1); i <= n; i++ {
		l := &raft.Log{Index: i, Term: 1 + i/500, Type: raft.LogType(i % 4), Data: []byte(fmt.Sprintf("entry %d", i))}
		if i%3 == 0 {
			l.Extensions = []byte{byte(i)}
		}
		logs = append(logs, l)
	}
	must.NoError(t, stores.logs.StoreLogs(logs))
	must.NoError(t, stores.logs.DeleteRange(1, cut))
	must.NoError(t, stores.logs.SetUint64([]byte("CurrentTerm"), 9))
	must.NoError(t, stores.logs.SetUint64([]byte("LastVoteTerm"), 8))
	must.NoError(t, stores.logs.Set([]byte("LastVoteCand"), []byte("10.0.0.2:4647")))
	must.NoError(t, stores.Close())
	return logs[cut:]
}

// checkLog opens dataDir's raft dir as a server does and checks that it
// is on backend and holds want, and the term and vote fillLog set.
func checkLog(t *testing.T, dataDir, backend string, want []*raft.Log) {
	t.Helper()
	stores, err := openLogStore(filepath.Join(dataDir, raftDirName), "", 0, hclog.NewNullLogger())
	must.NoError(t, err)
	defer stores.Close()
	must.Eq(t, backend, stores.backend)
	first, err := stores.logs.FirstIndex()
	must.NoError(t, err)
	last, err := stores.logs.LastIndex()
	must.NoError(t, err)
	must.Eq(t, want[0].Index, first)
	must.Eq(t, want[len(want)-1].Index, last)
	for _, w := range want {
		var got raft.Log
		must.NoError(t, stores.logs.GetLog(w.Index, &got))
		must.Eq(t, w.Term, got.Term)
		must.Eq(t, w.Type, got.Type)
		must.Eq(t, w.Data, got.Data)
		must.Eq(t, len(w.Extensions), len(got.Extensions), must.Sprintf("entry %d", w.Index))
	}
	term, err := stores.logs.GetUint64([]byte("CurrentTerm"))
	must.NoError(t, err)
	must.Eq(t, 9, term)
	voteTerm, err := stores.logs.GetUint64([]byte("LastVoteTerm"))
	must.NoError(t, err)
	must.Eq(t, 8, voteTerm)
	cand, err := stores.logs.Get([]byte("LastVoteCand"))
	must.NoError(t, err)
	must.Eq(t, "10.0.0.2:4647", string(cand))
}

// A log moves to the other backend and back with every entry, term and
// vote, and each old store is kept as a backup beside the new one.
func TestMigrateLogStore_BothWaysKeepsEveryEntry(t *testing.T) {
	for _, from := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(from, func(t *testing.T) {
			dataDir := t.TempDir()
			want := fillLog(t, dataDir, from, 1300, 100)
			to := otherBackend(from)

			var calls []uint64
			m, err := MigrateLogStore(dataDir, to, hclog.NewNullLogger(), func(done, total uint64) {
				must.Eq(t, 1200, total)
				calls = append(calls, done)
			})
			must.NoError(t, err)
			must.Eq(t, LogStoreMigration{From: from, To: to, Entries: 1200, FirstIndex: 101, LastIndex: 1300, Backup: m.Backup}, *m)
			must.Eq(t, []uint64{512, 1024, 1200}, calls)
			must.StrHasPrefix(t, storePath(filepath.Join(dataDir, raftDirName), from)+".backup-", m.Backup)
			_, err = os.Stat(m.Backup)
			must.NoError(t, err)
			_, err = os.Stat(storePath(filepath.Join(dataDir, raftDirName), to) + ".migrating")
			must.True(t, os.IsNotExist(err))
			checkLog(t, dataDir, to, want)

			// And back, and over again within the second: each backup
			// keeps a name of its own.
			back, err := MigrateLogStore(dataDir, from, hclog.NewNullLogger(), nil)
			must.NoError(t, err)
			must.Eq(t, 1200, back.Entries)
			checkLog(t, dataDir, from, want)
			again, err := MigrateLogStore(dataDir, to, hclog.NewNullLogger(), nil)
			must.NoError(t, err)
			must.NotEq(t, m.Backup, again.Backup)
			_, err = os.Stat(m.Backup)
			must.NoError(t, err, must.Sprint("the first backup is still there"))
			checkLog(t, dataDir, to, want)
		})
	}
}

// A log store a running server holds, one already on the backend asked,
// a raft dir with no log, and a dir that is not a data dir are refused
// with what is wrong, and nothing is changed.
func TestMigrateLogStore_RefusesWhatItCannotMove(t *testing.T) {
	for _, backend := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run("in use/"+backend, func(t *testing.T) {
			dataDir := t.TempDir()
			fillLog(t, dataDir, backend, 10, 0)
			dir := filepath.Join(dataDir, raftDirName)
			held, err := openLogStore(dir, "", 0, hclog.NewNullLogger())
			must.NoError(t, err)
			defer held.Close()
			_, err = MigrateLogStore(dataDir, otherBackend(backend), hclog.NewNullLogger(), nil)
			must.ErrorContains(t, err, "the "+backend+" log in "+dir+" is in use: stop the server before migrating its log store")
			stored, err := storedLogBackend(dir)
			must.NoError(t, err)
			must.Eq(t, backend, stored)
		})
	}

	dataDir := t.TempDir()
	fillLog(t, dataDir, LogStoreWAL, 10, 0)
	_, err := MigrateLogStore(dataDir, LogStoreWAL, hclog.NewNullLogger(), nil)
	must.ErrorContains(t, err, "already holds a wal log")

	empty := t.TempDir()
	must.NoError(t, os.Mkdir(filepath.Join(empty, raftDirName), 0o700))
	_, err = MigrateLogStore(empty, LogStoreWAL, hclog.NewNullLogger(), nil)
	must.ErrorContains(t, err, "holds no Raft log (neither raft.db nor wal/)")

	_, err = MigrateLogStore(filepath.Join(empty, "nope"), LogStoreWAL, hclog.NewNullLogger(), nil)
	must.ErrorContains(t, err, "is not a server's data dir")

	_, err = MigrateLogStore(dataDir, "rocksdb", hclog.NewNullLogger(), nil)
	must.ErrorContains(t, err, `raft_logstore.backend "rocksdb" is not one of`)
}

// What a migration that stopped half way left under the building name is
// started over, not taken for a finished store.
func TestMigrateLogStore_StartsOverAnUnfinishedOne(t *testing.T) {
	dataDir := t.TempDir()
	want := fillLog(t, dataDir, LogStoreBoltDB, 40, 0)
	dir := filepath.Join(dataDir, raftDirName)
	partial := storePath(dir, LogStoreWAL) + ".migrating"
	must.NoError(t, os.MkdirAll(partial, 0o700))
	must.NoError(t, os.WriteFile(filepath.Join(partial, "00000000000000000001-0000000000000001.wal"), []byte("torn"), 0o600))

	m, err := MigrateLogStore(dataDir, LogStoreWAL, hclog.NewNullLogger(), nil)
	must.NoError(t, err)
	must.Eq(t, 40, m.Entries)
	checkLog(t, dataDir, LogStoreWAL, want)
}

// A server stopped on one backend, migrated, and started with no
// raft_logstore setting comes back on the other with its state, its log
// and its term, and takes writes.
func TestServer_MigratedLogKeepsItsStateAndTerm(t *testing.T) {
	for _, from := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(from, func(t *testing.T) {
			stopped := stopAfterAWrite(t, from)
			to := otherBackend(from)
			m, err := MigrateLogStore(stopped.cfg.DataDir, to, hclog.NewNullLogger(), nil)
			must.NoError(t, err)
			must.Eq(t, stopped.lastIndex, m.LastIndex)
			stopped.restartOn(t, to)
		})
	}
}
