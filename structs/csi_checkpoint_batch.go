package structs

// MaxCheckpointBatch bounds the release checkpoints one Raft entry
// carries: a thousand claims freed at once make a few entries of this
// size, not one of megabytes.
const MaxCheckpointBatch = 256

// CSIVolumeCheckpoint is one release checkpoint of a batch: the claim of an
// allocation on a volume, in the release state it reached.
type CSIVolumeCheckpoint struct {
	Namespace string
	VolumeID  string
	Claim     *CSIVolumeClaim
}

// CSIVolumeCheckpointBatchRequest carries the release checkpoints of many
// claims, on one volume or many, in one Raft entry. The FSM applies each
// item with every rule of a single checkpoint (CSIVolumeClaimRequest in a
// release state), in order, each seeing the items before it; an item that
// is refused changes nothing and does not refuse the others. The entry's
// response is one error (nil when applied) per item, in order. The leader
// writes it; no endpoint takes it from a caller.
type CSIVolumeCheckpointBatchRequest struct {
	Checkpoints []CSIVolumeCheckpoint
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// Validate checks the shape of a batch: its size and that every item names
// a volume and carries a release (not a new claim). The rules of each
// checkpoint against the volume are the state store's.
func (r *CSIVolumeCheckpointBatchRequest) Validate() error {
	if len(r.Checkpoints) == 0 {
		return ErrInvalid("checkpoint batch: no checkpoints")
	}
	if len(r.Checkpoints) > MaxCheckpointBatch {
		return ErrInvalid("checkpoint batch: %d checkpoints, at most %d", len(r.Checkpoints), MaxCheckpointBatch)
	}
	return nil
}

// Check is the rule of one item that needs no state: a volume, a claim,
// and a release state (a new claim is never batched: it is the client's
// write, checked against its allocation).
func (c *CSIVolumeCheckpoint) Check() error {
	switch {
	case c.VolumeID == "":
		return ErrInvalid("checkpoint batch: a checkpoint names no volume")
	case c.Claim == nil:
		return ErrInvalid("volume %q: checkpoint batch: missing claim", c.VolumeID)
	case c.Claim.State == CSIVolumeClaimStateTaken:
		return ErrInvalid("volume %q: allocation %q: a checkpoint batch carries releases, not new claims (%s)",
			c.VolumeID, c.Claim.AllocationID, c.Claim.State)
	}
	return nil
}
