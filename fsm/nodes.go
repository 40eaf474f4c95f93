package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.NodeRegisterRequestType, applyNodeRegister)
	register(structs.NodeRegisterHashedRequestType, applyNodeRegisterHashed)
	register(structs.NodeUpdateStatusRequestType, applyNodeUpdateStatus)
	register(structs.NodeDeregisterRequestType, applyNodeDeregister)

	registerRecord(structs.NodeHashedSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.Nodes(nil) },
		(*state.StateRestore).NodeRestore)
	// An older build's snapshot: NodeRestore hashes each node's secret.
	registerRestorer(structs.NodeSnapshot, (*state.StateRestore).NodeRestore)
}

func applyNodeRegister(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeRegisterRequest) error {
	return st.RegisterNode(index, req)
}

// applyNodeRegisterHashed applies a registration whose node carries the
// hash of its secret: one that carries the secret itself, or no hash, was
// not written by a leader that hashes.
func applyNodeRegisterHashed(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeRegisterRequest) error {
	if req.Node != nil && (req.Node.SecretID != "" || len(req.Node.SecretHash) == 0) {
		return structs.ErrInvalid("node %q: a hashed registration must carry the secret's hash and not the secret", req.Node.ID)
	}
	return st.RegisterNode(index, req)
}

func applyNodeUpdateStatus(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeUpdateStatusRequest) error {
	return st.UpdateNodeStatus(index, req)
}

func applyNodeDeregister(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeDeregisterRequest) error {
	return st.DeleteNode(index, req.NodeIDs)
}
