package fsm

import (
	"fmt"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Every batch type applies its requests with the applier and the batcher
// of the type it carries, looked up when an entry is applied (the domain
// files register those in their own init functions).
func init() {
	for _, t := range structs.MessageTypes() {
		inner, ok := structs.BatchedType(t)
		if !ok {
			continue
		}
		if _, dup := appliers[t]; dup {
			panic(fmt.Sprintf("fsm: two appliers for message type %s", t))
		}
		appliers[t] = func(f *FSM, st *state.StateStore, index uint64, body []byte) any {
			return applyEntryBatch(f, st, t, inner, index, body)
		}
		registerBatcher(t, func(body []byte, index uint64) ([]string, func(*state.Batch) error, bool) {
			return batchEntryBatch(t, inner, body, index)
		})
	}
}

// applyEntryBatch applies a batch entry of type t: the requests of many
// callers, each of type inner. Its response is nil when every request was
// applied, else one error per request ([]error, nil where applied): a
// refused request changes nothing and does not refuse the others. A batch
// whose shape is wrong (empty, too large) is refused whole.
//
// The requests share one transaction when the batchers of their type take
// them all, no two write the same row and none is refused; otherwise each
// is applied as its own entry would be, in a transaction of its own at the
// same index, so that each is all or nothing and every write keeps its
// events.
func applyEntryBatch(f *FSM, st *state.StateStore, t, inner structs.MessageType, index uint64, body []byte) any {
	reqs, err := decodeEntryBatch(t, body, index)
	if err != nil {
		f.logger.Debug("apply refused", "type", t, "index", index, "error", err)
		return err
	}
	if _, write, ok := sharedWrite(inner, reqs, index); ok {
		if st.WriteBatch(index, write) == nil {
			return nil
		}
	}
	out := make([]error, len(reqs))
	refused := false
	for i, raw := range reqs {
		if resp := appliers[inner](f, st, index, raw); resp != nil {
			err, ok := resp.(error)
			if !ok {
				err = structs.NewError(structs.ErrCodeInternal, "%s: request %d answered %T", t, i, resp)
			}
			out[i], refused = err, true
		}
	}
	if !refused {
		return nil
	}
	return out
}

// batchEntryBatch is a batch entry's write in a run of entries (see
// applyRun): all its requests, when they may share a transaction.
func batchEntryBatch(t, inner structs.MessageType, body []byte, index uint64) ([]string, func(*state.Batch) error, bool) {
	reqs, err := decodeEntryBatch(t, body, index)
	if err != nil {
		return nil, nil, false
	}
	return sharedWrite(inner, reqs, index)
}

// sharedWrite is the write of requests of type inner in one transaction,
// and the rows it writes; false when the type's batcher does not take one
// of them or two write the same row.
func sharedWrite(inner structs.MessageType, reqs [][]byte, index uint64) ([]string, func(*state.Batch) error, bool) {
	var keys []string
	var writes []func(*state.Batch) error
	seen := map[string]bool{}
	batcher := batchers[inner]
	if batcher == nil {
		return nil, nil, false
	}
	for _, raw := range reqs {
		ks, write, ok := batcher(raw, index)
		if !ok {
			return nil, nil, false
		}
		for _, k := range ks {
			if seen[k] {
				return nil, nil, false
			}
		}
		for _, k := range ks {
			seen[k] = true
		}
		keys = append(keys, ks...)
		writes = append(writes, write)
	}
	return keys, func(b *state.Batch) error {
		for _, w := range writes {
			if err := w(b); err != nil {
				return err
			}
		}
		return nil
	}, true
}

// decodeEntryBatch decodes a batch entry's body; it panics on one that does
// not decode, as every applier does, and refuses a batch of the wrong
// shape. Each request is decoded by its type's applier or batcher.
func decodeEntryBatch(t structs.MessageType, body []byte, index uint64) ([][]byte, error) {
	batch := new(structs.EntryBatchRequest)
	if err := structs.Decode(body, batch); err != nil {
		panic(fmt.Errorf("fsm: index %d: cannot decode %s request: %w", index, t, err))
	}
	if err := batch.Validate(); err != nil {
		return nil, err
	}
	return batch.Requests, nil
}
