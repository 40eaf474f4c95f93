package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"

	"github.com/volplane/volplane/structs"
)

// DBFile is the allocations' durable state, in the data dir.
const DBFile = "client-state.db"

// stateSchemaVersion is written to the meta bucket; bump it when a record
// changes in a way older agents cannot read.
const stateSchemaVersion = "1"

// The state file's layout: one bucket per kind of record, each record a
// JSON value, so that one record that cannot be decoded costs only itself.
//
//	meta     "version" → stateSchemaVersion
//	allocs   <alloc ID>                → AllocRecord
//	volumes  <alloc ID> "\x00" <alias> → VolumeRecord
//	tasks    <alloc ID> "\x00" <task>  → TaskRecord
var (
	bucketMeta    = []byte("meta")
	bucketAllocs  = []byte("allocs")
	bucketVolumes = []byte("volumes")
	bucketTasks   = []byte("tasks")
	stateBuckets  = [][]byte{bucketMeta, bucketAllocs, bucketVolumes, bucketTasks}
)

// AllocRecord is what the client keeps of an allocation it runs: enough to
// supervise and report it without asking the servers anything.
type AllocRecord struct {
	ID        string
	Namespace string
	Name      string
	JobID     string
	TaskGroup string
	// JobVersion is the job version the allocation runs, and Group that
	// version's task group, as the allocation was started.
	JobVersion uint64
	Group      *structs.TaskGroup
	// CreateIndex is the Raft index that created the allocation: a server
	// whose answer is older may not list it yet.
	CreateIndex uint64
	// StopReason is set once the allocation was asked to stop.
	StopReason string `json:",omitempty"`
	// SetupDone is set once every volume is published: the tasks may run.
	SetupDone bool
	// Done is set once every task ended, or the allocation ended before
	// they started; ClientStatus is then terminal.
	Done bool
	// FinishedAt is when it became done.
	FinishedAt        int64 `json:",omitempty"`
	ClientStatus      string
	ClientDescription string
	// ReportedStatus is the client status the servers last acknowledged.
	ReportedStatus string `json:",omitempty"`
}

// VolumeRecord is an allocation's progress with one of its volumes, and
// everything needed to find it again on the node: which plugin serves it,
// its IDs, its paths and the publish context. Volume secrets are not kept:
// a volume not yet published when the agent restarts is claimed again,
// which returns them.
type VolumeRecord struct {
	Alias          string
	VolumeID       string
	Namespace      string
	PluginID       string `json:",omitempty"`
	ExternalID     string `json:",omitempty"`
	AccessMode     structs.CSIVolumeAccessMode
	AttachmentMode structs.CSIVolumeAttachmentMode
	ReadOnly       bool
	// StagingPath is "" when the node plugin does not stage.
	StagingPath    string            `json:",omitempty"`
	TargetPath     string            `json:",omitempty"`
	PublishContext map[string]string `json:",omitempty"`
	// State is what the client reports for the volume: the step reached
	// (structs.AllocVolumeStep*) and, while waiting, why.
	State structs.AllocVolumeState
}

// TaskRecord is one task of an allocation.
type TaskRecord struct {
	Name  string
	State string
	// Process is the task's shim, once started.
	Process   ProcessID
	StartedAt int64 `json:",omitempty"`
	// Stopping is set once the client signalled the task to stop, so its
	// end is not its own failure.
	Stopping bool `json:",omitempty"`
	// Exit is how it ended, when its shim recorded it.
	Exit *TaskExit `json:",omitempty"`
	// Failed and Description judge the end.
	Failed      bool   `json:",omitempty"`
	Description string `json:",omitempty"`
	// FailReason, when set, is why the client killed the task as failed
	// (a plugin that missed its health timeout); its end is a failure
	// whatever its exit.
	FailReason string `json:",omitempty"`
	// Restarts counts the client's restarts of the task; RestartTimes are
	// the recent ones (for the restart policy), RestartAt when a pending
	// restart is due (Unix nanoseconds).
	Restarts     uint64  `json:",omitempty"`
	RestartTimes []int64 `json:",omitempty"`
	RestartAt    int64   `json:",omitempty"`
	// Events are the task's last events (structs.MaxTaskEvents).
	Events []*structs.TaskEvent `json:",omitempty"`
}

// TaskExit is how a task ended, as its shim recorded it.
type TaskExit struct {
	// ExitCode is the command's exit status; -1 when a signal killed it.
	ExitCode int
	// Signal names the signal that killed the command, if one did.
	Signal string `json:",omitempty"`
	// StartError says why the command could not be started.
	StartError string `json:",omitempty"`
	FinishedAt int64
}

// ProcessID identifies a process across restarts of the agent: a PID alone
// may have been reused, so its start time (in clock ticks since boot), its
// argv[0] and the boot it was seen in must match too.
type ProcessID struct {
	PID        int
	StartTicks uint64
	Argv0      string
	BootID     string
}

// Task states.
const (
	TaskPending = "pending"
	TaskRunning = "running"
	TaskDead    = "dead"
)

// AllocBundle is what the state file holds about one allocation. Alloc is
// nil when its record was lost but some of its volumes or tasks were not.
type AllocBundle struct {
	Alloc   *AllocRecord
	Volumes map[string]*VolumeRecord
	Tasks   map[string]*TaskRecord
}

// DB is the client's durable state: a bbolt file in the data dir,
// written through on every step, so that a restarted agent finds its
// allocations as they were.
type DB struct {
	path   string
	db     *bolt.DB
	logger hclog.Logger
}

// OpenDB opens (or creates) the state file in dataDir and returns what
// it holds, by allocation ID. A damaged file never stops the client:
//   - a record that cannot be decoded is logged (naming the file, the
//     bucket and the key), skipped and deleted;
//   - a file bbolt cannot open, or whose pages cannot be read, is logged,
//     moved aside (to client-state.db.corrupt-<time>) and replaced by a
//     fresh one, into which what could be read is written back.
//
// Only a file locked by another process is an error: another agent uses
// this data dir.
func OpenDB(dataDir string, logger hclog.Logger) (*DB, map[string]*AllocBundle, error) {
	s := &DB{path: filepath.Join(dataDir, DBFile), logger: logger}
	db, err := openBolt(s.path)
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, nil, fmt.Errorf("client state file %s is locked: is another client agent using the data dir?", s.path)
	}
	if err != nil {
		logger.Error("client state file cannot be opened; starting with a fresh one", "file", s.path, "error", err)
		if db, err = s.replace(nil); err != nil {
			return nil, nil, err
		}
		s.db = db
		return s, map[string]*AllocBundle{}, nil
	}
	s.db = db
	bundles, bad, err := s.load()
	if err != nil {
		logger.Error("client state file is damaged; keeping what could be read and starting a fresh file",
			"file", s.path, "error", err, "allocations_read", len(bundles))
		db.Close()
		if s.db, err = s.replace(bundles); err != nil {
			return nil, nil, err
		}
		return s, bundles, nil
	}
	if len(bad) > 0 {
		s.deleteKeys(bad)
	}
	if err := s.db.Update(initBuckets); err != nil {
		s.db.Close()
		return nil, nil, fmt.Errorf("client state file %s: %w", s.path, err)
	}
	return s, bundles, nil
}

// initBuckets creates the buckets a state file lacks and records the
// schema version.
func initBuckets(tx *bolt.Tx) error {
	for _, b := range stateBuckets {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put([]byte("version"), []byte(stateSchemaVersion))
}

func openBolt(path string) (db *bolt.DB, err error) {
	defer func() {
		// bbolt reads its freelist as it opens, trusting the page.
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("reading the file: %v", p)
		}
	}()
	// A timeout, not a wait forever, when another agent holds the lock.
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
}

// replace moves the state file aside and creates a fresh one holding
// bundles.
func (s *DB) replace(bundles map[string]*AllocBundle) (*bolt.DB, error) {
	aside := fmt.Sprintf("%s.corrupt-%d", s.path, time.Now().UnixNano())
	if err := os.Rename(s.path, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("moving the damaged client state file %s aside: %w", s.path, err)
	}
	s.logger.Error("damaged client state file moved aside", "file", s.path, "moved_to", aside)
	db, err := openBolt(s.path)
	if err != nil {
		return nil, fmt.Errorf("creating a fresh client state file %s: %w", s.path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := initBuckets(tx); err != nil {
			return err
		}
		for id, b := range bundles {
			if err := putBundle(tx, id, b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("writing a fresh client state file %s: %w", s.path, err)
	}
	return db, nil
}

// badKey is a record that could not be decoded.
type badKey struct {
	bucket []byte
	key    []byte
}

// load reads every record. Records that cannot be decoded are logged and
// returned in bad; an error (a panic of bbolt on a damaged page included)
// means the file itself is damaged, with what was read so far returned.
func (s *DB) load() (bundles map[string]*AllocBundle, bad []badKey, err error) {
	bundles = map[string]*AllocBundle{}
	bundle := func(id string) *AllocBundle {
		b := bundles[id]
		if b == nil {
			b = &AllocBundle{Volumes: map[string]*VolumeRecord{}, Tasks: map[string]*TaskRecord{}}
			bundles[id] = b
		}
		return b
	}
	defer func() {
		// bbolt trusts its pages: a damaged one can make it panic.
		if p := recover(); p != nil {
			err = fmt.Errorf("reading the file: %v", p)
		}
	}()
	err = s.db.View(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketAllocs, bucketVolumes, bucketTasks} {
			b := tx.Bucket(name)
			if b == nil {
				continue
			}
			err := b.ForEach(func(k, v []byte) error {
				allocID, sub, _ := strings.Cut(string(k), "\x00")
				var decodeErr error
				switch {
				case v == nil:
					decodeErr = errors.New("a nested bucket where a record was expected")
				case string(name) == string(bucketAllocs):
					var r AllocRecord
					if decodeErr = json.Unmarshal(v, &r); decodeErr == nil && (r.ID != allocID || r.Group == nil) {
						decodeErr = errors.New("the record does not match its key or has no task group")
					}
					if decodeErr == nil {
						bundle(allocID).Alloc = &r
					}
				case string(name) == string(bucketVolumes):
					var r VolumeRecord
					if decodeErr = json.Unmarshal(v, &r); decodeErr == nil && (r.Alias != sub || r.VolumeID == "") {
						decodeErr = errors.New("the record does not match its key")
					}
					if decodeErr == nil {
						bundle(allocID).Volumes[sub] = &r
					}
				default:
					var r TaskRecord
					if decodeErr = json.Unmarshal(v, &r); decodeErr == nil && r.Name != sub {
						decodeErr = errors.New("the record does not match its key")
					}
					if decodeErr == nil {
						bundle(allocID).Tasks[sub] = &r
					}
				}
				if decodeErr != nil {
					s.logger.Error("client state file has a record that cannot be read; skipping it",
						"file", s.path, "bucket", string(name), "key", strings.ReplaceAll(string(k), "\x00", "/"), "error", decodeErr)
					bad = append(bad, badKey{bucket: name, key: slices.Clone(k)})
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return bundles, bad, err
}

// deleteKeys removes records that could not be decoded, so that they are
// reported once.
func (s *DB) deleteKeys(bad []badKey) {
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, k := range bad {
			if b := tx.Bucket(k.bucket); b != nil {
				if err := b.Delete(k.key); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		s.logger.Error("removing unreadable records from the client state file", "file", s.path, "error", err)
	}
}

func subKey(allocID, name string) []byte { return []byte(allocID + "\x00" + name) }

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	buf, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, buf)
}

func putBundle(tx *bolt.Tx, allocID string, b *AllocBundle) error {
	if b.Alloc != nil {
		if err := putJSON(tx.Bucket(bucketAllocs), []byte(allocID), b.Alloc); err != nil {
			return err
		}
	}
	for alias, v := range b.Volumes {
		if err := putJSON(tx.Bucket(bucketVolumes), subKey(allocID, alias), v); err != nil {
			return err
		}
	}
	for name, t := range b.Tasks {
		if err := putJSON(tx.Bucket(bucketTasks), subKey(allocID, name), t); err != nil {
			return err
		}
	}
	return nil
}

// put writes an allocation's records (any of them may be nil) in one
// transaction.
func (s *DB) Put(a *AllocRecord, vols []*VolumeRecord, tasks []*TaskRecord, allocID string) error {
	b := &AllocBundle{Alloc: a, Volumes: map[string]*VolumeRecord{}, Tasks: map[string]*TaskRecord{}}
	for _, v := range vols {
		b.Volumes[v.Alias] = v
	}
	for _, t := range tasks {
		b.Tasks[t.Name] = t
	}
	err := s.db.Update(func(tx *bolt.Tx) error { return putBundle(tx, allocID, b) })
	if err != nil {
		return fmt.Errorf("writing allocation %s to the client state file %s: %w", allocID, s.path, err)
	}
	return nil
}

// deleteVolume forgets one volume of an allocation.
func (s *DB) DeleteVolume(allocID, alias string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketVolumes).Delete(subKey(allocID, alias))
	})
}

// deleteAlloc forgets an allocation and its volumes and tasks.
func (s *DB) DeleteAlloc(allocID string) error {
	prefix := []byte(allocID + "\x00")
	return s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketAllocs).Delete([]byte(allocID)); err != nil {
			return err
		}
		for _, name := range [][]byte{bucketVolumes, bucketTasks} {
			c := tx.Bucket(name).Cursor()
			for k, _ := c.Seek(prefix); k != nil && strings.HasPrefix(string(k), string(prefix)); k, _ = c.Seek(prefix) {
				if err := c.Delete(); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (s *DB) Close() error { return s.db.Close() }
