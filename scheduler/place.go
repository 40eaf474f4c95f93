// Package scheduler places a job's allocations on nodes, using the checkers
// of package feasibility. Place is a pure function of its arguments and of
// the state it reads: the leader runs it, and the plan it returns goes
// through Raft like any other write.
package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volplane/volplane/scheduler/feasibility"
	"github.com/volplane/volplane/structs"
)

// Place works out, for every task group of job, which allocations should
// exist and where, given the allocations the job has (existing; others are
// ignored) and the nodes it may use.
//
// Desired allocations: for service and batch jobs, "job.group[0]" to
// "job.group[count-1]"; for system and sysbatch jobs, one per node that
// passes the checkers, every one named "job.group[0]" (the name carries no
// meaning there, since per_alloc is refused for them, and a name that
// depended on the node's position would change as nodes come and go).
//
// Existing non-terminal allocations of the job's current version that are
// still desired are kept untouched, so a run over an unchanged job changes
// nothing. The others are stopped (DesiredStatus stop, with a
// DesiredDescription saying why): every one of a stopped job, those of a
// removed group or of an older job version (and replaced), those beyond the
// count, and duplicates. A group with an update max_parallel (see
// structs.TaskGroup.MaxParallel) replaces the allocations of an older
// version a few at a time instead (see roll, in rolling.go), and says in
// its placement's Waiting what the update waits for. A batch or sysbatch allocation that completed counts
// as done and is neither replaced nor stopped. Missing allocations are placed
// on a feasible node, spreading the job: the node with the fewest of its
// allocations first, then the lowest node ID.
//
// The plan's Allocs holds only new or changed allocations. Its Placement
// holds, for every group, the desired and placed counts and why allocations
// are missing (a volume that does not exist, reported once, or each node's
// reason when no node fits); a group's UpdatedAt is now when its explanation
// changed and kept otherwise.
//
// No change: when no allocation changes and every group's explanation is as
// the job already has it (UpdatedAt aside), Place returns a nil plan and a nil
// error, and the caller skips the Raft write (NoChange says the same). A plan
// that is returned always carries the whole Placement and at least one
// change.
//
// Failed allocations: the slot of an allocation that failed under the job's
// current version is placed again only once reschedule's delay has passed
// since the failure (the allocation's ModifyTime); until then the group says
// so in Blocked and its NextPlacement is the earliest such time, for the
// caller to come back then.
//
// newID gives the IDs of new allocations; now stamps them and is the plan's
// Timestamp. State read errors are returned, with no plan.
func Place(st feasibility.State, nodes []*structs.Node, job *structs.Job, existing []*structs.Allocation,
	now int64, reschedule ReschedulePolicy, newID func() string) (*structs.PlanApplyRequest, error) {
	if job == nil {
		return nil, errors.New("scheduler: no job to place")
	}
	p := &placer{
		job:       job,
		ctx:       feasibility.NewContext(st, job),
		nodes:     sortNodes(nodes),
		now:       now,
		policy:    reschedule,
		newID:     newID,
		perNode:   map[string]int{},
		groups:    map[string]*groupAllocs{},
		placement: map[string]*structs.GroupPlacement{},
	}
	p.reconcile(existing)
	// Every stop before any placement: a stopped allocation's claims and
	// node no longer hold back its replacement.
	p.roll()
	for _, tg := range job.TaskGroups {
		gp := &structs.GroupPlacement{}
		p.placement[tg.Name] = gp
		if job.Stop {
			continue
		}
		if job.IsSystem() {
			p.placeSystem(tg, gp)
		} else {
			p.placeCount(tg, gp)
		}
		p.explainRolling(tg, gp)
		if err := p.ctx.Err(); err != nil {
			return nil, fmt.Errorf("scheduler: placing job %q: %w", job.ID, err)
		}
	}

	if !p.stampPlacement() && len(p.changed) == 0 {
		return nil, nil
	}
	return &structs.PlanApplyRequest{
		Namespace:      job.Namespace,
		JobID:          job.ID,
		JobModifyIndex: job.JobModifyIndex,
		Allocs:         p.changed,
		Placement:      p.placement,
		Timestamp:      now,
	}, nil
}

// NoChange reports whether a plan changes nothing, so that the caller can
// skip the Raft write: Place returns nil then; a plan with neither
// allocations nor a placement (which state.ApplyPlan reads as "keep") is
// treated the same.
func NoChange(plan *structs.PlanApplyRequest) bool {
	return plan == nil || (len(plan.Allocs) == 0 && plan.Placement == nil)
}

type placer struct {
	job    *structs.Job
	ctx    *feasibility.Context
	nodes  []*structs.Node
	now    int64
	policy ReschedulePolicy
	newID  func() string

	// changed are the stopped and the new allocations, in that order.
	changed []*structs.Allocation
	// perNode counts the job's running-to-be allocations per node, for
	// spreading.
	perNode   map[string]int
	groups    map[string]*groupAllocs
	placement map[string]*structs.GroupPlacement
}

// groupAllocs are a group's allocations that stay, by slot: the allocation
// name for service and batch jobs, the node ID for system and sysbatch ones.
type groupAllocs struct {
	kept map[string]*structs.Allocation
	// done are slots whose batch allocation completed.
	done map[string]bool
	// failed are, by slot, the failures under the job's current version.
	failed map[string]failures

	// old are, by slot, the live allocations of an older job version that
	// a rolling update replaces (see roll).
	old map[string]*structs.Allocation
	// left counts the old allocations that stay for a later run; inFlight
	// says why each replacement in flight before this run is not healthy;
	// placed are the allocations this run placed.
	left     int
	inFlight []string
	placed   []*structs.Allocation
}

// failures counts a slot's failed allocations and when the last one failed.
type failures struct {
	count int
	last  int64
}

func (p *placer) group(name string) *groupAllocs {
	g := p.groups[name]
	if g == nil {
		g = &groupAllocs{kept: map[string]*structs.Allocation{}, done: map[string]bool{}, failed: map[string]failures{},
			old: map[string]*structs.Allocation{}}
		p.groups[name] = g
	}
	return g
}

func (p *placer) slot(a *structs.Allocation) string {
	if p.job.IsSystem() {
		return a.NodeID
	}
	return a.Name
}

// reconcile sorts the job's allocations into kept, done and stopped.
func (p *placer) reconcile(existing []*structs.Allocation) {
	var mine []*structs.Allocation
	for _, a := range existing {
		if a != nil && a.Namespace == p.job.Namespace && a.JobID == p.job.ID {
			mine = append(mine, a)
		}
	}
	// The oldest allocation of a slot is the one kept.
	slices.SortFunc(mine, func(a, b *structs.Allocation) int {
		return cmp.Or(cmp.Compare(a.CreateTime, b.CreateTime), cmp.Compare(a.ID, b.ID))
	})
	batch := p.job.Type == structs.JobTypeBatch || p.job.Type == structs.JobTypeSysBatch
	for _, a := range mine {
		tg := p.job.LookupTaskGroup(a.TaskGroup)
		if batch && tg != nil && !a.ServerTerminal() && a.ClientStatus == structs.AllocClientStatusComplete {
			p.group(tg.Name).done[p.slot(a)] = true
			continue
		}
		if a.Terminal() {
			if tg != nil && a.ClientStatus == structs.AllocClientStatusFailed && a.JobVersion == p.job.Version {
				g := p.group(tg.Name)
				f := g.failed[p.slot(a)]
				g.failed[p.slot(a)] = failures{count: f.count + 1, last: max(f.last, a.ModifyTime)}
			}
			continue
		}
		why := p.stopReason(a, tg)
		if why == "" && a.JobVersion != p.job.Version {
			// An older version's allocation, replaced rolling.
			g := p.group(tg.Name)
			if k := g.old[p.slot(a)]; k != nil {
				why = fmt.Sprintf("duplicate of allocation %q", k.ID)
			} else {
				g.old[p.slot(a)] = a
				continue
			}
		}
		if why == "" {
			g := p.group(tg.Name)
			if k := g.kept[p.slot(a)]; k != nil {
				why = fmt.Sprintf("duplicate of allocation %q", k.ID)
			} else {
				g.kept[p.slot(a)] = a
				p.perNode[a.NodeID]++
				continue
			}
		}
		p.stop(a, why)
	}
}

// stopReason says why a live allocation must stop, "" when it may stay.
func (p *placer) stopReason(a *structs.Allocation, tg *structs.TaskGroup) string {
	switch {
	case p.job.Stop:
		return "job stopped"
	case tg == nil:
		return fmt.Sprintf("task group %q is no longer in the job", a.TaskGroup)
	case a.JobVersion != p.job.Version && tg.MaxParallel() == 0:
		return fmt.Sprintf("replaced by job version %d", p.job.Version)
	case p.job.IsSystem():
		return ""
	}
	// The name's index, not a walk over the count: the cost of deciding
	// must not grow with what a job asks for.
	if i, ok := allocIndex(a.Name, p.job.ID, tg.Name); ok && i < tg.Count {
		return ""
	}
	return fmt.Sprintf("not needed: the group's count is %d", tg.Count)
}

func (p *placer) stop(a *structs.Allocation, why string) {
	c := a.Copy()
	c.DesiredStatus = structs.AllocDesiredStatusStop
	c.DesiredDescription = why
	c.ModifyTime = p.now
	p.changed = append(p.changed, c)
	p.ctx.Stop(a.ID)
}

// placeCount places a service or batch group's missing allocations.
func (p *placer) placeCount(tg *structs.TaskGroup, gp *structs.GroupPlacement) {
	g := p.group(tg.Name)
	gp.Desired = tg.Count
	if tg.Count > structs.MaxGroupCountCeiling {
		// Registration refuses such a count; a job stored before the
		// limit existed is not expanded into allocations.
		addReason(gp, fmt.Sprintf("count %d is over the limit of %d", tg.Count, structs.MaxGroupCountCeiling))
		return
	}
	for i := range tg.Count {
		name := structs.AllocName(p.job.ID, tg.Name, i)
		if g.kept[name] != nil || g.done[name] {
			gp.Placed++
			continue
		}
		if p.delayed(g, name, name, gp) {
			continue
		}
		stack := feasibility.NewStack(p.ctx, tg, name)
		if missing := stack.Missing(); len(missing) > 0 {
			// A missing volume blocks the allocation on every node: say so
			// once, not once per node.
			for _, id := range missing {
				addReason(gp, feasibility.MissingReason(id))
			}
			continue
		}
		node := p.best(stack)
		if p.ctx.Err() != nil {
			return
		}
		if node == nil {
			p.explain(gp, stack)
			continue
		}
		p.place(tg, name, node)
		gp.Placed++
	}
}

// placeSystem places a system or sysbatch group on every node that passes
// the checkers and has none of its allocations yet.
func (p *placer) placeSystem(tg *structs.TaskGroup, gp *structs.GroupPlacement) {
	g := p.group(tg.Name)
	name := structs.AllocName(p.job.ID, tg.Name, 0)
	placed, delayed := 0, 0
	for _, n := range p.nodes {
		if g.kept[n.ID] != nil || g.done[n.ID] {
			continue
		}
		if !n.Eligible() {
			// As Nomad's system scheduler: a node taken out of
			// scheduling (draining, ineligible) is not one the job
			// should cover, so it is left out rather than reported as
			// blocking the job for ever.
			continue
		}
		if p.delayed(g, n.ID, name+" on node "+n.ID, gp) {
			delayed++
			continue
		}
		// A stack per node: each placement changes what the next one sees
		// (claims, volumes per node).
		stack := feasibility.NewStack(p.ctx, tg, name)
		if missing := stack.Missing(); len(missing) > 0 {
			for _, id := range missing {
				addReason(gp, feasibility.MissingReason(id))
			}
			break
		}
		if !stack.Feasible(n) {
			if p.ctx.Err() != nil {
				return
			}
			addReason(gp, nodeReason(n, stack))
			continue
		}
		p.place(tg, name, n)
		placed++
	}
	gp.Placed = len(g.kept) + len(g.done) + placed
	gp.Desired = gp.Placed + delayed
}

// delayed reports whether the slot's replacement must wait for the
// reschedule delay of its failures, and then says so in the group's
// placement: what failed, how often, and until when it waits.
func (p *placer) delayed(g *groupAllocs, slot, what string, gp *structs.GroupPlacement) bool {
	f := g.failed[slot]
	if f.count == 0 {
		return false
	}
	at := f.last + int64(p.policy.Delay(f.count))
	if at <= p.now {
		return false
	}
	addReason(gp, fmt.Sprintf("allocation %s failed %s; it is replaced after %s",
		what, times(f.count), time.Unix(0, at).UTC().Format(time.RFC3339)))
	if gp.NextPlacement == 0 || at < gp.NextPlacement {
		gp.NextPlacement = at
	}
	return true
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// best returns the feasible node with the fewest allocations of the job,
// the lowest ID among equals; nil when none is feasible.
func (p *placer) best(stack *feasibility.Stack) *structs.Node {
	var best *structs.Node
	for _, n := range p.nodes {
		if !stack.Feasible(n) {
			continue
		}
		if best == nil || p.perNode[n.ID] < p.perNode[best.ID] {
			best = n
		}
	}
	return best
}

// explain records why no node could take an allocation.
func (p *placer) explain(gp *structs.GroupPlacement, stack *feasibility.Stack) {
	if len(p.nodes) == 0 {
		addReason(gp, "no nodes are registered")
		return
	}
	for _, n := range p.nodes {
		addReason(gp, nodeReason(n, stack))
	}
}

func nodeReason(n *structs.Node, stack *feasibility.Stack) string {
	return fmt.Sprintf("node %s: %s", n.ID, stack.Reasons.Of(n.ID))
}

func (p *placer) place(tg *structs.TaskGroup, name string, node *structs.Node) {
	a := &structs.Allocation{
		ID:            p.newID(),
		Namespace:     p.job.Namespace,
		Name:          name,
		JobID:         p.job.ID,
		JobVersion:    p.job.Version,
		TaskGroup:     tg.Name,
		NodeID:        node.ID,
		DesiredStatus: structs.AllocDesiredStatusRun,
		ClientStatus:  structs.AllocClientStatusPending,
		CreateTime:    p.now,
		ModifyTime:    p.now,
	}
	p.changed = append(p.changed, a)
	p.ctx.Plan(a)
	p.perNode[node.ID]++
	g := p.group(tg.Name)
	g.placed = append(g.placed, a)
}

// addReason appends a reason once: allocations of one group often fail for
// the same reasons.
func addReason(gp *structs.GroupPlacement, why string) {
	if !slices.Contains(gp.Blocked, why) {
		gp.Blocked = append(gp.Blocked, why)
	}
}

// stampPlacement sets each group's UpdatedAt (now when its explanation
// changed, as before otherwise) and reports whether any changed, or a group
// came or went.
func (p *placer) stampPlacement() bool {
	changed := len(p.job.Placement) != len(p.placement)
	for name, gp := range p.placement {
		old := p.job.Placement[name]
		if old != nil && old.Desired == gp.Desired && old.Placed == gp.Placed && slices.Equal(old.Blocked, gp.Blocked) &&
			slices.Equal(old.Waiting, gp.Waiting) {
			gp.UpdatedAt = old.UpdatedAt
			continue
		}
		gp.UpdatedAt = p.now
		changed = true
	}
	return changed
}

// sortNodes returns the nodes by ID, each once.
func sortNodes(nodes []*structs.Node) []*structs.Node {
	out := make([]*structs.Node, 0, len(nodes))
	for _, n := range nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	slices.SortStableFunc(out, func(a, b *structs.Node) int { return cmp.Compare(a.ID, b.ID) })
	return slices.CompactFunc(out, func(a, b *structs.Node) bool { return a.ID == b.ID })
}

// allocIndex is N in an allocation name "job.group[N]" of the given job
// and group.
func allocIndex(name, jobID, group string) (int, bool) {
	rest, ok := strings.CutPrefix(name, jobID+"."+group+"[")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 || structs.AllocName(jobID, group, i) != name {
		return 0, false
	}
	return i, true
}
