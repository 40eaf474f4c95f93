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
	// bumps is, by table, the index of the last write of the batch that
	// changed a row of it. The commit moves each table's index row there,
	// as applying the entries one at a time would: a write that changes
	// nothing (a repeated claim, an unchanged volume) must not move it, or
	// servers whose Raft hands them different batches would disagree on a
	// table's index, and so on every blocking query's answer.
	bumps map[string]uint64
}

// UpsertCSIVolume is StateStore.UpsertCSIVolume within the batch, for
// volumes the caller gives away (the FSM's, decoded from an entry): a new
// one is stored as it is, and the caller must not touch vols again.
func (b *Batch) UpsertCSIVolume(index uint64, vols []*structs.CSIVolume) error {
	for _, v := range vols {
		changed, err := upsertCSIVolumeTxn(b.txn, index, v, true)
		if err != nil {
			return err
		}
		b.changedVolume(index, changed)
	}
	return nil
}

// CSIVolumeClaim is StateStore.CSIVolumeClaim within the batch.
func (b *Batch) CSIVolumeClaim(index uint64, now int64, namespace, id string, claim *structs.CSIVolumeClaim) error {
	changed, err := claimCSIVolumeTxn(b.txn, index, now, namespace, id, claim)
	if err != nil {
		return err
	}
	b.changedVolume(index, changed)
	return nil
}

// changedVolume notes the volumes table as changed at index if the write at
// index changed a volume (stamped the row with its index).
func (b *Batch) changedVolume(index uint64, changed bool) {
	if changed {
		b.bumps[TableCSIVolumes] = max(b.bumps[TableCSIVolumes], index)
	}
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
	b := &Batch{txn: txn, bumps: map[string]uint64{}}
	if err := f(b); err != nil {
		return err
	}
	return commitTables(txn, func(table string) uint64 {
		if index, ok := b.bumps[table]; ok {
			return index
		}
		// A table a write changed without saying so: the batch's last
		// index is the safe answer (never lower than the truth).
		return last
	})
}
