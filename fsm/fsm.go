// Package fsm is volplane's raft.FSM: it applies committed log entries to the
// state store and persists and restores snapshots of it.
//
// Each log entry is one structs.MessageType byte and a msgpack request. The
// appliers are registered by message type in a registry, one file per
// domain; a test checks that every message type has one. The FSM is
// deterministic: everything that varies (times, IDs) is in the entry.
package fsm

import (
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// FSM applies Raft log entries to a state store.
type FSM struct {
	logger hclog.Logger

	// mu guards the state pointer, which Restore swaps while readers on
	// other goroutines call State.
	mu    sync.RWMutex
	state *state.StateStore
}

// New returns an FSM over an empty store.
func New(logger hclog.Logger) (*FSM, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	st, err := state.NewStateStore()
	if err != nil {
		return nil, err
	}
	return &FSM{logger: logger, state: st}, nil
}

// State returns the current store. A snapshot restore replaces it and
// abandons the old one (see state.StateStore.AbandonCh), so long-lived
// readers should call State again after the old store is abandoned.
func (f *FSM) State() *state.StateStore {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state
}

// applier applies the body of one log entry (without its type byte) at a
// Raft index, and returns the apply response: nil or an error.
type applier func(f *FSM, st *state.StateStore, index uint64, body []byte) any

// appliers is the registry of appliers by message type, filled by the init
// functions of the domain files.
var appliers = map[structs.MessageType]applier{}

// register adds the applier of message type t, whose body decodes into a T.
// A body that does not decode stops the FSM: skipping it would let this
// server's state diverge from the others'.
func register[T any](t structs.MessageType, apply func(f *FSM, st *state.StateStore, index uint64, req *T) error) {
	if _, dup := appliers[t]; dup {
		panic(fmt.Sprintf("fsm: two appliers for message type %s", t))
	}
	appliers[t] = func(f *FSM, st *state.StateStore, index uint64, body []byte) any {
		req := new(T)
		if err := structs.Decode(body, req); err != nil {
			panic(fmt.Errorf("fsm: index %d: cannot decode %s request: %w", index, t, err))
		}
		if err := apply(f, st, index, req); err != nil {
			f.logger.Debug("apply refused", "type", t, "index", index, "error", err)
			return err
		}
		return nil
	}
}

// Apply applies one committed log entry. The response is nil or the error
// the state store returned (a *structs.Error for a refused write); it
// panics on an entry it cannot apply safely: an unknown type without the
// ignore flag, or a body that does not decode.
func (f *FSM) Apply(log *raft.Log) any {
	if len(log.Data) == 0 {
		panic(fmt.Errorf("fsm: index %d: empty log entry", log.Index))
	}
	t := structs.MessageType(log.Data[0])
	ignorable := t&structs.IgnoreUnknownTypeFlag != 0
	t &^= structs.IgnoreUnknownTypeFlag

	apply, ok := appliers[t]
	if !ok {
		if ignorable {
			f.logger.Warn("ignoring unknown message type", "type", uint8(t), "index", log.Index)
			return nil
		}
		panic(fmt.Errorf("fsm: index %d: unknown message type %s", log.Index, t))
	}
	f.logger.Debug("apply", "type", t, "index", log.Index)
	return apply(f, f.State(), log.Index, log.Data[1:])
}

// ApplyBatch applies the entries Raft committed together (raft.BatchingFSM)
// and returns a response for each, as Apply would have. Runs of entries
// whose type has a batcher share one state transaction (applyRun); every
// other command entry is applied on its own. Configuration entries, which
// Raft hands a batching FSM too, change nothing here.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	resps := make([]any, len(logs))
	for i := 0; i < len(logs); {
		if n := f.applyRun(logs[i:], resps[i:]); n > 0 {
			i += n
			continue
		}
		if logs[i].Type == raft.LogCommand {
			resps[i] = f.Apply(logs[i])
		}
		i++
	}
	return resps
}

// batcher decodes the body of an entry at index into the keys of the rows
// it writes and its write within a batch; false when the entry cannot join
// one (it does not decode, or is refused before the store), and Apply then
// panics on it or refuses it as it always does.
type batcher func(body []byte, index uint64) (keys []string, write func(*state.Batch) error, ok bool)

// batchers are the message types whose entries may share a transaction:
// those that concurrent writers make the bulk of the log.
var batchers = map[structs.MessageType]batcher{}

func registerBatcher(t structs.MessageType, b batcher) {
	if _, dup := batchers[t]; dup {
		panic(fmt.Sprintf("fsm: two batchers for message type %s", t))
	}
	batchers[t] = b
}

// applyRun applies the batchable entries at the start of logs in one state
// transaction (state.StateStore.WriteBatch), writes their responses, and
// returns how many it took: 0 when logs does not start with one. One
// transaction per run instead of per entry shares the index path copies, the
// commit and the watcher wake-up among its entries. The run ends before any
// other entry, one its batcher cannot take, and one that writes a row an
// earlier entry of the run wrote. A refused write leaves the store as it
// was, and the run is then applied entry by entry, for each its own result
// (a batch entry's being one per request). An entry applied in a run
// answers nil, so a batcher's entry type must answer nil when applied
// alone too.
func (f *FSM) applyRun(logs []*raft.Log, resps []any) int {
	var writes []func(*state.Batch) error
	written := map[string]bool{}
run:
	for _, l := range logs {
		if l.Type != raft.LogCommand || len(l.Data) == 0 {
			break
		}
		b := batchers[structs.MessageType(l.Data[0])]
		if b == nil {
			break
		}
		keys, write, ok := b(l.Data[1:], l.Index)
		if !ok {
			break
		}
		for i, k := range keys {
			if written[k] || slices.Contains(keys[:i], k) {
				break run
			}
		}
		for _, k := range keys {
			written[k] = true
		}
		writes = append(writes, write)
	}
	if len(writes) == 0 {
		return 0
	}
	err := f.State().WriteBatch(logs[len(writes)-1].Index, func(b *state.Batch) error {
		for _, w := range writes {
			if err := w(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		clear(resps[:len(writes)])
		return len(writes)
	}
	for i := range writes {
		resps[i] = f.Apply(logs[i])
	}
	return len(writes)
}

var _ raft.BatchingFSM = (*FSM)(nil)
