package structs

import (
	"maps"
	"time"
)

// Scheduling eligibility of a node, as Nomad's: an ineligible node gets no
// new allocations; the ones it runs stay.
const (
	NodeSchedulingEligible   = "eligible"
	NodeSchedulingIneligible = "ineligible"
)

// ValidEligibility reports whether e is a known scheduling eligibility.
func ValidEligibility(e string) bool {
	return e == NodeSchedulingEligible || e == NodeSchedulingIneligible
}

// DrainStatus is how the last drain of a node stands, as Nomad's.
type DrainStatus string

// Drain statuses.
const (
	DrainStatusDraining DrainStatus = "draining"
	DrainStatusComplete DrainStatus = "complete"
	DrainStatusCanceled DrainStatus = "canceled"
)

// DrainSpec is what an operator asks of a drain, as Nomad's.
type DrainSpec struct {
	// Deadline is how long after the start the allocations still on the
	// node are stopped whatever they wait for. Zero means no deadline; a
	// negative one forces the drain at once (Nomad's -force).
	Deadline time.Duration
	// IgnoreSystemJobs leaves the allocations of system jobs (the node's
	// CSI plugins among them) running on the node.
	IgnoreSystemJobs bool
}

// DrainStrategy is a node's drain in progress: the spec and the times the
// leader stamped on it.
type DrainStrategy struct {
	DrainSpec
	// ForceDeadline is StartedAt plus a positive Deadline (zero otherwise).
	ForceDeadline time.Time
	// StartedAt is when the drain began; updating a drain keeps it.
	StartedAt time.Time
}

// Copy returns a copy.
func (d *DrainStrategy) Copy() *DrainStrategy {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

// Equal compares two strategies.
func (d *DrainStrategy) Equal(o *DrainStrategy) bool {
	if d == nil || o == nil {
		return d == o
	}
	return d.DrainSpec == o.DrainSpec && d.ForceDeadline.Equal(o.ForceDeadline) && d.StartedAt.Equal(o.StartedAt)
}

// DeadlinePassed reports whether the drain must be forced at now: at once
// for a negative deadline, never without one, from ForceDeadline on
// otherwise.
func (d *DrainStrategy) DeadlinePassed(now time.Time) bool {
	switch {
	case d.Deadline < 0:
		return true
	case d.Deadline == 0:
		return false
	}
	return !now.Before(d.ForceDeadline)
}

// DrainMetadata is what is known of a node's last drain, as Nomad's.
type DrainMetadata struct {
	StartedAt time.Time
	UpdatedAt time.Time
	Status    DrainStatus
	// AccessorID is the ACL token that started or last changed the drain.
	AccessorID string
	Meta       map[string]string
}

// Copy returns a deep copy.
func (m *DrainMetadata) Copy() *DrainMetadata {
	if m == nil {
		return nil
	}
	c := *m
	c.Meta = maps.Clone(m.Meta)
	return &c
}

// Draining reports whether the node is being drained.
func (n *Node) Draining() bool { return n.DrainStrategy != nil }

// Eligible reports whether the node may be given new allocations as far as
// its operator is concerned: not ineligible and not draining. A node
// stored before eligibility existed (empty) is eligible.
func (n *Node) Eligible() bool {
	return n.SchedulingEligibility != NodeSchedulingIneligible && n.DrainStrategy == nil
}

// KeepDrainState sets on n, a node as a client registers it, the drain and
// eligibility the servers hold for it (existing, nil for a new node): they
// are the operator's, and a client agent restarting must not undo them. A
// new node starts eligible, without a drain.
func (n *Node) KeepDrainState(existing *Node) {
	if existing == nil {
		n.DrainStrategy, n.LastDrain = nil, nil
		n.SchedulingEligibility = NodeSchedulingEligible
		return
	}
	n.DrainStrategy = existing.DrainStrategy.Copy()
	n.LastDrain = existing.LastDrain.Copy()
	n.SchedulingEligibility = existing.SchedulingEligibility
}

// Limits of what an operator may attach to a drain.
const (
	MaxDrainMetaEntries = 64
	MaxDrainMetaLength  = 1024
)

// NodeUpdateDrainRequest starts, updates or ends a node's drain. The
// operator sends NodeID, DrainStrategy (its DrainSpec; nil ends the
// drain), MarkEligible and Meta; the leader stamps the rest before the
// Raft apply.
type NodeUpdateDrainRequest struct {
	NodeID        string
	DrainStrategy *DrainStrategy
	// MarkEligible makes the node eligible again when the drain ends.
	MarkEligible bool
	Meta         map[string]string

	// Status is the drain's status after this update: draining with a
	// strategy, canceled when an operator ends it, complete when the
	// leader's drainer finished it. Set by the leader.
	Status DrainStatus
	// UpdatedAt is the leader's clock at the update.
	UpdatedAt time.Time
	// AccessorID is the token of the operator, set by the leader; the
	// drainer's own updates keep the last one.
	AccessorID string
	WriteRequest
}

// Validate checks the request as the FSM applies it.
func (r *NodeUpdateDrainRequest) Validate() error {
	var m MultiError
	if err := ValidateID("node id", r.NodeID); err != nil {
		m.AddErr(err)
	}
	switch {
	case r.DrainStrategy != nil && r.Status != DrainStatusDraining:
		m.Add("a drain strategy with status %q, not %q", r.Status, DrainStatusDraining)
	case r.DrainStrategy == nil && r.Status != DrainStatusComplete && r.Status != DrainStatusCanceled:
		m.Add("no drain strategy with status %q", r.Status)
	}
	if r.DrainStrategy != nil && r.DrainStrategy.StartedAt.IsZero() {
		m.Add("drain strategy without a start time")
	}
	if r.UpdatedAt.IsZero() {
		m.Add("drain update without a time")
	}
	validateDrainMeta(&m, r.Meta)
	return m.ErrorOrNil("node drain update")
}

func validateDrainMeta(m *MultiError, meta map[string]string) {
	if len(meta) > MaxDrainMetaEntries {
		m.Add("drain meta has %d entries, more than %d", len(meta), MaxDrainMetaEntries)
	}
	for _, k := range sortedKeys(meta) {
		if len(k) > MaxDrainMetaLength || len(meta[k]) > MaxDrainMetaLength {
			m.Add("drain meta %q: key or value is longer than %d characters", truncate(k, 64), MaxDrainMetaLength)
		}
	}
}

// NodeDrainUpdateResponse answers a drain update, in Nomad's shape. No
// evaluations exist here: EvalIDs is empty and EvalCreateIndex zero.
type NodeDrainUpdateResponse struct {
	NodeModifyIndex uint64
	EvalIDs         []string
	EvalCreateIndex uint64
	Index           uint64
}

// NodeUpdateEligibilityRequest sets a node's scheduling eligibility.
type NodeUpdateEligibilityRequest struct {
	NodeID      string
	Eligibility string
	// UpdatedAt is the leader's clock at the update.
	UpdatedAt time.Time
	WriteRequest
}

// Validate checks the request as the FSM applies it.
func (r *NodeUpdateEligibilityRequest) Validate() error {
	var m MultiError
	if err := ValidateID("node id", r.NodeID); err != nil {
		m.AddErr(err)
	}
	if !ValidEligibility(r.Eligibility) {
		m.Add("invalid scheduling eligibility %q (want %q or %q)", r.Eligibility, NodeSchedulingEligible, NodeSchedulingIneligible)
	}
	return m.ErrorOrNil("node eligibility update")
}

// NodeEligibilityUpdateResponse answers an eligibility update, in Nomad's
// shape.
type NodeEligibilityUpdateResponse struct {
	NodeModifyIndex uint64
	EvalIDs         []string
	EvalCreateIndex uint64
	Index           uint64
}

// AllocDrainStopRequest is the leader's drainer stopping allocations of a
// draining node: each is set to desired status stop with Description, so
// the placer replaces those that need a replacement on other nodes.
type AllocDrainStopRequest struct {
	NodeID      string
	AllocIDs    []string
	Description string
	// Timestamp is the leader's clock, the allocations' ModifyTime.
	Timestamp int64
	WriteRequest
}

// Validate checks the request as the FSM applies it.
func (r *AllocDrainStopRequest) Validate() error {
	var m MultiError
	if err := ValidateID("node id", r.NodeID); err != nil {
		m.AddErr(err)
	}
	if len(r.AllocIDs) == 0 {
		m.Add("no allocations to stop")
	}
	for _, id := range r.AllocIDs {
		if err := ValidateID("allocation id", id); err != nil {
			m.AddErr(err)
		}
	}
	return m.ErrorOrNil("drain stop of allocations")
}

// Drain descriptions of allocations the drainer stopped.
const (
	AllocDrainDescription       = "node is draining"
	AllocDrainForcedDescription = "node drain deadline reached"
)
