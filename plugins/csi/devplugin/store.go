package devplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// stateVersion is written into state.json; a file with another version is
// refused rather than misread.
const stateVersion = 1

const (
	stateFile    = "state.json"
	lockFile     = "state.lock"
	volumesDir   = "volumes"
	snapshotsDir = "snapshots"
)

// state is everything the storage system knows, shared by every instance
// started on the same state directory.
type state struct {
	Version   int                  `json:"version"`
	Volumes   map[string]*volume   `json:"volumes"`
	Snapshots map[string]*snapshot `json:"snapshots"`
	// GroupSnapshots are by ID; their snapshots are in Snapshots.
	GroupSnapshots map[string]*groupSnapshot `json:"group_snapshots"`
	// Nodes are the instances that have been started, by node ID, each with
	// what the node has staged and published.
	Nodes map[string]*node `json:"nodes"`
}

type volume struct {
	ID                string            `json:"id"`
	Name              string            `json:"name"`
	CapacityBytes     int64             `json:"capacity_bytes"`
	Parameters        map[string]string `json:"parameters,omitempty"`
	MutableParameters map[string]string `json:"mutable_parameters,omitempty"`
	Capabilities      []capability      `json:"capabilities"`
	Topology          map[string]string `json:"topology,omitempty"`
	Source            *contentSource    `json:"source,omitempty"`
	Created           time.Time         `json:"created"`
	// Publications are the controller publications, by node ID.
	Publications map[string]*controllerPublication `json:"publications,omitempty"`
}

type contentSource struct {
	SnapshotID string `json:"snapshot_id,omitempty"`
	VolumeID   string `json:"volume_id,omitempty"`
}

type controllerPublication struct {
	Capability capability        `json:"capability"`
	ReadOnly   bool              `json:"readonly"`
	Context    map[string]string `json:"context"`
}

type snapshot struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	SourceVolumeID string    `json:"source_volume_id"`
	SizeBytes      int64     `json:"size_bytes"`
	GroupID        string    `json:"group_id,omitempty"`
	Created        time.Time `json:"created"`
}

type groupSnapshot struct {
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	SourceVolumeIDs []string          `json:"source_volume_ids"`
	Parameters      map[string]string `json:"parameters,omitempty"`
	SnapshotIDs     []string          `json:"snapshot_ids"`
	Created         time.Time         `json:"created"`
}

type node struct {
	ID         string            `json:"id"`
	MaxVolumes int64             `json:"max_volumes,omitempty"`
	Topology   map[string]string `json:"topology,omitempty"`
	// Staged is by volume ID: the spec allows one staging path per volume
	// and node.
	Staged map[string]*staging `json:"staged,omitempty"`
	// Published is by target path.
	Published map[string]*publication `json:"published,omitempty"`
	// Sizes are the sizes of the volumes staged or published here, as
	// this node sees them (see nodeServer.sizeOn).
	Sizes map[string]int64 `json:"sizes,omitempty"`
}

type staging struct {
	Path       string     `json:"path"`
	Capability capability `json:"capability"`
}

type publication struct {
	VolumeID    string     `json:"volume_id"`
	StagingPath string     `json:"staging_path"`
	Capability  capability `json:"capability"`
	ReadOnly    bool       `json:"readonly"`
}

func newState() *state {
	return &state{
		Version:        stateVersion,
		Volumes:        map[string]*volume{},
		Snapshots:      map[string]*snapshot{},
		GroupSnapshots: map[string]*groupSnapshot{},
		Nodes:          map[string]*node{},
	}
}

// store reads and writes the state directory. It holds no state of its own,
// so any number of stores (in any number of processes) may share a directory.
type store struct {
	dir string
}

func (s *store) path(elem ...string) string {
	return filepath.Join(append([]string{s.dir}, elem...)...)
}

// volumeDir is where a volume's data lives.
func (s *store) volumeDir(id string) string { return s.path(volumesDir, id) }

func (s *store) snapshotDir(id string) string { return s.path(snapshotsDir, id) }

// lock takes the cross-process lock and returns the function that releases
// it. Locks are never nested: every caller takes it once, does its work and
// releases it.
func (s *store) lock(exclusive bool) (func(), error) {
	f, err := os.OpenFile(s.path(lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devplugin: opening lock file: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("devplugin: locking %s: %w", f.Name(), err)
	}
	// Closing the file releases the lock.
	return func() { f.Close() }, nil
}

// load reads state.json; a missing file is an empty storage system.
func (s *store) load() (*state, error) {
	name := s.path(stateFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return newState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("devplugin: reading state file: %w", err)
	}
	st := newState()
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("devplugin: state file %s is corrupt (%v); remove the state directory to start over", name, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("devplugin: state file %s has version %d, this plugin reads version %d", name, st.Version, stateVersion)
	}
	// A file written by hand may leave maps out.
	if st.Volumes == nil {
		st.Volumes = map[string]*volume{}
	}
	if st.Snapshots == nil {
		st.Snapshots = map[string]*snapshot{}
	}
	if st.GroupSnapshots == nil {
		st.GroupSnapshots = map[string]*groupSnapshot{}
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*node{}
	}
	return st, nil
}

func (s *store) save(st *state) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("devplugin: encoding state: %w", err)
	}
	return writeFileAtomic(s.path(stateFile), b)
}

// writeFileAtomic replaces name with b so that readers see either the old
// or the new content, never a mix.
func writeFileAtomic(name string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*.tmp")
	if err != nil {
		return fmt.Errorf("devplugin: writing %s: %w", name, err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("devplugin: writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("devplugin: writing %s: %w", name, err)
	}
	return nil
}

// view runs fn on the current state under a shared lock. fn must not change
// the state.
func (s *store) view(fn func(*state) error) error {
	unlock, err := s.lock(false)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.load()
	if err != nil {
		return err
	}
	return fn(st)
}

// update runs fn on the current state under the exclusive lock and saves
// what fn leaves, unless fn fails.
func (s *store) update(fn func(*state) error) error {
	unlock, err := s.lock(true)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.load()
	if err != nil {
		return err
	}
	if err := fn(st); err != nil {
		return err
	}
	return s.save(st)
}

// node returns the record of a node, creating it when needed.
func (st *state) node(id string) *node {
	n := st.Nodes[id]
	if n == nil {
		n = &node{ID: id}
		st.Nodes[id] = n
	}
	if n.Staged == nil {
		n.Staged = map[string]*staging{}
	}
	if n.Published == nil {
		n.Published = map[string]*publication{}
	}
	if n.Sizes == nil {
		n.Sizes = map[string]int64{}
	}
	return n
}
