package server

import (
	"maps"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// GetClientAllocs returns the allocations placed on the calling node and
// their jobs. Clients call it as a blocking query to learn of new, changed
// and stopped allocations.
func (e *Node) GetClientAllocs(args *structs.NodeClientAllocsRequest, reply *structs.NodeClientAllocsResponse) error {
	if done, err := e.srv.forward("Node.GetClientAllocs", args, args, reply); done {
		return err
	}
	if err := e.authenticate(args.NodeID, args.SecretID); err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		allocs, err := st.AllocsByNode(ws, args.NodeID)
		if err != nil {
			return 0, err
		}
		reply.Allocs = []*structs.Allocation{}
		reply.Jobs = map[string]*structs.Job{}
		// The answer's index is the latest write to the node's
		// allocations, as Nomad's (its AllocModifyIndex maximum): a write
		// elsewhere in the cluster does not move it, so a client's long
		// poll answers only when an allocation of its own changed. (The
		// allocations table's index answered every node's poll, each with
		// all its allocations, on every allocation write.) Allocations are
		// never removed from the state, so the index never goes back, and
		// an answer from a server that lacks an allocation has an index
		// below that allocation's, as the client's check of forgotten
		// allocations needs. The jobs are read without being watched: a
		// job's own writes (its status follows every allocation of it, on
		// every node) are nothing the node acts on, and an allocation
		// placed or stopped for a new version of its job is a write of
		// the allocation.
		var index uint64
		for _, a := range allocs {
			reply.Allocs = append(reply.Allocs, a)
			index = max(index, a.ModifyIndex)
			key := structs.JobKey(a.Namespace, a.JobID)
			if _, ok := reply.Jobs[key]; ok {
				continue
			}
			job, err := st.JobByID(nil, a.Namespace, a.JobID)
			if err != nil {
				return 0, err
			}
			if job != nil {
				// The node mounts its volumes with the requests' flags,
				// which the state keeps sealed.
				if job, err = e.srv.openJob(job); err != nil {
					return 0, err
				}
				reply.Jobs[key] = job
			}
		}
		if len(allocs) > 0 {
			return index, nil
		}
		// None yet: the node's own index. Its first allocation, a later
		// write, is above it; and the watch of a node without allocations
		// is a wider part of the allocations' tree, which writes to other
		// nodes wake without moving this index.
		node, err := st.NodeByID(nil, args.NodeID)
		if err != nil {
			return 0, err
		}
		if node == nil {
			return st.IndexWatch(nil, state.TableNodes)
		}
		return node.ModifyIndex, nil
	})
}

// UpdateAlloc records what a client reports about its allocations: their
// client status and its progress with their volumes. It writes only what
// changed. An allocation reported terminal has its volume claims released
// in the same write (state does that).
func (e *Node) UpdateAlloc(args *structs.NodeUpdateAllocRequest, reply *structs.GenericResponse) error {
	if done, err := e.srv.forward("Node.UpdateAlloc", args, args, reply); done {
		return err
	}
	if err := e.authenticate(args.NodeID, args.SecretID); err != nil {
		return err
	}
	if len(args.Allocs) == 0 {
		return structs.ErrInvalid("node %q: no allocation updates", args.NodeID)
	}
	st := e.srv.State()
	var changed []*structs.Allocation
	for _, u := range args.Allocs {
		if u == nil || u.ID == "" {
			return structs.ErrInvalid("node %q: an allocation update without an ID", args.NodeID)
		}
		if !structs.ClientReportable(u.ClientStatus) {
			return structs.ErrInvalid("allocation %q: unknown client status %q", u.ID, u.ClientStatus)
		}
		a, err := st.AllocByID(nil, u.ID)
		if err != nil {
			return err
		}
		if a == nil {
			return structs.ErrNotFound("allocation %q not found", u.ID)
		}
		if a.NodeID != args.NodeID {
			return structs.NewError(structs.ErrCodePermissionDenied, "allocation %q runs on node %q, not %q", u.ID, a.NodeID, args.NodeID)
		}
		c := a.Copy()
		c.ClientStatus, c.ClientDescription = u.ClientStatus, u.ClientDescription
		// What the client reports replaces what it reported before (task
		// states only when it reports them); the merge below refuses an
		// empty entry.
		if u.VolumeStates != nil {
			c.VolumeStates = structs.CopyStates(u.VolumeStates)
		}
		if u.TaskStates != nil {
			c.TaskStates = structs.CopyStates(u.TaskStates)
		}
		// The rule the FSM applies again to the allocation as it is then.
		if _, err := a.MergeClientUpdate(c); err != nil {
			if structs.CodeOf(err) == structs.ErrCodeConflict {
				// A terminal allocation stays terminal (its claims are
				// being released): the report is stale, not wrong.
				continue
			}
			return err
		}
		if c.ClientStatus == a.ClientStatus && c.ClientDescription == a.ClientDescription &&
			maps.EqualFunc(c.VolumeStates, a.VolumeStates, func(x, y *structs.AllocVolumeState) bool { return *x == *y }) &&
			maps.EqualFunc(c.TaskStates, a.TaskStates, func(x, y *structs.TaskState) bool { return x != nil && y != nil && x.Equal(y) }) {
			continue
		}
		changed = append(changed, c)
	}
	if len(changed) == 0 {
		return nil
	}
	_, index, err := e.srv.raftApply(structs.AllocUpsertRequestType, &structs.AllocUpdateRequest{
		Allocs: changed, Timestamp: structs.NowNano(),
	})
	if err != nil {
		return err
	}
	reply.Index = index
	return nil
}

// authenticate checks a node's secret.
func (e *Node) authenticate(nodeID, secret string) error {
	if nodeID == "" {
		return structs.ErrInvalid("missing node ID")
	}
	node, err := e.srv.State().NodeByID(nil, nodeID)
	if err != nil {
		return err
	}
	if node == nil || !node.SecretMatches(secret) {
		return structs.NewError(structs.ErrCodePermissionDenied, "node %q: unknown node or wrong node secret", nodeID)
	}
	return nil
}
