package fsm

import (
	"fmt"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	t := structs.CSIVolumeRegisterBatchRequestType
	if _, dup := appliers[t]; dup {
		panic(fmt.Sprintf("fsm: two appliers for message type %s", t))
	}
	appliers[t] = applyCSIVolumeRegisterBatch
	registerBatcher(t, batchRegisterBatch)
}

// applyCSIVolumeRegisterBatch applies the register requests of many
// callers. Its response is nil when every request was applied, else one
// error per request ([]error, nil where applied): a refused request
// changes nothing and does not refuse the others. A batch whose shape is
// wrong (empty, too large) is refused whole.
//
// The requests share one transaction when no two write the same volume and
// none is refused; otherwise each has a transaction of its own, at the same
// index, so that each is all or nothing and every write keeps its events.
func applyCSIVolumeRegisterBatch(f *FSM, st *state.StateStore, index uint64, body []byte) any {
	reqs, err := decodeRegisterBatch(body, index)
	if err != nil {
		f.logger.Debug("apply refused", "type", structs.CSIVolumeRegisterBatchRequestType, "index", index, "error", err)
		return err
	}
	out := make([]error, len(reqs))
	for i, req := range reqs {
		out[i] = prepareRegister(req)
	}
	if _, shared := registerBatchKeys(reqs, out); shared {
		err := st.WriteBatch(index, func(b *state.Batch) error {
			for i, req := range reqs {
				if out[i] == nil {
					if err := b.UpsertCSIVolume(index, req.Volumes); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err == nil {
			return answers(out)
		}
		// The shared write stored the decoded volumes it got to as they
		// are and was then dropped: each request is decoded afresh.
		if reqs, err = decodeRegisterBatch(body, index); err != nil {
			return err
		}
		for i, req := range reqs {
			if out[i] == nil {
				out[i] = prepareRegister(req)
			}
		}
	}
	for i, req := range reqs {
		if out[i] == nil {
			out[i] = st.UpsertCSIVolume(index, req.Volumes)
		}
		if out[i] != nil {
			f.logger.Debug("apply refused", "type", structs.CSIVolumeRegisterBatchRequestType, "index", index, "request", i, "error", out[i])
		}
	}
	return answers(out)
}

// answers is a batch's response: nil when no item was refused, as the
// batch applied in a run of entries answers (see applyRun).
func answers(errs []error) any {
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}

// batchRegisterBatch is a register batch's write in a run of entries (see
// applyRun): all its requests, when none is refused beforehand and no two
// write the same volume.
func batchRegisterBatch(body []byte, index uint64) ([]string, func(*state.Batch) error, bool) {
	reqs, err := decodeRegisterBatch(body, index)
	if err != nil {
		return nil, nil, false
	}
	refused := make([]error, len(reqs))
	for i, req := range reqs {
		if refused[i] = prepareRegister(req); refused[i] != nil {
			return nil, nil, false
		}
	}
	keys, shared := registerBatchKeys(reqs, refused)
	if !shared {
		return nil, nil, false
	}
	return keys, func(b *state.Batch) error {
		for _, req := range reqs {
			if err := b.UpsertCSIVolume(index, req.Volumes); err != nil {
				return err
			}
		}
		return nil
	}, true
}

// decodeRegisterBatch decodes a batch and each of its requests; it panics
// on a body that does not decode, as every applier does, and refuses a
// batch of the wrong shape.
func decodeRegisterBatch(body []byte, index uint64) ([]*structs.CSIVolumeRegisterRequest, error) {
	batch := new(structs.CSIVolumeRegisterBatchRequest)
	if err := structs.Decode(body, batch); err != nil {
		panic(fmt.Errorf("fsm: index %d: cannot decode %s request: %w", index, structs.CSIVolumeRegisterBatchRequestType, err))
	}
	if err := batch.Validate(); err != nil {
		return nil, err
	}
	reqs := make([]*structs.CSIVolumeRegisterRequest, len(batch.Requests))
	for i, raw := range batch.Requests {
		reqs[i] = new(structs.CSIVolumeRegisterRequest)
		if err := structs.Decode(raw, reqs[i]); err != nil {
			panic(fmt.Errorf("fsm: index %d: cannot decode request %d of a %s: %w", index, i, structs.CSIVolumeRegisterBatchRequestType, err))
		}
	}
	return reqs, nil
}

// registerBatchKeys returns the volumes the requests not yet refused
// write, and whether they may share a transaction: no volume twice.
func registerBatchKeys(reqs []*structs.CSIVolumeRegisterRequest, refused []error) ([]string, bool) {
	var keys []string
	seen := map[string]bool{}
	for i, req := range reqs {
		if refused[i] != nil {
			continue
		}
		for _, v := range req.Volumes {
			k := volumeKey(v.Namespace, v.ID)
			if seen[k] {
				return nil, false
			}
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, true
}
