package server

import (
	"github.com/volplane/volplane/structs"
)

// registerBatcher writes volume registrations through Raft, many requests
// to an entry (a group commit, see groupCommit): concurrent registers
// share entries, each caller still gets its own answer, all or nothing for
// its request, and the index of the entry that carried it. A register that
// is alone is written as the single CSIVolumeRegister entry it always was.
type registerBatcher struct {
	s *Server
	groupCommit[*pendingRegister]
}

// pendingRegister is one caller's register request, encoded as its own
// entry would be, and the index the write answered.
type pendingRegister struct {
	entry []byte
	index uint64
}

func newRegisterBatcher(s *Server) *registerBatcher {
	b := &registerBatcher{s: s}
	b.groupCommit = groupCommit[*pendingRegister]{
		write: b.write,
		max:   structs.MaxRegisterBatch,
		weight: func(p *pendingRegister) int {
			return len(p.entry)
		},
		maxWeight: structs.MaxRegisterBatchBytes,
	}
	return b
}

// Register commits req, which the endpoint has checked and stamped, and
// returns the index of the entry that carried it.
func (b *registerBatcher) Register(req *structs.CSIVolumeRegisterRequest) (uint64, error) {
	entry, err := encodeEntry(structs.CSIVolumeRegisterRequestType, req)
	if err != nil {
		return 0, err
	}
	p := &pendingRegister{entry: entry}
	if err := b.commit(p); err != nil {
		return 0, err
	}
	return p.index, nil
}

// write commits one batch and returns each request's answer.
func (b *registerBatcher) write(batch []*pendingRegister) []error {
	if len(batch) == 1 {
		_, index, err := b.s.raftApplyEntry(batch[0].entry)
		batch[0].index = index
		return []error{err}
	}
	req := &structs.CSIVolumeRegisterBatchRequest{Requests: make([][]byte, len(batch))}
	for i, p := range batch {
		req.Requests[i] = p.entry[1:] // the body, without the type byte
	}
	resp, index, err := b.s.raftApply(structs.CSIVolumeRegisterBatchRequestType, req)
	for _, p := range batch {
		p.index = index
	}
	return batchAnswers(resp, err, len(batch), "register batch")
}
