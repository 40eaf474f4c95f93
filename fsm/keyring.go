package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.RootKeyUpsertRequestType, applyRootKeyUpsert)
	register(structs.CSIVolumeResealRequestType, applyCSIVolumeReseal)

	registerRecord(structs.RootKeySnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.RootKeys(nil) },
		(*state.StateRestore).RootKeyRestore)
}

func applyRootKeyUpsert(_ *FSM, st *state.StateStore, index uint64, req *structs.RootKeyUpsertRequest) error {
	return st.UpsertRootKey(index, req.Key, req.Activate)
}

func applyCSIVolumeReseal(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIVolumeResealRequest) error {
	return st.ResealCSIVolumes(index, req.Volumes)
}
