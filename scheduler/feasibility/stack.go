package feasibility

import "github.com/volplane/volplane/structs"

// Stack is the checkers for one allocation of a task group, in the order
// they run: the node itself, then what the volumes need of every node
// (existence, plugin health), then what they need of this node (plugin,
// topology, room), then the claims. The first checker that filters a node
// decides its reason.
type Stack struct {
	// Reasons says why each filtered node was filtered.
	Reasons *Reasons
	// Requests are the group's CSI volume requests resolved for the
	// allocation.
	Requests []*Request

	checkers []Checker
}

// NewStack builds the checkers for the allocation named allocName of tg,
// resolving its volume requests through ctx.
func NewStack(ctx *Context, tg *structs.TaskGroup, allocName string) *Stack {
	r := NewReasons()
	reqs := ResolveRequests(ctx, tg, allocName)
	return &Stack{
		Reasons:  r,
		Requests: reqs,
		checkers: []Checker{
			NewNodeReady(r),
			NewNodeEligible(r),
			NewVolumesExist(r, reqs),
			NewVolumesSchedulable(r, reqs),
			NewPluginOnNode(r, reqs),
			NewTopology(r, reqs),
			NewMaxVolumes(ctx, r, reqs),
			NewClaims(ctx, r, reqs, allocName),
		},
	}
}

// Feasible implements Checker: every checker must pass.
func (s *Stack) Feasible(node *structs.Node) bool {
	s.Reasons.clear(node.ID)
	for _, c := range s.checkers {
		if !c.Feasible(node) {
			return false
		}
	}
	return true
}

// Missing lists the requested volumes that do not exist (see Missing).
func (s *Stack) Missing() []string { return Missing(s.Requests) }
