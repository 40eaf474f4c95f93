package state

import (
	"errors"

	"github.com/volplane/volplane/structs"
)

// CSIVolumeCheckpoints writes a batch of release checkpoints, in order, in
// one transaction at index, at time now (stamped by the leader). Each is
// applied with every rule of a single checkpoint (CSIVolumeClaim with a
// release state): only forward, only for a claim the allocation holds on
// its node; each sees the ones before it, on the same volume or another.
// A refused checkpoint changes nothing and does not refuse the others: its
// error is at its place in the returned slice, nil where one was applied.
// The outcome depends only on the state and the batch, so every server
// refuses the same ones. The second return is an error of the store
// itself, and then nothing is written.
func (s *StateStore) CSIVolumeCheckpoints(index uint64, now int64, namespace string, items []structs.CSIVolumeCheckpoint) ([]error, error) {
	txn := s.writeTxn()
	defer txn.Abort()
	refused := make([]error, len(items))
	for i := range items {
		it := &items[i]
		if err := it.Check(); err != nil {
			refused[i] = err
			continue
		}
		ns := it.Namespace
		if ns == "" {
			ns = namespace
		}
		_, err := claimCSIVolumeTxn(txn, index, now, ns, it.VolumeID, it.Claim)
		var rpcErr *structs.Error
		switch {
		case err == nil:
		case errors.As(err, &rpcErr):
			// A rule refused it, before anything was written.
			refused[i] = err
		default:
			// The store failed: the transaction is not to be trusted.
			return nil, err
		}
	}
	return refused, commit(txn, index)
}
