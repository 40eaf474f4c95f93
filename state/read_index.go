package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// LatestIndexWatch returns the highest index over all tables, as
// LatestIndex, and adds the index table to ws, so a caller waiting for
// the store to reach an index wakes when any table's index moves.
func (s *StateStore) LatestIndexWatch(ws memdb.WatchSet) (uint64, error) {
	iter, err := s.db.Txn(false).Get(TableIndex, indexID)
	if err != nil {
		return 0, fmt.Errorf("state: listing indexes: %w", err)
	}
	watch(ws, iter.WatchCh())
	var latest uint64
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		latest = max(latest, raw.(*IndexEntry).Value)
	}
	return latest, nil
}
