package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/volplane/volplane/structs"
)

// Rolling replacement (a group's update max_parallel, see
// structs.TaskGroup.MaxParallel). An allocation of an older job version
// that the new version still wants in its slot (its name, or its node for
// system jobs) is not stopped at once: it stays, counted as placed, until
// the group's budget lets it go. The budget is max_parallel less the
// replacements in flight, which are the group's allocations of the current
// version that are not healthy yet, and the slots whose current-version
// allocation failed and has no replacement yet (a new version that fails
// therefore halts the update, rather than taking every old allocation
// down). Within the budget, the old allocations are stopped in slot order
// (the allocation's index, or the node ID) and replaced in the same plan.
//
// Healthy means: the allocation's client reports it running and, for each
// task of it that runs a CSI plugin, the derived plugin table shows that
// allocation's instance healthy on its node, on the side (controller, node,
// both for monolith) the task runs. The instance must be the allocation's
// own (CSIInfo.AllocID), so an old instance still reported on the node does
// not count for its replacement.
//
// While old allocations are left, the group's placement says so in
// Waiting: how many are left and what each replacement in flight waits
// for. The placer looks at a job with Waiting on every change of
// allocations, nodes or plugins, so the update goes on as soon as the
// replacement is healthy.

// rollSlot orders slots: by the allocation's index for service and batch
// jobs (so "web.g[2]" comes before "web.g[10]"), by node ID for system ones.
func (p *placer) rollSlot(tg *structs.TaskGroup, a, b string) int {
	if !p.job.IsSystem() {
		i, _ := allocIndex(a, p.job.ID, tg.Name)
		j, _ := allocIndex(b, p.job.ID, tg.Name)
		if c := cmp.Compare(i, j); c != 0 {
			return c
		}
	}
	return cmp.Compare(a, b)
}

// roll decides, for every group with allocations of an older version left,
// which of them stop now (and are replaced by this run's placement) and
// which stay for a later run.
func (p *placer) roll() {
	for _, tg := range p.job.TaskGroups {
		g := p.groups[tg.Name]
		if g == nil || len(g.old) == 0 {
			continue
		}
		replaced := fmt.Sprintf("replaced by job version %d", p.job.Version)
		g.inFlight = p.inFlight(tg, g)
		budget := max(0, tg.MaxParallel()-len(g.inFlight))
		slots := slices.SortedFunc(maps.Keys(g.old), func(a, b string) int { return p.rollSlot(tg, a, b) })
		for _, slot := range slots {
			a := g.old[slot]
			switch {
			case g.kept[slot] != nil:
				// Its replacement exists already.
				p.stop(a, replaced)
			case budget > 0:
				p.stop(a, replaced)
				budget--
			default:
				g.kept[slot] = a
				p.perNode[a.NodeID]++
				g.left++
			}
		}
	}
}

// inFlight returns, in slot order, why each replacement in flight of the
// group is not healthy yet.
func (p *placer) inFlight(tg *structs.TaskGroup, g *groupAllocs) []string {
	var out []string
	slots := slices.SortedFunc(maps.Keys(g.kept), func(a, b string) int { return p.rollSlot(tg, a, b) })
	for _, slot := range slots {
		if why := p.unhealthy(tg, g.kept[slot]); why != "" {
			out = append(out, why)
		}
	}
	// A system job's slot on a node that is gone or out of scheduling is
	// not replaced, so it does not hold the update back.
	eligible := map[string]bool{}
	for _, n := range p.nodes {
		eligible[n.ID] = n.Eligible()
	}
	failed := slices.SortedFunc(maps.Keys(g.failed), func(a, b string) int { return p.rollSlot(tg, a, b) })
	for _, slot := range failed {
		if p.job.IsSystem() && !eligible[slot] {
			continue
		}
		if g.kept[slot] == nil && g.old[slot] == nil && !g.done[slot] {
			out = append(out, fmt.Sprintf("waiting for the failed allocation %s to be replaced and run", p.slotName(tg, slot)))
		}
	}
	return out
}

func (p *placer) slotName(tg *structs.TaskGroup, slot string) string {
	if p.job.IsSystem() {
		return structs.AllocName(p.job.ID, tg.Name, 0) + " on node " + slot
	}
	return slot
}

// unhealthy says why an allocation of the current version is not healthy
// yet, "" when it is.
func (p *placer) unhealthy(tg *structs.TaskGroup, a *structs.Allocation) string {
	if a.ClientStatus != structs.AllocClientStatusRunning {
		return fmt.Sprintf("waiting for allocation %s (%s on node %s) to run; it is %s", a.ID, a.Name, a.NodeID, a.ClientStatus)
	}
	for _, t := range tg.Tasks {
		if t == nil || t.CSIPluginConfig == nil {
			continue
		}
		cfg := t.CSIPluginConfig
		plugin := p.ctx.Plugin(cfg.ID)
		var sides []map[string]*structs.CSIInfo
		switch cfg.Type {
		case structs.CSIPluginTypeController:
			sides = append(sides, pluginSide(plugin, true))
		case structs.CSIPluginTypeMonolith:
			sides = append(sides, pluginSide(plugin, true), pluginSide(plugin, false))
		default:
			sides = append(sides, pluginSide(plugin, false))
		}
		for _, side := range sides {
			info := side[a.NodeID]
			if info == nil || !info.Healthy || info.AllocID != a.ID {
				return fmt.Sprintf("waiting for the CSI plugin %q of allocation %s (task %q) to be healthy on node %s",
					cfg.ID, a.ID, t.Name, a.NodeID)
			}
		}
	}
	return ""
}

// pluginSide is a plugin's controller or node instances, by node; nil for
// an unknown plugin.
func pluginSide(p *structs.CSIPlugin, controller bool) map[string]*structs.CSIInfo {
	switch {
	case p == nil:
		return nil
	case controller:
		return p.Controllers
	default:
		return p.Nodes
	}
}

// explainRolling fills the group's Waiting while allocations of an older
// version are left: how many, and what the replacements in flight, those
// that were in flight before this run and those it placed, wait for.
func (p *placer) explainRolling(tg *structs.TaskGroup, gp *structs.GroupPlacement) {
	g := p.groups[tg.Name]
	if g == nil || g.left == 0 {
		return
	}
	gp.Waiting = append(gp.Waiting, fmt.Sprintf("rolling update: %d allocation(s) of an older version left to replace, %d at a time (update max_parallel)",
		g.left, tg.MaxParallel()))
	for _, why := range g.inFlight {
		gp.Waiting = append(gp.Waiting, "rolling update: "+why)
	}
	for _, a := range g.placed {
		gp.Waiting = append(gp.Waiting, "rolling update: "+p.unhealthy(tg, a))
	}
}
