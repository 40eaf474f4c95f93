package server

import (
	"sync"
	"time"

	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/structs"
)

// checkpointBatcher writes release checkpoints through Raft, many claims
// to an entry (a group commit, see groupCommit): the release workers each
// wait for their own checkpoint, and those that arrive while an entry is
// being committed share the next one. A thousand claims freed at once then
// cost tens of Raft entries rather than thousands, and each worker still
// hears its own checkpoint's answer. A checkpoint that is alone is written
// as the single CSIVolumeClaim entry it always was.
type checkpointBatcher struct {
	// apply writes one entry and returns the response of its FSM apply.
	apply func(t structs.MessageType, msg any) (any, uint64, error)
	// applied says whether every server applies entries of a type (see
	// Server.clusterMaxMessageType); until they do, each checkpoint is an
	// entry of its own.
	applied func(t structs.MessageType) bool
	groupCommit[pendingCheckpoint]
}

// pendingCheckpoint is one caller's checkpoint and the leader's time.
type pendingCheckpoint struct {
	item structs.CSIVolumeCheckpoint
	now  time.Time
}

func newCheckpointBatcher(apply func(structs.MessageType, any) (any, uint64, error), applied func(structs.MessageType) bool, max int) *checkpointBatcher {
	b := &checkpointBatcher{apply: apply, applied: applied}
	b.groupCommit = groupCommit[pendingCheckpoint]{write: b.write, max: max, observe: metrics.GroupCommit("release")}
	return b
}

// Checkpoint writes a claim's release state at time now (the leader's) and
// returns its own outcome: nil, the rule that refused it, or the error of
// the write that carried it.
func (b *checkpointBatcher) Checkpoint(namespace, volumeID string, claim *structs.CSIVolumeClaim, now time.Time) error {
	return b.commit(pendingCheckpoint{
		// The claim is copied: the caller goes on changing its own.
		item: structs.CSIVolumeCheckpoint{Namespace: namespace, VolumeID: volumeID, Claim: claim.Copy()},
		now:  now,
	})
}

// write commits one batch and returns each checkpoint's answer.
func (b *checkpointBatcher) write(batch []pendingCheckpoint) []error {
	if len(batch) == 1 || !b.applied(structs.CSIVolumeCheckpointBatchRequestType) {
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for i, p := range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, errs[i] = b.apply(structs.CSIVolumeClaimRequestType, &structs.CSIVolumeClaimRequest{
					VolumeID: p.item.VolumeID, Claim: p.item.Claim, Timestamp: p.now.UnixNano(),
					WriteRequest: structs.WriteRequest{Namespace: p.item.Namespace},
				})
			}()
		}
		wg.Wait()
		return errs
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
	return batchAnswers(resp, err, len(batch), "checkpoint batch")
}

// batchAnswers turns the outcome of a batch entry into each item's answer:
// the write's error for all when it failed, else the FSM's one error per
// item ([]error; nil, as a batch applied in a run of entries answers, when
// every item was applied).
func batchAnswers(resp any, err error, n int, what string) []error {
	out := make([]error, n)
	if err == nil && resp != nil {
		if refused, ok := resp.([]error); ok && len(refused) == n {
			return refused
		}
		err = structs.NewError(structs.ErrCodeInternal, "%s: the FSM answered %T for %d items", what, resp, n)
	}
	if err != nil {
		for i := range out {
			out[i] = err
		}
	}
	return out
}

// maxCheckpointBatch is the most checkpoints the leader puts in one entry.
const maxCheckpointBatch = structs.MaxCheckpointBatch
