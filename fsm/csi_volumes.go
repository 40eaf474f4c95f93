package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.CSIVolumeRegisterRequestType, applyCSIVolumeRegister)
	register(structs.CSIVolumeDeregisterRequestType, applyCSIVolumeDeregister)
	register(structs.CSIVolumeClaimRequestType, applyCSIVolumeClaim)
	registerBatcher(structs.CSIVolumeRegisterRequestType, batchRegister)
	registerBatcher(structs.CSIVolumeClaimRequestType, batchClaim)

	registerRecord(structs.CSIVolumeSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) {
			return snap.CSIVolumesByNamespace(nil, state.AllNamespaces, "")
		},
		(*state.StateRestore).CSIVolumeRestore)
	// Plugins are derived from node fingerprints, but they are persisted as
	// they are rather than recomputed on restore, so a restore cannot derive
	// anything differently from the state that was snapshotted.
	registerRecord(structs.CSIPluginSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.CSIPlugins(nil) },
		(*state.StateRestore).CSIPluginRestore)
}

// applyCSIVolumeRegister stamps the leader's time on the volumes: the store
// keeps CreateTime of a volume that already exists, so stamping both is
// right for new and updated volumes alike.
func applyCSIVolumeRegister(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIVolumeRegisterRequest) error {
	if err := prepareRegister(req); err != nil {
		return err
	}
	return st.UpsertCSIVolume(index, req.Volumes)
}

func prepareRegister(req *structs.CSIVolumeRegisterRequest) error {
	for _, v := range req.Volumes {
		if v == nil {
			return structs.ErrInvalid("volume register: empty volume")
		}
		if v.Namespace == "" {
			v.Namespace = req.RequestNamespace()
		}
		v.CreateTime, v.ModifyTime = req.Timestamp, req.Timestamp
	}
	return nil
}

// batchRegister is a register entry's write in a batch (see applyRun).
func batchRegister(body []byte, index uint64) ([]string, func(*state.Batch) error, bool) {
	req := new(structs.CSIVolumeRegisterRequest)
	if structs.Decode(body, req) != nil || prepareRegister(req) != nil {
		return nil, nil, false
	}
	keys := make([]string, len(req.Volumes))
	for i, v := range req.Volumes {
		keys[i] = volumeKey(v.Namespace, v.ID)
	}
	return keys, func(b *state.Batch) error { return b.UpsertCSIVolume(index, req.Volumes) }, true
}

// batchClaim is a claim entry's write in a batch (see applyRun).
func batchClaim(body []byte, index uint64) ([]string, func(*state.Batch) error, bool) {
	req := new(structs.CSIVolumeClaimRequest)
	if structs.Decode(body, req) != nil {
		return nil, nil, false
	}
	ns := req.RequestNamespace()
	return []string{volumeKey(ns, req.VolumeID)}, func(b *state.Batch) error {
		return b.CSIVolumeClaim(index, req.Timestamp, ns, req.VolumeID, req.Claim)
	}, true
}

func volumeKey(namespace, id string) string { return namespace + "\x00" + id }

func applyCSIVolumeDeregister(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIVolumeDeregisterRequest) error {
	return st.CSIVolumeDeregister(index, req.RequestNamespace(), req.VolumeIDs, req.Force)
}

func applyCSIVolumeClaim(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIVolumeClaimRequest) error {
	return st.CSIVolumeClaim(index, req.Timestamp, req.RequestNamespace(), req.VolumeID, req.Claim)
}
