package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"
	bolt "go.etcd.io/bbolt"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// stateFixture writes two allocations, each with a volume and a task, and
// returns the data dir.
func stateFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, bundles, err := OpenDB(dir, hclog.NewNullLogger())
	must.NoError(t, err)
	must.MapEmpty(t, bundles)
	for _, id := range []string{"alloc-1", "alloc-2"} {
		must.NoError(t, s.Put(
			&AllocRecord{ID: id, Name: "j.g[0]", Group: &structs.TaskGroup{Name: "g"}, ClientStatus: structs.AllocClientStatusRunning},
			[]*VolumeRecord{{Alias: "data", VolumeID: "vol-" + id, PluginID: "dev", PublishContext: map[string]string{"k": "v"},
				State: structs.AllocVolumeState{Step: structs.AllocVolumeStepPublished}}},
			[]*TaskRecord{{Name: "t", State: TaskRunning, Process: ProcessID{PID: 42, StartTicks: 7}}},
			id))
	}
	must.NoError(t, s.Close())
	return dir
}

func TestStateDB_RoundTripAndDelete(t *testing.T) {
	dir := stateFixture(t)
	s, bundles, err := OpenDB(dir, hclog.NewNullLogger())
	must.NoError(t, err)
	must.MapLen(t, 2, bundles)
	b := bundles["alloc-1"]
	must.Eq(t, "j.g[0]", b.Alloc.Name)
	must.Eq(t, map[string]string{"k": "v"}, b.Volumes["data"].PublishContext)
	must.Eq(t, ProcessID{PID: 42, StartTicks: 7}, b.Tasks["t"].Process)

	must.NoError(t, s.DeleteVolume("alloc-1", "data"))
	must.NoError(t, s.DeleteAlloc("alloc-2"))
	must.NoError(t, s.Close())
	s, bundles, err = OpenDB(dir, hclog.NewNullLogger())
	must.NoError(t, err)
	defer s.Close()
	must.MapLen(t, 1, bundles)
	must.MapEmpty(t, bundles["alloc-1"].Volumes)
	must.MapLen(t, 1, bundles["alloc-1"].Tasks)
}

// A damaged state file is reported, naming the file, and the client gets
// back what can be read rather than failing to start.
func TestStateDB_Damaged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		// allocs are the allocations recovered with their record.
		allocs int
		// aside: the file was moved aside.
		aside bool
		log   string
	}{
		{
			name: "one record is not JSON",
			damage: func(t *testing.T, path string) {
				db, err := bolt.Open(path, 0o600, nil)
				must.NoError(t, err)
				must.NoError(t, db.Update(func(tx *bolt.Tx) error {
					return tx.Bucket(bucketAllocs).Put([]byte("alloc-2"), []byte("{not json"))
				}))
				must.NoError(t, db.Close())
			},
			allocs: 1,
			log:    "bucket=allocs key=alloc-2",
		},
		{
			name: "a record under the wrong key",
			damage: func(t *testing.T, path string) {
				db, err := bolt.Open(path, 0o600, nil)
				must.NoError(t, err)
				must.NoError(t, db.Update(func(tx *bolt.Tx) error {
					return tx.Bucket(bucketTasks).Put([]byte("alloc-1\x00other"), []byte(`{"Name":"t"}`))
				}))
				must.NoError(t, db.Close())
			},
			allocs: 2,
			log:    "bucket=tasks key=alloc-1/other",
		},
		{
			name: "garbage",
			damage: func(t *testing.T, path string) {
				must.NoError(t, os.WriteFile(path, []byte(strings.Repeat("not a bolt file ", 4096)), 0o600))
			},
			aside: true,
			log:   "client state file cannot be opened",
		},
		{
			name: "truncated",
			damage: func(t *testing.T, path string) {
				must.NoError(t, os.Truncate(path, 100))
			},
			aside: true,
			log:   "client state file cannot be opened",
		},
		{
			name: "pages after the meta pages overwritten",
			damage: func(t *testing.T, path string) {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				must.NoError(t, err)
				fi, err := f.Stat()
				must.NoError(t, err)
				page := int64(os.Getpagesize())
				junk := []byte(strings.Repeat("\xff", int(fi.Size()-2*page)))
				_, err = f.WriteAt(junk, 2*page)
				must.NoError(t, err)
				must.NoError(t, f.Close())
			},
			aside: true,
			log:   "client state file",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := stateFixture(t)
			path := filepath.Join(dir, DBFile)
			tc.damage(t, path)

			var logs testutil.Buffer
			logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
			s, bundles, err := OpenDB(dir, logger)
			must.NoError(t, err)
			recovered := 0
			for _, b := range bundles {
				if b.Alloc != nil {
					recovered++
				}
			}
			must.Eq(t, tc.allocs, recovered, must.Sprintf("logs:\n%s", logs.String()))
			must.StrContains(t, logs.String(), "[ERROR]")
			must.StrContains(t, logs.String(), "file="+path)
			must.StrContains(t, logs.String(), tc.log)
			aside, _ := filepath.Glob(path + ".corrupt-*")
			must.Eq(t, tc.aside, len(aside) == 1, must.Sprintf("moved aside: %v", aside))

			// The file works again, and what was reported is not reported
			// a second time.
			must.NoError(t, s.Put(&AllocRecord{ID: "alloc-3", Group: &structs.TaskGroup{}}, nil, nil, "alloc-3"))
			must.NoError(t, s.Close())
			var again testutil.Buffer
			s, bundles, err = OpenDB(dir, hclog.New(&hclog.LoggerOptions{Output: &again}))
			must.NoError(t, err)
			defer s.Close()
			must.NotNil(t, bundles["alloc-3"])
			must.Eq(t, tc.allocs+1, len(bundles)-orphans(bundles))
			must.StrNotContains(t, again.String(), "[ERROR]")
		})
	}
}

func orphans(bundles map[string]*AllocBundle) int {
	n := 0
	for _, b := range bundles {
		if b.Alloc == nil {
			n++
		}
	}
	return n
}
