package state

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func allocsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableAllocs,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: idIndex(),
			// An allocation not placed yet has no node; it is simply not in
			// this index.
			indexNode: {
				Name:         indexNode,
				AllowMissing: true,
				Indexer:      &memdb.StringFieldIndex{Field: "NodeID"},
			},
			indexJob: {
				Name:         indexJob,
				AllowMissing: true,
				Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Namespace"},
					&memdb.StringFieldIndex{Field: "JobID"},
				}},
			},
		},
	}
}

// UpsertAllocs writes allocations as they are given, all or nothing: an
// existing one must pass structs.Allocation.CheckUpdate, a new one is taken
// as it is. No Raft entry leads here: placements are written by ApplyPlan
// and client reports by UpdateAllocsFromClient, which check everything a
// new allocation must be; tests build their state with it. CreateIndex and
// CreateTime of an existing allocation are kept.
func (s *StateStore) UpsertAllocs(index uint64, allocs []*structs.Allocation) error {
	txn := s.writeTxn()
	defer txn.Abort()
	jobs := map[[2]string]bool{}
	for _, a := range allocs {
		if err := upsertAllocTxn(txn, index, a); err != nil {
			return err
		}
		jobs[[2]string{a.Namespace, a.JobID}] = true
	}
	if err := refreshJobsTxn(txn, index, jobs); err != nil {
		return err
	}
	return commit(txn, index)
}

// UpdateAllocsFromClient records what clients report about their
// allocations, all or nothing. Each must exist, and only what a client
// owns is taken from the request, by structs.Allocation.MergeClientUpdate,
// applied to the allocation as it is in this write: a report that a job
// stop overtook keeps the stop, and a report that would bring a terminal
// allocation back to life is refused. An allocation reported terminal
// gives up its claims in the same write.
func (s *StateStore) UpdateAllocsFromClient(index uint64, allocs []*structs.Allocation) error {
	txn := s.writeTxn()
	defer txn.Abort()
	jobs := map[[2]string]bool{}
	for _, a := range allocs {
		if a == nil {
			return structs.ErrInvalid("alloc update: empty allocation")
		}
		existing, err := allocByIDTxn(txn, nil, a.ID)
		if err != nil {
			return err
		}
		if existing == nil {
			return structs.ErrNotFound("allocation %q not found", a.ID)
		}
		merged, err := existing.MergeClientUpdate(a)
		if err != nil {
			return err
		}
		merged.ModifyTime = a.ModifyTime
		if err := upsertAllocTxn(txn, index, merged); err != nil {
			return err
		}
		jobs[[2]string{existing.Namespace, existing.JobID}] = true
	}
	if err := refreshJobsTxn(txn, index, jobs); err != nil {
		return err
	}
	return commit(txn, index)
}

// refreshJobsTxn brings the status of jobs (namespace, ID) in line with
// their allocations', in a fixed order so every replica writes the same.
func refreshJobsTxn(txn *memdb.Txn, index uint64, jobs map[[2]string]bool) error {
	keys := slices.SortedFunc(maps.Keys(jobs), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	for _, key := range keys {
		job, err := jobByIDTxn(txn, nil, key[0], key[1])
		if err != nil {
			return err
		}
		if job != nil {
			if err := refreshJobTxn(txn, index, job, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func upsertAllocTxn(txn *memdb.Txn, index uint64, alloc *structs.Allocation) error {
	if alloc == nil || alloc.ID == "" {
		return structs.ErrInvalid("alloc upsert: missing allocation id")
	}
	existing, err := allocByIDTxn(txn, nil, alloc.ID)
	if err != nil {
		return err
	}
	a := alloc.Copy()
	if existing == nil {
		a.CreateIndex, a.ModifyIndex = index, index
		return insertAllocTxn(txn, a)
	}
	if err := existing.CheckUpdate(a); err != nil {
		return err
	}
	a.CreateIndex, a.CreateTime = existing.CreateIndex, existing.CreateTime
	a.ModifyIndex, a.ModifyTime = existing.ModifyIndex, existing.ModifyTime
	if reflect.DeepEqual(a, existing) {
		return nil
	}
	a.ModifyIndex, a.ModifyTime = index, alloc.ModifyTime
	if err := insertAllocTxn(txn, a); err != nil {
		return err
	}
	// An allocation that just became terminal (reported so by its client,
	// stopped by the servers, or lost with its node) gives up its claims in
	// this same write: they become past claims for the release watcher.
	switch {
	case a.Terminal() && !existing.Terminal():
		return releaseAllocClaimsTxn(txn, index, a.ModifyTime, a)
	case a.ClientTerminal() && !existing.ClientTerminal():
		// Stopped by the servers earlier, its tasks have now stopped:
		// the claims that waited for the client can be released.
		return clientDoneClaimsTxn(txn, index, a.ModifyTime, a)
	}
	return nil
}

func insertAllocTxn(txn *memdb.Txn, a *structs.Allocation) error {
	if err := txn.Insert(TableAllocs, a); err != nil {
		return fmt.Errorf("state: writing allocation %q: %w", a.ID, err)
	}
	return nil
}

// AllocByID returns the allocation, or nil when it is unknown.
func (s *StateStore) AllocByID(ws memdb.WatchSet, id string) (*structs.Allocation, error) {
	return allocByIDTxn(s.db.Txn(false), ws, id)
}

func allocByIDTxn(txn *memdb.Txn, ws memdb.WatchSet, id string) (*structs.Allocation, error) {
	ch, raw, err := txn.FirstWatch(TableAllocs, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading allocation %q: %w", id, err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Allocation), nil
}

// Allocs iterates over every allocation (*structs.Allocation), by ID.
func (s *StateStore) Allocs(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableAllocs, indexID)
}

// AllocsByNode returns the allocations placed on a node, by ID.
func (s *StateStore) AllocsByNode(ws memdb.WatchSet, nodeID string) ([]*structs.Allocation, error) {
	return collectAllocs(s.db.Txn(false), ws, indexNode, nodeID)
}

// AllocsByJob returns the allocations of a job, by ID.
func (s *StateStore) AllocsByJob(ws memdb.WatchSet, namespace, jobID string) ([]*structs.Allocation, error) {
	return collectAllocs(s.db.Txn(false), ws, indexJob, namespace, jobID)
}

func collectAllocs(txn *memdb.Txn, ws memdb.WatchSet, index string, args ...any) ([]*structs.Allocation, error) {
	iter, err := getWatch(txn, ws, TableAllocs, index, args...)
	if err != nil {
		return nil, err
	}
	var out []*structs.Allocation
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		out = append(out, raw.(*structs.Allocation))
	}
	return out, nil
}

// AllocRestore restores one allocation as persisted.
func (r *StateRestore) AllocRestore(a *structs.Allocation) error {
	return insertAllocTxn(r.txn, a)
}
