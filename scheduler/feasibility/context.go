// Package feasibility decides whether a node can run one allocation of a task
// group: one-method checkers, each recording why it filtered a node, that
// read the cluster through the narrow, read-only State interface. The
// placement in package scheduler runs them.
package feasibility

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// State is what the checkers read. *state.StateStore satisfies it.
type State interface {
	// CSIVolumeByID returns the volume with its plugin health derived, or
	// nil when it does not exist.
	CSIVolumeByID(ws memdb.WatchSet, namespace, id string) (*structs.CSIVolume, error)
	// AllocsByNode returns the allocations placed on a node.
	AllocsByNode(ws memdb.WatchSet, nodeID string) ([]*structs.Allocation, error)
	// JobByID returns the job, or nil when it does not exist.
	JobByID(ws memdb.WatchSet, namespace, id string) (*structs.Job, error)
	// CSIPluginByID returns the plugin, or nil when it is unknown.
	CSIPluginByID(ws memdb.WatchSet, id string) (*structs.CSIPlugin, error)
}

// nsKey names a namespaced object.
type nsKey struct{ namespace, id string }

// Context is one placement run of one job. It caches what it reads, so a
// run sees one view of the state and reads each row once; it holds the
// allocations the run has planned and the ones it stops, which the checkers
// must take into account although they are not in the state yet; and it
// keeps the first state error, since Feasible cannot return one.
type Context struct {
	state State
	job   *structs.Job

	planned   []*structs.Allocation
	plannedBy map[string]*structs.Allocation // by ID
	stopping  map[string]bool

	vols       map[nsKey]*structs.CSIVolume // nil value: the volume does not exist
	jobs       map[nsKey]*structs.Job
	plugins    map[string]*structs.CSIPlugin // nil value: the plugin is unknown
	nodeAllocs map[string][]*structs.Allocation
	nodeUsage  map[string]map[string]map[nsKey]bool // node → plugin → volumes, from the state

	err error
}

// NewContext starts a placement run of job.
func NewContext(st State, job *structs.Job) *Context {
	return &Context{
		state:      st,
		job:        job,
		plannedBy:  map[string]*structs.Allocation{},
		stopping:   map[string]bool{},
		vols:       map[nsKey]*structs.CSIVolume{},
		jobs:       map[nsKey]*structs.Job{},
		plugins:    map[string]*structs.CSIPlugin{},
		nodeAllocs: map[string][]*structs.Allocation{},
		nodeUsage:  map[string]map[string]map[nsKey]bool{},
	}
}

// Job is the job being placed.
func (c *Context) Job() *structs.Job { return c.job }

// Plan records an allocation placed earlier in this run: later checks count
// its volumes on its node and its claims on its volumes.
func (c *Context) Plan(a *structs.Allocation) {
	c.planned = append(c.planned, a)
	c.plannedBy[a.ID] = a
}

// Stop records an allocation of this job that this run stops: its claims
// no longer block the allocation that replaces it.
func (c *Context) Stop(allocID string) { c.stopping[allocID] = true }

// Err is the first error reading the state. A checker that hits one filters
// the node; the run must then be abandoned, not trusted.
func (c *Context) Err() error { return c.err }

func (c *Context) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// volume returns the volume as the state has it (shared: never change it),
// or nil when it does not exist or cannot be read.
func (c *Context) volume(namespace, id string) *structs.CSIVolume {
	k := nsKey{namespace, id}
	if v, ok := c.vols[k]; ok {
		return v
	}
	v, err := c.state.CSIVolumeByID(nil, namespace, id)
	if err != nil {
		c.fail(err)
		return nil
	}
	c.vols[k] = v
	return v
}

// Plugin returns the plugin as the state has it (shared: never change it),
// or nil when it is unknown or cannot be read (Err says which).
func (c *Context) Plugin(id string) *structs.CSIPlugin {
	if p, ok := c.plugins[id]; ok {
		return p
	}
	p, err := c.state.CSIPluginByID(nil, id)
	if err != nil {
		c.fail(err)
		return nil
	}
	c.plugins[id] = p
	return p
}

// jobOf returns the job an allocation belongs to. Allocations of the job
// being placed use it as given, since the state may not have this version
// yet.
func (c *Context) jobOf(a *structs.Allocation) *structs.Job {
	if c.sameJob(a) {
		return c.job
	}
	k := nsKey{a.Namespace, a.JobID}
	if j, ok := c.jobs[k]; ok {
		return j
	}
	j, err := c.state.JobByID(nil, a.Namespace, a.JobID)
	if err != nil {
		c.fail(err)
		return nil
	}
	c.jobs[k] = j
	return j
}

func (c *Context) sameJob(a *structs.Allocation) bool {
	return a.Namespace == c.job.Namespace && a.JobID == c.job.ID
}

// allocsOn returns the allocations the state has on a node.
func (c *Context) allocsOn(nodeID string) []*structs.Allocation {
	if as, ok := c.nodeAllocs[nodeID]; ok {
		return as
	}
	as, err := c.state.AllocsByNode(nil, nodeID)
	if err != nil {
		c.fail(err)
		return nil
	}
	c.nodeAllocs[nodeID] = as
	return as
}

// stateAlloc finds an allocation in the state by the node it is on (claims
// record it); nil when it no longer exists.
func (c *Context) stateAlloc(nodeID, allocID string) *structs.Allocation {
	for _, a := range c.allocsOn(nodeID) {
		if a.ID == allocID {
			return a
		}
	}
	return nil
}

// replaceable reports whether an allocation's claims may be ignored when
// placing: it belongs to this job and is terminal or stopped by this run, so
// what is being placed is its replacement. The claim itself is enforced
// later, when the replacement claims the volume. A live allocation of this
// job that the run keeps is a sibling, not a predecessor, and its claims
// count like anyone's.
func (c *Context) replaceable(a *structs.Allocation) bool {
	return c.sameJob(a) && (a.Terminal() || c.stopping[a.ID])
}

// allocVolumes calls fn for every CSI volume request of an allocation that
// resolves to an existing volume.
func (c *Context) allocVolumes(a *structs.Allocation, fn func(req *structs.VolumeRequest, v *structs.CSIVolume)) {
	j := c.jobOf(a)
	if j == nil {
		return
	}
	tg := j.LookupTaskGroup(a.TaskGroup)
	if tg == nil {
		return
	}
	for _, alias := range sortedAliases(tg) {
		req := tg.Volumes[alias]
		if req.Type != structs.VolumeTypeCSI {
			continue
		}
		// Missing volumes are skipped rather than counted as nothing in
		// particular (Nomad's per-node count stops at the first one).
		if v := c.volume(a.Namespace, req.VolumeID(a.Name)); v != nil {
			fn(req, v)
		}
	}
}

// volumesOn returns, per plugin, the distinct volumes used on a node by the
// non-terminal allocations the state has there and by the allocations this
// run planned there. The result is the caller's.
func (c *Context) volumesOn(nodeID string) map[string]map[nsKey]bool {
	base, ok := c.nodeUsage[nodeID]
	if !ok {
		base = map[string]map[nsKey]bool{}
		for _, a := range c.allocsOn(nodeID) {
			if !a.Terminal() {
				addUsage(base, c, a)
			}
		}
		c.nodeUsage[nodeID] = base
	}
	out := make(map[string]map[nsKey]bool, len(base))
	for p, vols := range base {
		out[p] = make(map[nsKey]bool, len(vols))
		for k := range vols {
			out[p][k] = true
		}
	}
	for _, a := range c.planned {
		if a.NodeID == nodeID {
			addUsage(out, c, a)
		}
	}
	return out
}

func addUsage(m map[string]map[nsKey]bool, c *Context, a *structs.Allocation) {
	c.allocVolumes(a, func(_ *structs.VolumeRequest, v *structs.CSIVolume) {
		if m[v.PluginID] == nil {
			m[v.PluginID] = map[nsKey]bool{}
		}
		m[v.PluginID][nsKey{v.Namespace, v.ID}] = true
	})
}
