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

// applyAllocUpsert records clients' reports on their allocations, stamped
// with the leader's time; the store takes only what a client owns from
// them (state.StateStore.UpdateAllocsFromClient).
func applyAllocUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.AllocUpdateRequest) error {
	for _, a := range req.Allocs {
		if a == nil {
			return structs.ErrInvalid("alloc upsert: empty allocation")
		}
		if a.Namespace == "" {
			a.Namespace = req.RequestNamespace()
		}
		a.ModifyTime = req.Timestamp
	}
	return st.UpdateAllocsFromClient(index, req.Allocs)
}
