package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.NodeIntroUpsertRequestType, applyNodeIntroUpsert)
	register(structs.NodeIntroDeleteRequestType, applyNodeIntroDelete)

	registerRecord(structs.NodeIntroSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.NodeIntroTokens(nil) },
		(*state.StateRestore).NodeIntroRestore)
}

func applyNodeIntroUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeIntroCreateRequest) error {
	return st.UpsertNodeIntroToken(index, req.Token)
}

func applyNodeIntroDelete(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeIntroDeleteRequest) error {
	return st.DeleteNodeIntroTokens(index, req.AccessorIDs)
}
