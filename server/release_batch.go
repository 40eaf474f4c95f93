package server

import (
	"sync"
	"time"

	"github.com/volplane/volplane/structs"
)

// checkpointBatcher writes release checkpoints through Raft, many claims
// to an entry: the release workers each wait for their own checkpoint, and
// those that arrive while an entry is being committed share the next one
// (a group commit). A thousand claims freed at once then cost tens of Raft
// entries rather than thousands, and each worker still hears its own
// checkpoint's answer. A checkpoint that is alone is written as the single
// CSIVolumeClaim entry it always was.
//
// No goroutine of its own: the first caller to find no write in flight
// writes the pending checkpoints, batch after batch, until none is left;
// the others wait for their answer.
type checkpointBatcher struct {
	// apply writes one entry and returns the response of its FSM apply.
	apply func(t structs.MessageType, msg any) (any, uint64, error)
	// max bounds the checkpoints of one entry.
	max int

	mu       sync.Mutex
	pending  []*pendingCheckpoint
	flushing bool
}

// pendingCheckpoint is one caller's checkpoint and its answer.
type pendingCheckpoint struct {
	item structs.CSIVolumeCheckpoint
	now  time.Time
	err  error
	done chan struct{}
}

func newCheckpointBatcher(apply func(structs.MessageType, any) (any, uint64, error), max int) *checkpointBatcher {
	return &checkpointBatcher{apply: apply, max: max}
}

// Checkpoint writes a claim's release state at time now (the leader's) and
// returns its own outcome: nil, the rule that refused it, or the error of
// the write that carried it.
func (b *checkpointBatcher) Checkpoint(namespace, volumeID string, claim *structs.CSIVolumeClaim, now time.Time) error {
	p := &pendingCheckpoint{
		// The claim is copied: the caller goes on changing its own.
		item: structs.CSIVolumeCheckpoint{Namespace: namespace, VolumeID: volumeID, Claim: claim.Copy()},
		now:  now, done: make(chan struct{}),
	}
	b.mu.Lock()
	b.pending = append(b.pending, p)
	if b.flushing {
		b.mu.Unlock()
		<-p.done
		return p.err
	}
	b.flushing = true
	for len(b.pending) > 0 {
		n := min(len(b.pending), b.max)
		batch := b.pending[:n:n]
		b.pending = b.pending[n:]
		b.mu.Unlock()
		b.write(batch)
		b.mu.Lock()
	}
	b.pending = nil
	b.flushing = false
	b.mu.Unlock()
	return p.err
}

// write commits one batch and hands each caller its answer.
func (b *checkpointBatcher) write(batch []*pendingCheckpoint) {
	defer func() {
		for _, p := range batch {
			close(p.done)
		}
	}()
	if len(batch) == 1 {
		p := batch[0]
		_, _, p.err = b.apply(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
			VolumeID: p.item.VolumeID, Claim: p.item.Claim, Timestamp: p.now.UnixNano(),
			WriteRequest: structs.WriteRequest{Namespace: p.item.Namespace},
		})
		return
	}
	req := &structs.CSIVolumeCheckpointBatchRequest{Checkpoints: make([]structs.CSIVolumeCheckpoint, len(batch))}
	var latest time.Time
	for i, p := range batch {
		req.Checkpoints[i] = p.item
		if p.now.After(latest) {
			latest = p.now
		}
	}
	req.Timestamp = latest.UnixNano()
	resp, _, err := b.apply(structs.CSIVolumeCheckpointBatchRequestType, req)
	if err != nil {
		for _, p := range batch {
			p.err = err
		}
		return
	}
	refused, ok := resp.([]error)
	if !ok || len(refused) != len(batch) {
		err := structs.NewError(structs.ErrCodeInternal, "checkpoint batch: the FSM answered %T for %d checkpoints", resp, len(batch))
		for _, p := range batch {
			p.err = err
		}
		return
	}
	for i, p := range batch {
		p.err = refused[i]
	}
}

// maxCheckpointBatch is the most checkpoints the leader puts in one entry.
const maxCheckpointBatch = structs.MaxCheckpointBatch
