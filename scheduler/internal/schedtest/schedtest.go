// Package schedtest holds the fixtures of the scheduler tests: a real state
// store and factories for nodes, volumes, jobs, allocations and claims.
package schedtest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// NS is the namespace of every fixture.
const NS = structs.DefaultNamespace

// Store is a real state store written at increasing indexes.
type Store struct {
	*state.StateStore
	t     testing.TB
	index uint64
}

// NewStore returns an empty store.
func NewStore(t testing.TB) *Store {
	return &Store{StateStore: state.TestStateStore(t), t: t, index: 100}
}

func (s *Store) next() uint64 {
	s.index++
	return s.index
}

func (s *Store) check(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("schedtest: %v", err)
	}
}

// Jobs registers jobs and returns them as the store has them (version and
// indexes set).
func (s *Store) Jobs(jobs ...*structs.Job) []*structs.Job {
	s.t.Helper()
	out := make([]*structs.Job, len(jobs))
	for i, j := range jobs {
		s.check(s.UpsertJob(s.next(), 1, j))
		out[i] = s.Job(j.ID)
	}
	return out
}

// Job reads a job back; it must exist.
func (s *Store) Job(id string) *structs.Job {
	s.t.Helper()
	j, err := s.JobByID(nil, NS, id)
	s.check(err)
	if j == nil {
		s.t.Fatalf("schedtest: no job %q", id)
	}
	return j.Copy()
}

// Deregister stops a job as a job stop does.
func (s *Store) Deregister(id string) {
	s.t.Helper()
	s.check(s.DeregisterJob(s.next(), 1, NS, id, false))
}

// ApplyPlan applies a plan as the FSM would.
func (s *Store) ApplyPlan(plan *structs.PlanApplyRequest) {
	s.t.Helper()
	s.check(s.StateStore.ApplyPlan(s.next(), plan))
}

// Nodes stores nodes (and so the plugins they fingerprint).
func (s *Store) Nodes(nodes ...*structs.Node) {
	s.t.Helper()
	for _, n := range nodes {
		s.check(s.UpsertNode(s.next(), n))
	}
}

// Drain starts draining a stored node, as node drain -enable does.
func (s *Store) Drain(nodeID string) {
	s.t.Helper()
	now := time.Unix(1700000000, 0)
	s.check(s.UpdateNodeDrain(s.next(), &structs.NodeUpdateDrainRequest{NodeID: nodeID, UpdatedAt: now,
		Status: structs.DrainStatusDraining, DrainStrategy: &structs.DrainStrategy{StartedAt: now}}))
}

// Eligibility sets a stored node's scheduling eligibility.
func (s *Store) Eligibility(nodeID, eligibility string) {
	s.t.Helper()
	s.check(s.UpdateNodeEligibility(s.next(), &structs.NodeUpdateEligibilityRequest{NodeID: nodeID,
		Eligibility: eligibility, UpdatedAt: time.Unix(1700000000, 0)}))
}

// AllNodes reads every node back from the store.
func (s *Store) AllNodes() []*structs.Node {
	s.t.Helper()
	it, err := s.StateStore.Nodes(nil)
	s.check(err)
	var out []*structs.Node
	for raw := it.Next(); raw != nil; raw = it.Next() {
		out = append(out, raw.(*structs.Node))
	}
	return out
}

// Volumes registers volumes; their plugins must be fingerprinted already.
func (s *Store) Volumes(vols ...*structs.CSIVolume) {
	s.t.Helper()
	s.check(s.UpsertCSIVolume(s.next(), vols))
}

// Allocs writes allocations.
func (s *Store) Allocs(allocs ...*structs.Allocation) {
	s.t.Helper()
	s.check(s.UpsertAllocs(s.next(), allocs))
}

// Claim claims a volume as a client would; the allocation must exist.
func (s *Store) Claim(volID string, c *structs.CSIVolumeClaim) {
	s.t.Helper()
	s.check(s.CSIVolumeClaim(s.next(), 1, NS, volID, c))
}

// ForceClaims writes a volume's claims as they are, even for allocations that
// do not exist (any more): the state a garbage-collected allocation leaves
// behind until its claim is released. It goes through the snapshot restore
// path, the only one that writes rows unchecked.
func (s *Store) ForceClaims(volID string, claims ...*structs.CSIVolumeClaim) {
	s.t.Helper()
	v, err := s.CSIVolumeByID(nil, NS, volID)
	s.check(err)
	if v == nil {
		s.t.Fatalf("schedtest: no volume %q", volID)
	}
	for _, c := range claims {
		if c.Mode == structs.CSIVolumeClaimWrite {
			v.WriteClaims = setClaim(v.WriteClaims, c)
		} else {
			v.ReadClaims = setClaim(v.ReadClaims, c)
		}
		if v.AccessMode == structs.CSIVolumeAccessModeUnknown {
			v.AccessMode, v.AttachmentMode = c.AccessMode, c.AttachmentMode
		}
	}
	r, err := s.Restore()
	s.check(err)
	s.check(r.CSIVolumeRestore(v))
	s.check(r.Commit())
}

func setClaim(m map[string]*structs.CSIVolumeClaim, c *structs.CSIVolumeClaim) map[string]*structs.CSIVolumeClaim {
	if m == nil {
		m = map[string]*structs.CSIVolumeClaim{}
	}
	m[c.AllocationID] = c
	return m
}

// PluginOpt changes a node plugin fingerprint.
type PluginOpt func(*structs.CSIInfo)

// Unhealthy marks the plugin unhealthy.
func Unhealthy(i *structs.CSIInfo) {
	i.Healthy = false
	i.HealthDescription = "probe failed"
}

// MaxVolumes sets max_volumes_per_node.
func MaxVolumes(n int64) PluginOpt { return func(i *structs.CSIInfo) { i.NodeInfo.MaxVolumes = n } }

// Zone sets the node's accessible topology to zone=z.
func Zone(z string) PluginOpt {
	return func(i *structs.CSIInfo) {
		i.NodeInfo.AccessibleTopology = &structs.CSITopology{Segments: map[string]string{"zone": z}}
	}
}

// Plugin is a healthy node plugin fingerprint.
func Plugin(id string, opts ...PluginOpt) *structs.CSIInfo {
	i := &structs.CSIInfo{
		PluginID:        id,
		Healthy:         true,
		Provider:        "example.com/" + id,
		ProviderVersion: "1.0",
		UpdateTime:      time.Unix(1700000000, 0),
		NodeInfo:        &structs.CSINodeInfo{ID: "ext-" + id},
	}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Node is a ready node running the given node plugins.
func Node(id string, plugins ...*structs.CSIInfo) *structs.Node {
	n := &structs.Node{ID: id, Name: id, SecretID: "secret-" + id, Datacenter: "dc1", Status: structs.NodeStatusReady}
	for _, p := range plugins {
		if n.CSINodePlugins == nil {
			n.CSINodePlugins = map[string]*structs.CSIInfo{}
		}
		// Each node holds a storage node ID of its own.
		p = p.Copy()
		p.NodeInfo.ID = "ext-" + id
		n.CSINodePlugins[p.PluginID] = p
	}
	return n
}

// Volume is a volume of plugin that can be claimed in every access mode on
// a file system.
func Volume(id, pluginID string) *structs.CSIVolume {
	v := &structs.CSIVolume{ID: id, Namespace: NS, Name: id, ExternalID: "ext-" + id, PluginID: pluginID}
	for _, m := range []structs.CSIVolumeAccessMode{
		structs.CSIVolumeAccessModeSingleNodeReader, structs.CSIVolumeAccessModeSingleNodeWriter,
		structs.CSIVolumeAccessModeMultiNodeReader, structs.CSIVolumeAccessModeMultiNodeSingleWriter,
		structs.CSIVolumeAccessModeMultiNodeMultiWriter,
	} {
		v.RequestedCapabilities = append(v.RequestedCapabilities,
			&structs.CSIVolumeCapability{AccessMode: m, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem})
	}
	return v
}

// Zoned is Volume accessible from the given zones only.
func Zoned(v *structs.CSIVolume, zones ...string) *structs.CSIVolume {
	for _, z := range zones {
		v.Topologies = append(v.Topologies, &structs.CSITopology{Segments: map[string]string{"zone": z}})
	}
	return v
}

// Writer is a request to write source in the access mode.
func Writer(source string, mode structs.CSIVolumeAccessMode) *structs.VolumeRequest {
	return &structs.VolumeRequest{Type: structs.VolumeTypeCSI, Source: source, AccessMode: mode,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
}

// Reader is a read-only request of source in the access mode.
func Reader(source string, mode structs.CSIVolumeAccessMode) *structs.VolumeRequest {
	r := Writer(source, mode)
	r.ReadOnly = true
	return r
}

// PerAlloc makes a request per_alloc.
func PerAlloc(r *structs.VolumeRequest) *structs.VolumeRequest {
	r.PerAlloc = true
	return r
}

// Job is a job of one group "g" of count allocations, using the requests
// under the aliases v0, v1, ...
func Job(id, typ string, count int, reqs ...*structs.VolumeRequest) *structs.Job {
	tg := &structs.TaskGroup{Name: "g", Count: count, Volumes: map[string]*structs.VolumeRequest{},
		Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"}}}}
	for i, r := range reqs {
		alias := fmt.Sprintf("v%d", i)
		r.Name = alias
		tg.Volumes[alias] = r
	}
	return &structs.Job{ID: id, Namespace: NS, Name: id, Type: typ, TaskGroups: []*structs.TaskGroup{tg}}
}

// Alloc is a running allocation of group "g" of job, with the given index,
// of the job's first version (0).
func Alloc(id, jobID string, index int, nodeID string) *structs.Allocation {
	return &structs.Allocation{
		ID: id, Namespace: NS, Name: structs.AllocName(jobID, "g", index), JobID: jobID,
		TaskGroup: "g", NodeID: nodeID, CreateTime: int64(index),
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning,
	}
}

// Claim is a claim of an allocation on a node for a request.
func Claim(allocID, nodeID string, r *structs.VolumeRequest) *structs.CSIVolumeClaim {
	return &structs.CSIVolumeClaim{
		AllocationID: allocID, NodeID: nodeID, Mode: r.ClaimMode(), AccessMode: r.AccessMode,
		AttachmentMode: r.AttachmentMode, ReadOnly: r.ReadOnly, State: structs.CSIVolumeClaimStateTaken,
	}
}

// IDs returns a newID function giving id-1, id-2, ...
func IDs(prefix string) func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("%s-%d", prefix, n)
	}
}

// Sorted returns the keys of m, sorted.
func Sorted[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
