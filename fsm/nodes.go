package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.NodeRegisterRequestType, applyNodeRegister)
	register(structs.NodeUpdateStatusRequestType, applyNodeUpdateStatus)
	register(structs.NodeDeregisterRequestType, applyNodeDeregister)

	registerRecord(structs.NodeSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.Nodes(nil) },
		(*state.StateRestore).NodeRestore)
}

func applyNodeRegister(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeRegisterRequest) error {
	return st.RegisterNode(index, req)
}

func applyNodeUpdateStatus(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeUpdateStatusRequest) error {
	return st.UpdateNodeStatus(index, req)
}

func applyNodeDeregister(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeDeregisterRequest) error {
	return st.DeleteNode(index, req.NodeIDs)
}
