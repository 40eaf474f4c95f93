package feasibility

import (
	"fmt"
	"slices"
	"strings"

	"github.com/volplane/volplane/structs"
)

// Checker decides whether a node can run an allocation. One that says no
// records why in the Reasons it was built with.
type Checker interface {
	Feasible(node *structs.Node) bool
}

// Reasons records, per node, why a checker filtered it.
type Reasons struct {
	byNode map[string]string
}

// NewReasons returns an empty record.
func NewReasons() *Reasons { return &Reasons{byNode: map[string]string{}} }

// Of returns why the node was last filtered, "" when it was not.
func (r *Reasons) Of(nodeID string) string { return r.byNode[nodeID] }

// filter records why node is filtered and returns false, so a checker can
// end with `return c.reasons.filter(...)`.
func (r *Reasons) filter(node *structs.Node, format string, args ...any) bool {
	r.byNode[node.ID] = fmt.Sprintf(format, args...)
	return false
}

func (r *Reasons) clear(nodeID string) { delete(r.byNode, nodeID) }

// NodeReady filters nodes that are not ready: down or still initializing.
type NodeReady struct{ reasons *Reasons }

// NewNodeReady returns the checker.
func NewNodeReady(r *Reasons) *NodeReady { return &NodeReady{reasons: r} }

// Feasible implements Checker.
func (c *NodeReady) Feasible(node *structs.Node) bool {
	if node.Status != structs.NodeStatusReady {
		return c.reasons.filter(node, "node is not ready (status %q)", node.Status)
	}
	return true
}

// Why NodeEligible filters a node, as Nomad's.
const (
	ReasonNodeDraining   = "node is draining"
	ReasonNodeIneligible = "node is ineligible"
)

// NodeEligible filters nodes an operator took out of scheduling: draining
// (node drain) or ineligible (node eligibility -disable). What runs there
// stays; nothing new goes there, system jobs' allocations included.
type NodeEligible struct{ reasons *Reasons }

// NewNodeEligible returns the checker.
func NewNodeEligible(r *Reasons) *NodeEligible { return &NodeEligible{reasons: r} }

// Feasible implements Checker.
func (c *NodeEligible) Feasible(node *structs.Node) bool {
	switch {
	case node.Draining():
		return c.reasons.filter(node, ReasonNodeDraining)
	case node.SchedulingEligibility == structs.NodeSchedulingIneligible:
		return c.reasons.filter(node, ReasonNodeIneligible)
	}
	return true
}

// VolumesExist filters every node while a requested volume does not exist.
// Placement reports missing volumes once rather than per node (see Missing);
// this checker keeps a stack correct on its own.
type VolumesExist struct {
	reasons *Reasons
	reqs    []*Request
}

// NewVolumesExist returns the checker for one allocation's requests.
func NewVolumesExist(r *Reasons, reqs []*Request) *VolumesExist {
	return &VolumesExist{reasons: r, reqs: reqs}
}

// Feasible implements Checker.
func (c *VolumesExist) Feasible(node *structs.Node) bool {
	missing := Missing(c.reqs)
	if len(missing) == 0 {
		return true
	}
	why := make([]string, len(missing))
	for i, id := range missing {
		why[i] = MissingReason(id)
	}
	return c.reasons.filter(node, "%s", strings.Join(why, "; "))
}

// VolumesSchedulable filters every node while a requested volume's plugin
// has no healthy node plugin anywhere (or no healthy controller when it
// needs one): a claim would be refused wherever the allocation went.
type VolumesSchedulable struct {
	reasons *Reasons
	reqs    []*Request
}

// NewVolumesSchedulable returns the checker for one allocation's requests.
func NewVolumesSchedulable(r *Reasons, reqs []*Request) *VolumesSchedulable {
	return &VolumesSchedulable{reasons: r, reqs: reqs}
}

// Feasible implements Checker.
func (c *VolumesSchedulable) Feasible(node *structs.Node) bool {
	for _, r := range c.reqs {
		v := r.Volume
		switch {
		case v == nil || v.Schedulable:
		case v.UnschedulableReason != "":
			return c.reasons.filter(node, "volume %q is unschedulable: %s", v.ID, v.UnschedulableReason)
		case v.NodesHealthy == 0:
			return c.reasons.filter(node, "volume %q is unschedulable: plugin %q has no healthy node plugins", v.ID, v.PluginID)
		case v.ControllerRequired && v.ControllersHealthy == 0:
			return c.reasons.filter(node, "volume %q is unschedulable: plugin %q requires a controller and has no healthy controllers", v.ID, v.PluginID)
		default:
			return c.reasons.filter(node, "volume %q is unschedulable", v.ID)
		}
	}
	return true
}

// PluginOnNode filters nodes that do not run a healthy node plugin of every
// requested volume's plugin: nothing there could stage or publish it.
type PluginOnNode struct {
	reasons *Reasons
	reqs    []*Request
}

// NewPluginOnNode returns the checker for one allocation's requests.
func NewPluginOnNode(r *Reasons, reqs []*Request) *PluginOnNode {
	return &PluginOnNode{reasons: r, reqs: reqs}
}

// Feasible implements Checker.
func (c *PluginOnNode) Feasible(node *structs.Node) bool {
	for _, p := range pluginsOf(c.reqs) {
		info := node.CSINodePlugins[p]
		switch {
		case info == nil:
			return c.reasons.filter(node, "CSI plugin %q is missing", p)
		case !info.Healthy && info.HealthDescription != "":
			return c.reasons.filter(node, "CSI plugin %q is unhealthy: %s", p, info.HealthDescription)
		case !info.Healthy:
			return c.reasons.filter(node, "CSI plugin %q is unhealthy", p)
		}
	}
	return true
}

// Topology filters nodes from which a requested volume is not accessible.
// As the CSI spec and Kubernetes read it, a node qualifies when its plugin's
// accessible topology holds every segment of at least one of the volume's
// topologies. A volume without topologies is accessible everywhere; a node
// that reports no topology qualifies for no volume that has some.
type Topology struct {
	reasons *Reasons
	reqs    []*Request
}

// NewTopology returns the checker for one allocation's requests.
func NewTopology(r *Reasons, reqs []*Request) *Topology {
	return &Topology{reasons: r, reqs: reqs}
}

// Feasible implements Checker.
func (c *Topology) Feasible(node *structs.Node) bool {
	for _, r := range c.reqs {
		v := r.Volume
		if v == nil || len(v.Topologies) == 0 {
			continue
		}
		var have *structs.CSITopology
		if info := node.CSINodePlugins[v.PluginID]; info != nil && info.NodeInfo != nil {
			have = info.NodeInfo.AccessibleTopology
		}
		want := make([]string, 0, len(v.Topologies))
		for _, t := range v.Topologies {
			if t == nil {
				continue
			}
			if have != nil && have.Contains(t) {
				want = nil
				break
			}
			want = append(want, formatTopology(t))
		}
		if want == nil {
			continue
		}
		if have == nil || len(have.Segments) == 0 {
			return c.reasons.filter(node, "volume %q requires topology %s and the node reports none for plugin %q",
				v.ID, strings.Join(want, " or "), v.PluginID)
		}
		return c.reasons.filter(node, "volume %q requires topology %s; the node has %s",
			v.ID, strings.Join(want, " or "), formatTopology(have))
	}
	return true
}

// MaxVolumes filters nodes where the allocation would take a plugin past its
// max_volumes_per_node (NodeInfo.MaxVolumes; 0 means no limit). It counts
// distinct volumes, so a volume already mounted on the node costs nothing
// more, and it counts those of the allocations this run placed earlier on
// the node, so one run cannot overfill a node.
type MaxVolumes struct {
	ctx     *Context
	reasons *Reasons
	reqs    []*Request
}

// NewMaxVolumes returns the checker for one allocation's requests.
func NewMaxVolumes(ctx *Context, r *Reasons, reqs []*Request) *MaxVolumes {
	return &MaxVolumes{ctx: ctx, reasons: r, reqs: reqs}
}

// Feasible implements Checker.
func (c *MaxVolumes) Feasible(node *structs.Node) bool {
	var used map[string]map[nsKey]bool
	for _, p := range pluginsOf(c.reqs) {
		info := node.CSINodePlugins[p]
		if info == nil || info.NodeInfo == nil || info.NodeInfo.MaxVolumes <= 0 {
			continue
		}
		if used == nil {
			used = c.ctx.volumesOn(node.ID)
			if err := c.ctx.Err(); err != nil {
				return c.reasons.filter(node, "reading the allocations on the node failed: %v", err)
			}
		}
		inUse := len(used[p])
		total := used[p]
		if total == nil {
			total = map[nsKey]bool{}
		}
		var adding []string
		for _, r := range c.reqs {
			if r.Volume == nil || r.Volume.PluginID != p {
				continue
			}
			if k := (nsKey{r.Volume.Namespace, r.Volume.ID}); !total[k] {
				total[k] = true
				adding = append(adding, fmt.Sprintf("%q", r.ID))
			}
		}
		if max := info.NodeInfo.MaxVolumes; int64(len(total)) > max {
			slices.Sort(adding)
			return c.reasons.filter(node, "CSI plugin %q has %d volumes on the node, its maximum is %d: volume %s would exceed it",
				p, inUse, max, strings.Join(adding, ", "))
		}
	}
	return true
}
