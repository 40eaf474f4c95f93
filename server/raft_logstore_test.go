package server

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

func TestOpenLogStore_PicksTheStoredBackendOrTheDefault(t *testing.T) {
	logger := hclog.NewNullLogger()
	open := func(dir, asked string) (string, error) {
		stores, err := openLogStore(dir, asked, 0, logger)
		if err != nil {
			return "", err
		}
		must.NoError(t, stores.Close())
		return stores.backend, nil
	}

	// A new server starts on the default, wal.
	fresh := t.TempDir()
	got, err := open(fresh, "")
	must.NoError(t, err)
	must.Eq(t, LogStoreWAL, got)
	must.DirExists(t, filepath.Join(fresh, walDirName))

	// One set to boltdb stays on it when the setting goes.
	bolt := t.TempDir()
	got, err = open(bolt, LogStoreBoltDB)
	must.NoError(t, err)
	must.Eq(t, LogStoreBoltDB, got)
	must.FileExists(t, filepath.Join(bolt, raftDBFile))
	got, err = open(bolt, "")
	must.NoError(t, err)
	must.Eq(t, LogStoreBoltDB, got)

	// Another backend than the stored one is refused, and nothing is
	// created beside the stored log.
	_, err = open(bolt, LogStoreWAL)
	must.ErrorContains(t, err, `raft_logstore.backend is "wal" but the raft dir `+bolt+` holds a boltdb log`)
	must.ErrorContains(t, err, `set backend = "boltdb"`)
	must.ErrorContains(t, err, `run "volplane operator raft migrate-backend -to=wal `+filepath.Dir(bolt)+`"`)
	_, statErr := os.Stat(filepath.Join(bolt, walDirName))
	must.True(t, os.IsNotExist(statErr))
	_, err = open(fresh, LogStoreBoltDB)
	must.ErrorContains(t, err, `raft_logstore.backend is "boltdb" but the raft dir `+fresh+` holds a wal log`)

	// Both at once: which one was last written cannot be told.
	must.NoError(t, os.Mkdir(filepath.Join(bolt, walDirName), 0o700))
	_, err = open(bolt, "")
	must.ErrorContains(t, err, "holds both a boltdb log (raft.db) and a wal log (wal/)")

	_, err = open(t.TempDir(), "rocksdb")
	must.ErrorContains(t, err, `raft_logstore.backend "rocksdb" is not one of "wal" or "boltdb"`)
}

// A server on either backend comes back from a restart with its state and
// its term, and on the backend it had when the config names none.
func TestServer_RestartKeepsItsLogOnEitherBackend(t *testing.T) {
	for _, backend := range []string{LogStoreWAL, LogStoreBoltDB} {
		t.Run(backend, func(t *testing.T) {
			stopped := stopAfterAWrite(t, backend)

			// Asking for the other backend is refused before anything
			// starts.
			wrong := stopped.cfg
			wrong.RaftLogStore = otherBackend(backend)
			_, err := NewServer(&wrong)
			must.ErrorContains(t, err, "holds a "+backend+" log")

			stopped.restartOn(t, backend)
		})
	}
}

// stoppedServer is a server stopped after a write, with what it held.
type stoppedServer struct {
	cfg             Config
	volID           string
	lastIndex, term uint64
}

// stopAfterAWrite starts a server on backend, registers a volume and
// stops it.
func stopAfterAWrite(t *testing.T, backend string) stoppedServer {
	t.Helper()
	var cfg Config
	s := TestServer(t, func(c *Config) {
		c.RaftLogStore = backend
		cfg = *c
	})
	WaitForLeader(t, s)
	registerNode(t, s, "dev")
	vol := mock.CSIVolume("dev")
	registerVolume(t, s, vol)
	must.Eq(t, backend, s.raftStore.backend)
	term, err := strconv.ParseUint(s.raft.Stats()["term"], 10, 64)
	must.NoError(t, err)
	stopped := stoppedServer{cfg: cfg, volID: vol.ID, lastIndex: s.raft.LastIndex(), term: term}
	must.NoError(t, s.Shutdown())
	return stopped
}

// restartOn starts the stopped server with no raft_logstore setting and
// checks that it runs on backend with its log, its term (a new election
// only goes up from it) and its state, and takes writes.
func (st stoppedServer) restartOn(t *testing.T, backend string) {
	t.Helper()
	cfg := st.cfg
	cfg.RaftLogStore = ""
	restarted, err := NewServer(&cfg)
	must.NoError(t, err)
	t.Cleanup(func() { restarted.Shutdown() })
	must.Eq(t, backend, restarted.raftStore.backend)
	must.GreaterEq(t, st.lastIndex, restarted.raft.LastIndex())
	WaitForLeader(t, restarted)
	again, err := strconv.ParseUint(restarted.raft.Stats()["term"], 10, 64)
	must.NoError(t, err)
	must.Greater(t, st.term, again)
	v, err := restarted.State().CSIVolumeByID(nil, structs.DefaultNamespace, st.volID)
	must.NoError(t, err)
	must.NotNil(t, v, must.Sprint("the volume registered before the stop"))
	registerVolume(t, restarted, mock.CSIVolume("dev"))
}
