package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.AllocUpsertRequestType, applyAllocUpsert)

	registerRecord(structs.AllocSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.Allocs(nil) },
		(*state.StateRestore).AllocRestore)
}

// applyAllocUpsert stamps the leader's time on the allocations; the store
// keeps CreateTime of those that already exist.
func applyAllocUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.AllocUpdateRequest) error {
	for _, a := range req.Allocs {
		if a == nil {
			return structs.ErrInvalid("alloc upsert: empty allocation")
		}
		if a.Namespace == "" {
			a.Namespace = req.RequestNamespace()
		}
		a.CreateTime, a.ModifyTime = req.Timestamp, req.Timestamp
	}
	return st.UpsertAllocs(index, req.Allocs)
}
