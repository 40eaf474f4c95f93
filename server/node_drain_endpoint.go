package server

import (
	"time"

	"github.com/volplane/volplane/structs"
)

// UpdateDrain starts, updates or ends a node's drain, as Nomad's
// Node.UpdateDrain: the operator sends the drain spec (nil ends the
// drain), MarkEligible and meta; the leader stamps the start, the force
// deadline, the time, the status and the operator's token accessor before
// the Raft apply. The leader's drainer does the rest.
func (e *Node) UpdateDrain(args *structs.NodeUpdateDrainRequest, reply *structs.NodeDrainUpdateResponse) error {
	if done, err := e.srv.forward("Node.UpdateDrain", args, args, reply); done {
		return err
	}
	if err := structs.ValidateID("node id", args.NodeID); err != nil {
		return structs.ErrInvalid("node drain update: %v", err)
	}
	node, err := e.srv.State().NodeByID(nil, args.NodeID)
	if err != nil {
		return err
	}
	if node == nil {
		return structs.ErrNotFound("node %q not found", args.NodeID)
	}
	now := time.Now().UTC()
	args.UpdatedAt = now
	args.AccessorID = ""
	if id, err := e.srv.aclIdentity(args); err == nil && id != nil && id.token != nil {
		args.AccessorID = id.token.AccessorID
	}
	if args.DrainStrategy != nil {
		d := &structs.DrainStrategy{DrainSpec: args.DrainStrategy.DrainSpec, StartedAt: now}
		// Updating a drain keeps when it started, as in Nomad; the
		// deadline counts from the update.
		if node.DrainStrategy != nil {
			d.StartedAt = node.DrainStrategy.StartedAt
		}
		if d.Deadline > 0 {
			d.ForceDeadline = now.Add(d.Deadline)
		}
		args.DrainStrategy = d
		args.Status = structs.DrainStatusDraining
	} else {
		args.Status = structs.DrainStatusCanceled
	}
	if err := args.Validate(); err != nil {
		return err
	}
	_, index, err := e.srv.raftApply(structs.NodeUpdateDrainRequestType, args)
	if err != nil {
		return err
	}
	if args.DrainStrategy != nil {
		e.logger.Info("node drain set", "node_id", args.NodeID, "deadline", args.DrainStrategy.Deadline,
			"ignore_system_jobs", args.DrainStrategy.IgnoreSystemJobs)
	} else {
		e.logger.Info("node drain unset", "node_id", args.NodeID, "mark_eligible", args.MarkEligible)
	}
	reply.NodeModifyIndex, reply.Index, reply.EvalIDs = index, index, []string{}
	return nil
}

// UpdateEligibility sets a node's scheduling eligibility, as Nomad's
// Node.UpdateEligibility. A draining node cannot be made eligible.
func (e *Node) UpdateEligibility(args *structs.NodeUpdateEligibilityRequest, reply *structs.NodeEligibilityUpdateResponse) error {
	if done, err := e.srv.forward("Node.UpdateEligibility", args, args, reply); done {
		return err
	}
	if err := args.Validate(); err != nil {
		return err
	}
	node, err := e.srv.State().NodeByID(nil, args.NodeID)
	if err != nil {
		return err
	}
	if node == nil {
		return structs.ErrNotFound("node %q not found", args.NodeID)
	}
	if node.DrainStrategy != nil && args.Eligibility == structs.NodeSchedulingEligible {
		return structs.ErrConflict("node %q: can not set node's scheduling eligibility to eligible while it is draining", args.NodeID)
	}
	args.UpdatedAt = time.Now().UTC()
	_, index, err := e.srv.raftApply(structs.NodeUpdateEligibilityRequestType, args)
	if err != nil {
		return err
	}
	reply.NodeModifyIndex, reply.Index, reply.EvalIDs = index, index, []string{}
	return nil
}
