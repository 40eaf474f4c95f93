package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

// TestE2E_MigrateBackend moves one server of a running cluster from the
// boltdb log store to wal as an operator would: stop it, run `volplane
// operator raft migrate-backend` on its data dir, start it again without a
// raft_logstore setting. The others take writes meanwhile; the moved
// server comes back on wal with its log, catches up on what it missed, and
// serves reads and writes.
func TestE2E_MigrateBackend(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3,
		ServerConfig: "server {\n  raft_logstore {\n    backend = \"boltdb\"\n  }\n}\n"})
	leader := WaitForLeader(t, c)
	registerNodes(t, c, leader, 1, "dev")
	secret := newSecret(t)
	specs := t.TempDir()
	register := func(s Server, id string) {
		t.Helper()
		res := c.CLI(t, s, "volume register", writeVolumeSpec(t, specs, id, secret))
		must.Zero(t, res.Code, must.Sprint(res))
	}
	register(leader, "vol-before")

	moved := Followers(c, leader)[0]
	waitVolume(t, moved, "vol-before", secret)
	must.NoError(t, c.Stop(t, moved))
	register(leader, "vol-while-down")

	raftDir := filepath.Join(c.dir, moved.Name(), "raft")
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "operator", "raft", "migrate-backend", "-force", filepath.Dir(raftDir))
	cmd.Env = cliEnv()
	out, err := cmd.CombinedOutput()
	must.NoError(t, err, must.Sprint(string(out)))
	must.StrContains(t, string(out), "Migrated the Raft log from boltdb to wal: ")
	must.DirExists(t, filepath.Join(raftDir, "wal"))
	_, err = os.Stat(filepath.Join(raftDir, "raft.db"))
	must.True(t, os.IsNotExist(err), must.Sprint("raft.db is moved aside"))
	backups, err := filepath.Glob(filepath.Join(raftDir, "raft.db.backup-*"))
	must.NoError(t, err)
	must.Len(t, 1, backups)

	// Its config named boltdb, which the dir no longer holds (a server so
	// configured refuses to start and says so: TestServer_RestartKeepsItsLog
	// OnEitherBackend); without the setting it opens what the dir holds.
	must.NoError(t, os.WriteFile(filepath.Join(c.dir, "server.hcl"), []byte("# raft_logstore removed after the migration\n"), 0o644))
	c.Restart(t, moved)

	checkVolume(t, "stale read on the moved server", "vol-while-down", waitVolume(t, moved, "vol-while-down", secret))
	must.StrContains(t, c.Logs(t)[moved.Name()], "raft log store opened: backend=wal")
	register(moved, "vol-after")
	checkVolume(t, "read on the leader", "vol-after", waitVolume(t, WaitForLeader(t, c), "vol-after", secret))
}
