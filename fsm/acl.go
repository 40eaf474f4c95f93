package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.ACLPolicyUpsertRequestType, applyACLPolicyUpsert)
	register(structs.ACLPolicyDeleteRequestType, applyACLPolicyDelete)
	register(structs.ACLTokenUpsertRequestType, applyACLTokenUpsert)
	register(structs.ACLTokenDeleteRequestType, applyACLTokenDelete)
	register(structs.ACLTokenBootstrapRequestType, applyACLTokenBootstrap)
	register(structs.NamespaceUpsertRequestType, applyNamespaceUpsert)
	register(structs.NamespaceDeleteRequestType, applyNamespaceDelete)

	registerRecord(structs.ACLPolicySnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.ACLPolicies(nil, "") },
		(*state.StateRestore).ACLPolicyRestore)
	registerRecord(structs.ACLTokenSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.ACLTokens(nil, "") },
		(*state.StateRestore).ACLTokenRestore)
	registerRecord(structs.NamespaceSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.StoredNamespaces(nil) },
		(*state.StateRestore).NamespaceRestore)
}

func applyACLPolicyUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.ACLPolicyUpsertRequest) error {
	return st.UpsertACLPolicies(index, req.Policies)
}

func applyACLPolicyDelete(_ *FSM, st *state.StateStore, index uint64, req *structs.ACLPolicyDeleteRequest) error {
	return st.DeleteACLPolicies(index, req.Names)
}

func applyACLTokenUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.ACLTokenUpsertRequest) error {
	return st.UpsertACLTokens(index, req.Tokens)
}

func applyACLTokenDelete(_ *FSM, st *state.StateStore, index uint64, req *structs.ACLTokenDeleteRequest) error {
	return st.DeleteACLTokens(index, req.AccessorIDs)
}

// applyACLTokenBootstrap refuses an entry that carries the operator's
// bootstrap secret: the leader hashes it and drops it before the write, and
// an entry with it would keep a secret in every server's log.
func applyACLTokenBootstrap(_ *FSM, st *state.StateStore, index uint64, req *structs.ACLTokenBootstrapRequest) error {
	if req.BootstrapSecret != "" {
		return structs.ErrInvalid("ACL bootstrap: a secret never enters the log, only its hash")
	}
	return st.BootstrapACLToken(index, req.ResetIndex, req.Token)
}

func applyNamespaceUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.NamespaceUpsertRequest) error {
	return st.UpsertNamespaces(index, req.Namespaces)
}

func applyNamespaceDelete(_ *FSM, st *state.StateStore, index uint64, req *structs.NamespaceDeleteRequest) error {
	return st.DeleteNamespaces(index, req.Namespaces)
}
