package state

import (
	"maps"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// UpdateNodeDrain starts, updates or ends a node's drain (see
// structs.NodeUpdateDrainRequest). The node's LastDrain follows: a new
// drain starts it afresh, an update or an end keeps its start and meta
// (an end's meta, when given, replaces it). While draining the node is
// ineligible; when the drain ends it stays so unless MarkEligible.
func (s *StateStore) UpdateNodeDrain(index uint64, req *structs.NodeUpdateDrainRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := updateNodeDrainTxn(txn, index, req); err != nil {
		return err
	}
	return commit(txn, index)
}

func updateNodeDrainTxn(txn *memdb.Txn, index uint64, req *structs.NodeUpdateDrainRequest) error {
	if req == nil {
		return structs.ErrInvalid("node drain update: empty request")
	}
	if err := req.Validate(); err != nil {
		return err
	}
	existing, err := nodeByIDTxn(txn, nil, req.NodeID)
	if err != nil {
		return err
	}
	if existing == nil {
		return structs.ErrNotFound("node %q not found", req.NodeID)
	}
	if req.DrainStrategy == nil && existing.DrainStrategy == nil {
		// Ending a drain that ended already (a cancel racing the
		// drainer's completion, or a repeat) changes nothing but may
		// still make the node eligible, as in Nomad.
		if !req.MarkEligible || existing.SchedulingEligibility == structs.NodeSchedulingEligible {
			return nil
		}
		n := existing.Copy()
		n.SchedulingEligibility = structs.NodeSchedulingEligible
		return writeNodeTxn(txn, index, existing, n)
	}
	n := existing.Copy()
	n.DrainStrategy = req.DrainStrategy.Copy()
	last := n.LastDrain
	if existing.DrainStrategy == nil || last == nil {
		last = &structs.DrainMetadata{StartedAt: req.UpdatedAt}
		if req.DrainStrategy != nil {
			last.StartedAt = req.DrainStrategy.StartedAt
		}
	}
	last.UpdatedAt = req.UpdatedAt
	last.Status = req.Status
	if req.AccessorID != "" {
		last.AccessorID = req.AccessorID
	}
	if req.Meta != nil {
		last.Meta = maps.Clone(req.Meta)
	}
	n.LastDrain = last
	switch {
	case req.DrainStrategy != nil:
		n.SchedulingEligibility = structs.NodeSchedulingIneligible
	case req.MarkEligible:
		n.SchedulingEligibility = structs.NodeSchedulingEligible
	default:
		n.SchedulingEligibility = structs.NodeSchedulingIneligible
	}
	return writeNodeTxn(txn, index, existing, n)
}

// UpdateNodeEligibility sets a node's scheduling eligibility. A draining
// node cannot be made eligible (Nomad's rule): end the drain instead.
func (s *StateStore) UpdateNodeEligibility(index uint64, req *structs.NodeUpdateEligibilityRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if req == nil {
		return structs.ErrInvalid("node eligibility update: empty request")
	}
	if err := req.Validate(); err != nil {
		return err
	}
	existing, err := nodeByIDTxn(txn, nil, req.NodeID)
	if err != nil {
		return err
	}
	if existing == nil {
		return structs.ErrNotFound("node %q not found", req.NodeID)
	}
	if existing.DrainStrategy != nil && req.Eligibility == structs.NodeSchedulingEligible {
		return structs.ErrConflict("node %q: can not set node's scheduling eligibility to eligible while it is draining", req.NodeID)
	}
	n := existing.Copy()
	n.SchedulingEligibility = req.Eligibility
	if err := writeNodeTxn(txn, index, existing, n); err != nil {
		return err
	}
	return commit(txn, index)
}

// DrainStopAllocs applies the drainer's stop of allocations on a draining
// node, all or nothing: each must exist and run on that node, which must
// be draining. One stopped already is left as it is (the drainer may
// repeat itself after a leader change). Each stop gives up its claims in
// the same write, as any stop does.
func (s *StateStore) DrainStopAllocs(index uint64, req *structs.AllocDrainStopRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if req == nil {
		return structs.ErrInvalid("drain stop of allocations: empty request")
	}
	if err := req.Validate(); err != nil {
		return err
	}
	node, err := nodeByIDTxn(txn, nil, req.NodeID)
	if err != nil {
		return err
	}
	if node == nil {
		return structs.ErrNotFound("node %q not found", req.NodeID)
	}
	if node.DrainStrategy == nil {
		return structs.ErrConflict("node %q is not draining; its allocations are not stopped", req.NodeID)
	}
	jobs := map[[2]string]bool{}
	for _, id := range req.AllocIDs {
		existing, err := allocByIDTxn(txn, nil, id)
		if err != nil {
			return err
		}
		if existing == nil {
			return structs.ErrNotFound("allocation %q not found", id)
		}
		if existing.NodeID != req.NodeID {
			return structs.ErrInvalid("allocation %q runs on node %q, not on the draining node %q", id, existing.NodeID, req.NodeID)
		}
		if existing.ServerTerminal() {
			continue
		}
		next := existing.Copy()
		next.DesiredStatus = structs.AllocDesiredStatusStop
		next.DesiredDescription = req.Description
		write, err := existing.MergePlanUpdate(next)
		if err != nil {
			return err
		}
		write.ModifyTime = req.Timestamp
		if err := upsertAllocTxn(txn, index, write); err != nil {
			return err
		}
		jobs[[2]string{existing.Namespace, existing.JobID}] = true
	}
	if err := refreshJobsTxn(txn, index, jobs); err != nil {
		return err
	}
	return commit(txn, index)
}

// CSIVolumesByClaimAlloc returns the volumes on which the allocation holds
// a live or past claim.
func (s *StateStore) CSIVolumesByClaimAlloc(ws memdb.WatchSet, allocID string) ([]*structs.CSIVolume, error) {
	iter, err := getWatch(s.db.Txn(false), ws, TableCSIVolumes, indexClaimAlloc, allocID)
	if err != nil {
		return nil, err
	}
	var out []*structs.CSIVolume
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		out = append(out, raw.(*structs.CSIVolume))
	}
	return out, nil
}
