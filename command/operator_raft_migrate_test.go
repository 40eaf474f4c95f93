package command

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server"
)

// newBoltDataDir makes a stopped server's data dir whose Raft log, on
// boltdb, holds entries 1-3.
func newBoltDataDir(t *testing.T) string {
	t.Helper()
	dataDir := t.TempDir()
	must.NoError(t, os.Mkdir(filepath.Join(dataDir, "raft"), 0o700))
	store, err := server.OpenLogStore(filepath.Join(dataDir, "raft"), server.LogStoreBoltDB, hclog.NewNullLogger())
	must.NoError(t, err)
	must.NoError(t, store.StoreLogs([]*raft.Log{
		{Index: 1, Term: 1, Data: []byte("a")}, {Index: 2, Term: 1, Data: []byte("b")}, {Index: 3, Term: 2, Data: []byte("c")},
	}))
	must.NoError(t, store.SetUint64([]byte("CurrentTerm"), 2))
	must.NoError(t, store.Close())
	return dataDir
}

func TestOperatorRaftMigrateBackend(t *testing.T) {
	dataDir := newBoltDataDir(t)
	raftDir := filepath.Join(dataDir, "raft")

	// Not confirmed: nothing moves.
	r := run(t, "n\n", "operator", "raft", "migrate-backend", dataDir)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Migrate the Raft log in "+raftDir+" to the wal backend? The server must be stopped. [y/N]\nCanceling the migration\n", r.out)
	must.FileExists(t, filepath.Join(raftDir, "raft.db"))

	r = run(t, "y\n", "operator", "raft", "migrate-backend", dataDir)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "  copied 3 of 3 entries\n")
	must.StrContains(t, r.out, "Migrated the Raft log from boltdb to wal: 3 entries, indexes 1-3, read back and compared\n")
	must.StrContains(t, r.out, "The boltdb log is kept at "+filepath.Join(raftDir, "raft.db.backup-"))
	must.StrContains(t, r.out, `Start the server with no raft_logstore block, or with backend = "wal".`)
	must.DirExists(t, filepath.Join(raftDir, "wal"))
	_, err := os.Stat(filepath.Join(raftDir, "raft.db"))
	must.True(t, os.IsNotExist(err))

	// Again: already there.
	r = run(t, "", "operator", "raft", "migrate-backend", "-force", dataDir)
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error migrating the Raft log: the raft dir "+raftDir+" already holds a wal log\n", r.stderr)

	// And back, without a prompt.
	r = run(t, "", "operator", "raft", "migrate-backend", "-force", "-to=boltdb", dataDir)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Migrated the Raft log from wal to boltdb: 3 entries")
	must.FileExists(t, filepath.Join(raftDir, "raft.db"))
}

func TestOperatorRaftMigrateBackend_Usage(t *testing.T) {
	r := run(t, "", "operator", "raft", "migrate-backend")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes one argument: <path to data dir>")
	r = run(t, "", "operator", "raft", "migrate-backend", "-to=rocksdb", t.TempDir())
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, `-to: raft_logstore.backend "rocksdb" is not one of "wal" or "boltdb"`)
	notData := t.TempDir()
	r = run(t, "", "operator", "raft", "migrate-backend", "-force", notData)
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error migrating the Raft log: "+notData+" is not a server's data dir: it has no raft/ dir\n", r.stderr)
}
