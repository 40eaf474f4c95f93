package fsm

import (
	"slices"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.CSIVolumeRegisterRequestType, applyCSIVolumeRegister)
	register(structs.CSIVolumeDeregisterRequestType, applyCSIVolumeDeregister)
	register(structs.CSIVolumeClaimRequestType, applyCSIVolumeClaim)

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

// applyRegisterRun applies the volume register entries at the start of
// logs in one state transaction (state.StateStore.UpsertCSIVolumeBatch),
// writes its responses, and returns how many entries it took: 0 when logs
// does not start with one. Under concurrent writers such runs are most of
// the log, and one transaction per run instead of per entry shares the
// index path copies, the commit and the watcher wake-up among them. The run
// ends before any other entry, one that does not decode or is refused
// before the store (Apply then panics or refuses it as it always does), and
// one that writes a volume an earlier entry of the run wrote.
func (f *FSM) applyRegisterRun(logs []*raft.Log, resps []any) int {
	var writes []state.CSIVolumeUpsert
	written := map[string]bool{}
run:
	for _, l := range logs {
		if l.Type != raft.LogCommand || len(l.Data) == 0 ||
			structs.MessageType(l.Data[0]) != structs.CSIVolumeRegisterRequestType {
			break
		}
		req := new(structs.CSIVolumeRegisterRequest)
		if structs.Decode(l.Data[1:], req) != nil || prepareRegister(req) != nil {
			break
		}
		keys := make([]string, 0, len(req.Volumes))
		for _, v := range req.Volumes {
			k := v.Namespace + "\x00" + v.ID
			if written[k] || slices.Contains(keys, k) {
				break run
			}
			keys = append(keys, k)
		}
		for _, k := range keys {
			written[k] = true
		}
		writes = append(writes, state.CSIVolumeUpsert{Index: l.Index, Volumes: req.Volumes})
	}
	if len(writes) == 0 {
		return 0
	}
	err := f.State().UpsertCSIVolumeBatch(writes)
	switch {
	case err == nil:
		clear(resps[:len(writes)])
	case len(writes) == 1:
		f.logger.Debug("apply refused", "type", structs.CSIVolumeRegisterRequestType, "index", logs[0].Index, "error", err)
		resps[0] = err
	default:
		// Some entry was refused and the batch left the store as it was:
		// each entry is applied alone, for its own result.
		for i := range writes {
			resps[i] = f.Apply(logs[i])
		}
	}
	return len(writes)
}

func applyCSIVolumeDeregister(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIVolumeDeregisterRequest) error {
	return st.CSIVolumeDeregister(index, req.RequestNamespace(), req.VolumeIDs, req.Force)
}

func applyCSIVolumeClaim(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIVolumeClaimRequest) error {
	return st.CSIVolumeClaim(index, req.Timestamp, req.RequestNamespace(), req.VolumeID, req.Claim)
}
