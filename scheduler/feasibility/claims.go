package feasibility

import (
	"fmt"
	"maps"
	"slices"

	"github.com/volplane/volplane/structs"
)

// Claims filters nodes when the allocation could not take the read or write
// claim each of its requests needs. The rules are the volume's own
// (CSIVolume.CheckClaim, the same check a claim meets on the leader and in
// the FSM), applied to a synthesized claim against a view of the volume in
// which:
//   - the claims of earlier allocations of the same job that are terminal or
//     stopped by this run are freed, for readers and writers alike: what is
//     being placed replaces them, and the real claim waits for their release
//     at claim time;
//   - the allocations this run planned earlier hold the claims they will
//     take, so one run cannot place two writers on a single-writer volume.
//
// The claim rules do not depend on the node, so the verdict is worked out on
// the first call and repeated for every node.
type Claims struct {
	ctx       *Context
	reasons   *Reasons
	reqs      []*Request
	allocName string

	checked bool
	why     string
}

// NewClaims returns the checker for the requests of the allocation named
// allocName.
func NewClaims(ctx *Context, r *Reasons, reqs []*Request, allocName string) *Claims {
	return &Claims{ctx: ctx, reasons: r, reqs: reqs, allocName: allocName}
}

// Feasible implements Checker.
func (c *Claims) Feasible(node *structs.Node) bool {
	if !c.checked {
		c.why, c.checked = c.check(node), true
	}
	if c.why == "" {
		return true
	}
	return c.reasons.filter(node, "%s", c.why)
}

func (c *Claims) check(node *structs.Node) string {
	views := map[nsKey]*structs.CSIVolume{}
	for _, r := range c.reqs {
		if r.Volume == nil {
			continue // VolumesExist reports it
		}
		k := nsKey{r.Volume.Namespace, r.Volume.ID}
		v := views[k]
		if v == nil {
			v = c.view(r.Volume)
			views[k] = v
		}
		if err := c.ctx.Err(); err != nil {
			return fmt.Sprintf("volume %q: reading its claims failed: %v", r.ID, err)
		}
		claim := newClaim(c.allocName, node.ID, r.Request)
		if err := v.CheckClaim(claim); err != nil {
			return c.explain(v, claim, err)
		}
		// A group may mount one volume twice (say, with different mount
		// options); the second request sees the first one's claim.
		_ = v.Claim(claim)
	}
	return ""
}

func newClaim(allocID, nodeID string, req *structs.VolumeRequest) *structs.CSIVolumeClaim {
	return &structs.CSIVolumeClaim{
		AllocationID:   allocID,
		NodeID:         nodeID,
		Mode:           req.ClaimMode(),
		AccessMode:     req.AccessMode,
		AttachmentMode: req.AttachmentMode,
		ReadOnly:       req.ReadOnly,
		State:          structs.CSIVolumeClaimStateTaken,
	}
}

// view returns a copy of vol as the new allocation would find it.
func (c *Claims) view(vol *structs.CSIVolume) *structs.CSIVolume {
	v := vol.Copy()
	for _, h := range holders(v) {
		if a := c.ctx.stateAlloc(h.NodeID, h.AllocationID); a != nil && c.ctx.replaceable(a) {
			// Freeing also resets the current modes when nothing else holds
			// the volume, exactly as the real release will.
			v.FreeClaims(h.AllocationID)
		}
	}
	for _, a := range c.ctx.planned {
		c.ctx.allocVolumes(a, func(req *structs.VolumeRequest, pv *structs.CSIVolume) {
			if pv.Namespace == v.Namespace && pv.ID == v.ID {
				// It passed this very check when it was planned.
				_ = v.Claim(newClaim(a.ID, a.NodeID, req))
			}
		})
	}
	return v
}

// explain turns a refused claim into the reason a node is filtered.
func (c *Claims) explain(v *structs.CSIVolume, claim *structs.CSIVolumeClaim, err error) string {
	code := structs.CodeOf(err)
	// Conflicts with other claims; an unschedulable volume is
	// VolumesSchedulable's business, so here that code means the volume is
	// claimed read-only and takes no writer.
	conflict := code == structs.ErrCodeMaxClaims || (code == structs.ErrCodeUnschedulable && v.Schedulable)
	if !conflict {
		return structs.MessageOf(err)
	}
	if gone := c.goneHolder(v, claim); gone != "" {
		return fmt.Sprintf("volume %q: waiting for claim of garbage-collected allocation %q to be released", v.ID, gone)
	}
	h := pick(v, claim.Mode, func(string) bool { return true })
	if code == structs.ErrCodeMaxClaims {
		return fmt.Sprintf("volume %q has exhausted its available %s claims: %s", v.ID, kind(claim.Mode), c.describe(v, h))
	}
	return fmt.Sprintf("volume %q is claimed read-only (%s) and takes no writer: %s", v.ID, v.AccessMode, c.describe(v, h))
}

// goneHolder returns the allocation, no longer in the state, whose claim
// alone stands in the way; "" when there is none. Such a claim goes once the
// servers release it, so the allocation waits rather than fails.
func (c *Claims) goneHolder(v *structs.CSIVolume, claim *structs.CSIVolumeClaim) string {
	gone := map[string]bool{}
	w := v.Copy()
	for _, h := range holders(v) {
		if c.ctx.plannedBy[h.AllocationID] == nil && c.ctx.stateAlloc(h.NodeID, h.AllocationID) == nil {
			gone[h.AllocationID] = true
			w.FreeClaims(h.AllocationID)
		}
	}
	if len(gone) == 0 || w.CheckClaim(claim) != nil {
		return ""
	}
	return pick(v, claim.Mode, func(id string) bool { return gone[id] }).AllocationID
}

// describe names a conflicting claim and who holds it.
func (c *Claims) describe(v *structs.CSIVolume, h *structs.CSIVolumeClaim) string {
	if h == nil {
		return "another allocation holds a claim"
	}
	if p := c.ctx.plannedBy[h.AllocationID]; p != nil {
		return fmt.Sprintf("allocation %q placed on node %q by this placement takes a %s claim", p.Name, p.NodeID, h.Mode)
	}
	a := c.ctx.stateAlloc(h.NodeID, h.AllocationID)
	if a == nil {
		return fmt.Sprintf("garbage-collected allocation %q holds a %s claim", h.AllocationID, h.Mode)
	}
	s := fmt.Sprintf("allocation %q of job %q holds a %s claim", a.ID, a.JobID, h.Mode)
	switch past := v.PastClaims[a.ID]; {
	case past != nil:
		s += fmt.Sprintf(" (being released: %s)", past.State)
	case a.Terminal():
		s += " (the allocation has stopped; its claim is not released yet)"
	}
	return s
}

// holders lists the live claims, readers then writers, each by allocation ID.
func holders(v *structs.CSIVolume) []*structs.CSIVolumeClaim {
	var out []*structs.CSIVolumeClaim
	for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims} {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			out = append(out, m[id])
		}
	}
	return out
}

// pick returns the first claim, among those ok accepts, that conflicts with
// a claim of the given mode: for a writer the writers come first, for a
// reader the readers. In every row of the claim table that refuses a claim,
// that is a claim the refusal is about.
func pick(v *structs.CSIVolume, mode structs.CSIVolumeClaimMode, ok func(id string) bool) *structs.CSIVolumeClaim {
	order := []map[string]*structs.CSIVolumeClaim{v.WriteClaims, v.ReadClaims}
	if mode == structs.CSIVolumeClaimRead {
		order[0], order[1] = order[1], order[0]
	}
	for _, m := range order {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			if ok(id) {
				return m[id]
			}
		}
	}
	return nil
}

func kind(m structs.CSIVolumeClaimMode) string {
	if m == structs.CSIVolumeClaimWrite {
		return "writer"
	}
	return "reader"
}
