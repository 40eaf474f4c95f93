package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/volplane/volplane/structs"
)

// usageFile is where the usage registry is kept, under the data dir.
const usageFile = "csi-usage.json"

// VolumeUsage records that an allocation has a volume published on this
// node: what NodeDetachVolume needs to undo it, even after a restart of the
// agent.
type VolumeUsage struct {
	AllocID  string
	PluginID string
	// Namespace and VolumeID are volplane's; ExternalID the provider's.
	Namespace      string
	VolumeID       string
	ExternalID     string
	AccessMode     structs.CSIVolumeAccessMode
	AttachmentMode structs.CSIVolumeAttachmentMode
	ReadOnly       bool
	// StagingPath is "" when the node plugin does not stage.
	StagingPath string
	TargetPath  string
}

// UsageRegistry is the node's durable record of which allocation has which
// volume published at which paths. The allocation runner adds a record
// before it stages or publishes (so that a detach of another allocation
// never unstages a volume this one is about to use) and NodeDetachVolume
// removes it once the volume is unpublished (or the orphan sweep does, for a
// volume the servers released without the node step: orphan_volumes.go); a
// node detach unstages a volume only when no other record uses its staging
// path. It is kept in
// memory and written through to a file in the data dir on every change.
type UsageRegistry struct {
	path string

	mu sync.Mutex
	// byAlloc: alloc ID → volume ID → usage.
	byAlloc map[string]map[string]*VolumeUsage
}

// OpenUsageRegistry loads the registry kept in dataDir, or starts an empty
// one. A file that cannot be read is an error rather than an empty
// registry, which would let a volume be unstaged under a running
// allocation.
func OpenUsageRegistry(dataDir string) (*UsageRegistry, error) {
	u := &UsageRegistry{path: filepath.Join(dataDir, usageFile), byAlloc: map[string]map[string]*VolumeUsage{}}
	buf, err := os.ReadFile(u.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return u, nil
	case err != nil:
		return nil, fmt.Errorf("reading the volume usage file: %w", err)
	}
	var list []*VolumeUsage
	if err := json.Unmarshal(buf, &list); err != nil {
		return nil, fmt.Errorf("volume usage file %s is corrupt: %v", u.path, err)
	}
	for _, v := range list {
		if v == nil || v.AllocID == "" || v.VolumeID == "" {
			return nil, fmt.Errorf("volume usage file %s is corrupt: a record without allocation or volume ID", u.path)
		}
		u.put(v)
	}
	return u, nil
}

func (u *UsageRegistry) put(v *VolumeUsage) {
	vols := u.byAlloc[v.AllocID]
	if vols == nil {
		vols = map[string]*VolumeUsage{}
		u.byAlloc[v.AllocID] = vols
	}
	vols[v.VolumeID] = v
}

// Add records (or replaces) an allocation's use of a volume and persists
// the registry; on error nothing changed.
func (u *UsageRegistry) Add(v VolumeUsage) error {
	if v.AllocID == "" || v.VolumeID == "" || v.PluginID == "" || v.TargetPath == "" {
		return errors.New("volume usage needs an allocation ID, a volume ID, a plugin ID and a target path")
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	old := u.byAlloc[v.AllocID][v.VolumeID]
	u.put(&v)
	if err := u.saveLocked(); err != nil {
		if old != nil {
			u.put(old)
		} else {
			u.deleteLocked(v.AllocID, v.VolumeID)
		}
		return err
	}
	return nil
}

// Remove forgets an allocation's use of a volume and persists the registry.
// Removing a record that does not exist is not an error.
func (u *UsageRegistry) Remove(allocID, volumeID string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	old := u.byAlloc[allocID][volumeID]
	if old == nil {
		return nil
	}
	u.deleteLocked(allocID, volumeID)
	if err := u.saveLocked(); err != nil {
		u.put(old)
		return err
	}
	return nil
}

func (u *UsageRegistry) deleteLocked(allocID, volumeID string) {
	delete(u.byAlloc[allocID], volumeID)
	if len(u.byAlloc[allocID]) == 0 {
		delete(u.byAlloc, allocID)
	}
}

// Get returns a copy of an allocation's use of a volume.
func (u *UsageRegistry) Get(allocID, volumeID string) (VolumeUsage, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	v := u.byAlloc[allocID][volumeID]
	if v == nil {
		return VolumeUsage{}, false
	}
	return *v, true
}

// OthersStagedAt returns, sorted, the allocations other than allocID whose
// volume of pluginID is published from stagingPath.
func (u *UsageRegistry) OthersStagedAt(allocID, pluginID, stagingPath string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for alloc, vols := range u.byAlloc {
		if alloc == allocID {
			continue
		}
		for _, v := range vols {
			if v.PluginID == pluginID && v.StagingPath == stagingPath {
				out = append(out, alloc)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// All returns a copy of every record, sorted by allocation and volume.
func (u *UsageRegistry) All() []VolumeUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.allLocked()
}

func (u *UsageRegistry) allLocked() []VolumeUsage {
	var out []VolumeUsage
	for _, vols := range u.byAlloc {
		for _, v := range vols {
			out = append(out, *v)
		}
	}
	slices.SortFunc(out, func(a, b VolumeUsage) int {
		if c := strings.Compare(a.AllocID, b.AllocID); c != 0 {
			return c
		}
		return strings.Compare(a.VolumeID, b.VolumeID)
	})
	return out
}

func (u *UsageRegistry) saveLocked() error {
	list := u.allLocked()
	if list == nil {
		list = []VolumeUsage{}
	}
	buf, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(u.path, append(buf, '\n')); err != nil {
		return fmt.Errorf("writing the volume usage file: %w", err)
	}
	return nil
}
