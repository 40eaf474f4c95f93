package fsm

import (
	"fmt"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	t := structs.CSIVolumeCheckpointBatchRequestType
	if _, dup := appliers[t]; dup {
		panic(fmt.Sprintf("fsm: two appliers for message type %s", t))
	}
	appliers[t] = applyCSIVolumeCheckpointBatch
}

// applyCSIVolumeCheckpointBatch applies a batch of release checkpoints. Its
// response is not a single error but one per checkpoint ([]error, nil where
// applied): a refused checkpoint does not refuse the others, which are
// other claims' releases. A batch whose shape is wrong (empty, too large)
// is refused whole with an error, as is one the store fails to write.
func applyCSIVolumeCheckpointBatch(f *FSM, st *state.StateStore, index uint64, body []byte) any {
	req := new(structs.CSIVolumeCheckpointBatchRequest)
	if err := structs.Decode(body, req); err != nil {
		panic(fmt.Errorf("fsm: index %d: cannot decode %s request: %w", index, structs.CSIVolumeCheckpointBatchRequestType, err))
	}
	if err := req.Validate(); err != nil {
		f.logger.Debug("apply refused", "type", structs.CSIVolumeCheckpointBatchRequestType, "index", index, "error", err)
		return err
	}
	refused, err := st.CSIVolumeCheckpoints(index, req.Timestamp, req.RequestNamespace(), req.Checkpoints)
	if err != nil {
		f.logger.Debug("apply refused", "type", structs.CSIVolumeCheckpointBatchRequestType, "index", index, "error", err)
		return err
	}
	return refused
}
