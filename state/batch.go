package state

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// Batch is one write transaction shared by consecutive Raft entries that the
// FSM applies together. Each write through it is what the store method of
// the same name does, at its own entry's index, and sees the writes before
// it.
type Batch struct {
	txn *memdb.Txn
}

// UpsertCSIVolume is StateStore.UpsertCSIVolume within the batch.
func (b *Batch) UpsertCSIVolume(index uint64, vols []*structs.CSIVolume) error {
	for _, v := range vols {
		if err := upsertCSIVolumeTxn(b.txn, index, v); err != nil {
			return err
		}
	}
	return nil
}

// CSIVolumeClaim is StateStore.CSIVolumeClaim within the batch.
func (b *Batch) CSIVolumeClaim(index uint64, now int64, namespace, id string, claim *structs.CSIVolumeClaim) error {
	return claimCSIVolumeTxn(b.txn, index, now, namespace, id, claim)
}

// WriteBatch runs f over one write transaction and commits it at index
// last, the batch's last entry: one set of index rows, one wake-up of the
// watchers and one set of events for all its writes. It is all or nothing:
// when f returns an error nothing is applied, and the caller applies the
// entries one at a time to give each its own result. Two writes to the same
// row must not share a batch: the transaction's change set keeps only a
// row's last version, so the events of the earlier write would be lost.
func (s *StateStore) WriteBatch(last uint64, f func(*Batch) error) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := f(&Batch{txn: txn}); err != nil {
		return err
	}
	return commit(txn, last)
}
