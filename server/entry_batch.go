package server

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/structs"
)

// entryLinger bounds how long a register or claim entry waits for the
// callers of the entry before it to come back (see groupCommit), from the
// end of that entry's write. Over HTTP with 16 writers on the 2-core test
// machine an entry's write takes 2-4 ms and a caller's round trip as
// long; in alternate runs of the http-nomad phase (wal), 3 ms gave 5.28x
// and 5.11x Nomad's register rate, 4 ms 5.25x and 4.85x, and 2 ms capped
// at the last write's time 4.72x and 4.33x (none: 4.01-4.20x).
const entryLinger = 3 * time.Millisecond

// entryBatcher writes the requests of one message type through Raft, many
// to an entry (a group commit, see groupCommit): concurrent writes share
// entries of the batch type that carries them, and each caller still gets
// its own answer, all or nothing for its request, and the index of the
// entry that carried it. A request that is alone is written as the single
// entry it always was. Volume registers and claims go through one each:
// they are the writes many callers make at once.
type entryBatcher struct {
	s *Server
	// t is the type of the requests; batch the type of the entries that
	// carry several.
	t, batch structs.MessageType
	groupCommit[*pendingEntry]
}

// pendingEntry is one caller's request, encoded as its own entry would be,
// and the index the write answered.
type pendingEntry struct {
	entry []byte
	index uint64
}

func newEntryBatcher(s *Server, batch structs.MessageType) *entryBatcher {
	t, ok := structs.BatchedType(batch)
	if !ok {
		panic(fmt.Sprintf("server: %s is not a batch type", batch))
	}
	b := &entryBatcher{s: s, t: t, batch: batch}
	b.groupCommit = groupCommit[*pendingEntry]{
		write:     b.write,
		max:       structs.MaxEntryBatch,
		weight:    func(p *pendingEntry) int { return len(p.entry) },
		maxWeight: structs.MaxEntryBatchBytes,
		linger:    entryLinger,
		observe:   metrics.GroupCommit(entryKind(batch)),
	}
	return b
}

// entryKind names a batch type in the group-commit metrics.
func entryKind(batch structs.MessageType) string {
	switch batch {
	case structs.CSIVolumeRegisterBatchRequestType:
		return "register"
	case structs.CSIVolumeClaimBatchRequestType:
		return "claim"
	}
	return batch.String()
}

// Apply commits req, which the endpoint has checked and stamped, and
// returns the index of the entry that carried it.
func (b *entryBatcher) Apply(req any) (uint64, error) {
	entry, err := encodeEntry(b.t, req)
	if err != nil {
		return 0, err
	}
	p := &pendingEntry{entry: entry}
	if err := b.commit(p); err != nil {
		return 0, err
	}
	return p.index, nil
}

// write commits one batch and returns each request's answer. Until every
// server announces that it applies the batch type (an older build's FSM
// would stop on it), each request goes out as its own entry, all at once,
// and Raft batches them as it can.
func (b *entryBatcher) write(batch []*pendingEntry) []error {
	if len(batch) == 1 || !b.s.entryTypeApplied(b.batch) {
		futures := make([]raft.ApplyFuture, len(batch))
		for i, p := range batch {
			futures[i] = b.s.applyEntry(p.entry)
		}
		errs := make([]error, len(batch))
		for i, f := range futures {
			_, batch[i].index, errs[i] = b.s.applyResult(f)
		}
		return errs
	}
	req := &structs.EntryBatchRequest{Requests: make([][]byte, len(batch))}
	for i, p := range batch {
		req.Requests[i] = p.entry[1:] // the body, without the type byte
	}
	resp, index, err := b.s.raftApply(b.batch, req)
	for _, p := range batch {
		p.index = index
	}
	return batchAnswers(resp, err, len(batch), b.batch.String())
}
