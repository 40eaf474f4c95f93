package fsm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// A snapshot is a stream of records, each one structs.SnapshotType byte
// followed by one msgpack object. Every record type has a persister, which
// writes all records of its type from a state snapshot, and a restorer, which
// reads one record's object into a state restore. Both are registered by the
// domain files; a test checks every snapshot type has both.

// persister writes every record of one type.
type persister func(snap *state.StateSnapshot, w *recordWriter) error

// restorer decodes one record's object and restores it.
type restorer func(dec *codec.Decoder, r *state.StateRestore) error

var (
	persisters = map[structs.SnapshotType]persister{}
	restorers  = map[structs.SnapshotType]restorer{}
)

// registerRecord registers how records of type t, holding a T, are persisted
// (by listing them from a snapshot) and restored.
func registerRecord[T any](t structs.SnapshotType,
	list func(snap *state.StateSnapshot) (memdb.ResultIterator, error),
	restore func(r *state.StateRestore, obj *T) error,
) {
	persisters[t] = func(snap *state.StateSnapshot, w *recordWriter) error {
		iter, err := list(snap)
		if err != nil {
			return err
		}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			if err := w.write(t, raw); err != nil {
				return err
			}
		}
		return nil
	}
	registerRestorer(t, restore)
}

// registerRestorer registers how records of type t, holding a T, are
// restored, alone for a type this build no longer writes
// (structs.RestoreOnlySnapshotTypes).
func registerRestorer[T any](t structs.SnapshotType, restore func(r *state.StateRestore, obj *T) error) {
	if _, dup := restorers[t]; dup {
		panic(fmt.Sprintf("fsm: two registrations of snapshot record %s", t))
	}
	restorers[t] = func(dec *codec.Decoder, r *state.StateRestore) error {
		obj := new(T)
		if err := dec.Decode(obj); err != nil {
			return fmt.Errorf("decoding: %w", err)
		}
		return restore(r, obj)
	}
}

func init() {
	registerRecord(structs.IndexSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.Indexes() },
		(*state.StateRestore).IndexRestore)
}

// recordWriter writes records on a snapshot sink.
type recordWriter struct {
	w   io.Writer
	enc *codec.Encoder
}

func (rw *recordWriter) write(t structs.SnapshotType, obj any) error {
	if _, err := rw.w.Write([]byte{byte(t)}); err != nil {
		return err
	}
	// The encoder flushes at the end of each Encode, so the next type byte
	// lands after this object.
	return rw.enc.Encode(obj)
}

// snapshot is a point-in-time view of the state waiting to be persisted.
type snapshot struct {
	snap   *state.StateSnapshot
	logger hclog.Logger
}

// Snapshot captures the state for raft; Persist may run concurrently with
// later applies, which the state snapshot does not see.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	snap, err := f.State().Snapshot()
	if err != nil {
		return nil, err
	}
	return &snapshot{snap: snap, logger: f.logger}, nil
}

// Persist writes every record type, in type order, on the sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := &recordWriter{w: sink, enc: codec.NewEncoder(sink, structs.MsgpackHandle)}
	for _, t := range slices.Sorted(maps.Keys(persisters)) {
		if err := persisters[t](s.snap, w); err != nil {
			s.logger.Error("snapshot persist failed", "record", t, "error", err)
			_ = sink.Cancel()
			return fmt.Errorf("fsm: persisting %s records: %w", t, err)
		}
	}
	return sink.Close()
}

// Release is a no-op: the state snapshot holds no resources but memory.
func (s *snapshot) Release() {}

// Restore replaces the state with a snapshot's. The records go into a fresh
// store, which replaces the current one only once all of them are in; the
// old store is then abandoned so that blocked readers wake and read the new
// one.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()

	fresh, err := state.NewStateStore()
	if err != nil {
		return err
	}
	restore, err := fresh.Restore()
	if err != nil {
		return err
	}
	defer restore.Abort()

	// The type bytes and the decoder read through one buffered reader, so
	// that neither reads ahead of the other.
	br := bufio.NewReader(rc)
	dec := codec.NewDecoder(br, structs.MsgpackHandle)
	for n := 0; ; n++ {
		b, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("fsm: reading snapshot record %d: %w", n, err)
		}
		t := structs.SnapshotType(b)
		restoreRecord, ok := restorers[t]
		if !ok {
			return fmt.Errorf("fsm: snapshot record %d has unknown type %s", n, t)
		}
		if err := restoreRecord(dec, restore); err != nil {
			return fmt.Errorf("fsm: restoring snapshot record %d (%s): %w", n, t, err)
		}
	}
	if err := restore.Commit(); err != nil {
		return err
	}

	f.mu.Lock()
	old := f.state
	f.state = fresh
	f.mu.Unlock()
	old.Abandon()
	return nil
}
