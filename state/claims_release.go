package state

import (
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// indexPastClaims indexes the volumes that have claims being released, and
// only those, so the release watcher finds its work without reading every
// volume, a change to a volume without past claims never wakes it, and
// writing such a volume (every register and claim) costs no insert here.
const indexPastClaims = "past_claims"

func pastClaimsIndex() *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: indexPastClaims, AllowMissing: true, Indexer: pastClaimsIndexer{}}
}

// pastClaimsIndexer is a memdb.SingleIndexer that puts a volume with past
// claims under one key, and leaves every other volume out.
type pastClaimsIndexer struct{}

var pastClaimsKey = []byte{1}

func (pastClaimsIndexer) FromObject(obj any) (bool, []byte, error) {
	v, ok := obj.(*structs.CSIVolume)
	if !ok {
		return false, nil, fmt.Errorf("state: past claims index of a %T", obj)
	}
	return len(v.PastClaims) > 0, pastClaimsKey, nil
}

func (pastClaimsIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 0 {
		return nil, fmt.Errorf("state: the past claims index takes no arguments, not %d", len(args))
	}
	return pastClaimsKey, nil
}

// indexClaimAlloc indexes volumes by the allocations that hold a live
// claim on them, so the write that ends an allocation finds every volume it
// must release.
const indexClaimAlloc = "claim_alloc"

func claimAllocIndex() *memdb.IndexSchema {
	return &memdb.IndexSchema{Name: indexClaimAlloc, AllowMissing: true, Indexer: claimAllocIndexer{}}
}

// claimAllocIndexer is a memdb.MultiIndexer over the allocation IDs of a
// volume's read and write claims.
type claimAllocIndexer struct{}

func (claimAllocIndexer) FromObject(obj any) (bool, [][]byte, error) {
	v, ok := obj.(*structs.CSIVolume)
	if !ok {
		return false, nil, fmt.Errorf("state: claim index of a %T", obj)
	}
	ids := make([]string, 0, len(v.ReadClaims)+len(v.WriteClaims))
	for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims} {
		for id := range m {
			ids = append(ids, id)
		}
	}
	// Sorted, so that a write that keeps the claims finds every key where
	// it was and memdb skips deleting it.
	slices.Sort(ids)
	keys := make([][]byte, len(ids))
	for i, id := range ids {
		keys[i] = append([]byte(id), 0)
	}
	return len(keys) > 0, keys, nil
}

func (claimAllocIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("state: the claim index takes one allocation ID, not %d arguments", len(args))
	}
	id, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("state: the claim index takes an allocation ID, not a %T", args[0])
	}
	return append([]byte(id), 0), nil
}

// CSIVolumesWithPastClaims iterates over the raw stored rows of every volume
// with a claim being released. The watch it adds fires only when that set,
// or one of its members, changes.
func (s *StateStore) CSIVolumesWithPastClaims(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableCSIVolumes, indexPastClaims)
}

// CSIPastClaimsByState counts the claims being released, by state name,
// over every volume; each release state is present, zero or not. It reads
// only the volumes with past claims, through their index, and is meant for
// a metrics scrape.
func (s *StateStore) CSIPastClaimsByState() (map[string]int, error) {
	out := map[string]int{}
	for _, st := range []structs.CSIVolumeClaimState{
		structs.CSIVolumeClaimStateWaitingForClient, structs.CSIVolumeClaimStateUnpublishing, structs.CSIVolumeClaimStateNodeDetached,
		structs.CSIVolumeClaimStateControllerDetached, structs.CSIVolumeClaimStateReadyToFree,
	} {
		out[st.String()] = 0
	}
	iter, err := s.CSIVolumesWithPastClaims(nil)
	if err != nil {
		return nil, err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		for _, c := range raw.(*structs.CSIVolume).PastClaims {
			out[c.State.String()]++
		}
	}
	return out, nil
}

// releaseAllocClaimsTxn turns every claim an allocation holds into a past
// claim, keeping everything the release needs (node, provider node ID,
// modes, publish context). The live claim stays until the release frees
// it, so the volume stays in use until then. It is called in the write
// that makes the allocation terminal. A claim whose allocation the client
// still runs (the servers stopped it; the client has not reported its
// tasks stopped) waits for the client: unpublishing it now would pull the
// volume from under the tasks. Otherwise it is unpublishing.
func releaseAllocClaimsTxn(txn *memdb.Txn, index uint64, now int64, alloc *structs.Allocation) error {
	vols, err := claimedVolumesTxn(txn, alloc)
	if err != nil {
		return err
	}
	for _, existing := range vols {
		held := existing.WriteClaims[alloc.ID]
		if held == nil {
			held = existing.ReadClaims[alloc.ID]
		}
		if held == nil || existing.PastClaims[alloc.ID] != nil {
			continue
		}
		v := existing.CopyClaims()
		past := held.Copy()
		past.State, past.Note = structs.CSIVolumeClaimStateUnpublishing, ""
		if !alloc.ClientTerminal() {
			past.State, past.Note = structs.CSIVolumeClaimStateWaitingForClient, structs.WaitingForClientNote
		}
		if v.PastClaims == nil {
			v.PastClaims = map[string]*structs.CSIVolumeClaim{}
		}
		v.PastClaims[alloc.ID] = past
		v.ModifyIndex, v.ModifyTime = index, now
		if err := insertVolumeTxn(txn, v); err != nil {
			return err
		}
	}
	return nil
}

// clientDoneClaimsTxn moves the claims of an allocation that waited for
// its client (see releaseAllocClaimsTxn) to unpublishing. It is called in
// the write in which the allocation became client-terminal: its client
// reported its tasks stopped, or the allocation was lost with its node.
func clientDoneClaimsTxn(txn *memdb.Txn, index uint64, now int64, alloc *structs.Allocation) error {
	vols, err := claimedVolumesTxn(txn, alloc)
	if err != nil {
		return err
	}
	for _, existing := range vols {
		past := existing.PastClaims[alloc.ID]
		if past == nil || past.State != structs.CSIVolumeClaimStateWaitingForClient {
			continue
		}
		v := existing.CopyClaims()
		p := v.PastClaims[alloc.ID]
		p.State, p.Note = structs.CSIVolumeClaimStateUnpublishing, ""
		v.ModifyIndex, v.ModifyTime = index, now
		if err := insertVolumeTxn(txn, v); err != nil {
			return err
		}
	}
	return nil
}

// claimedVolumesTxn finds the volumes on which an allocation holds a live
// or past claim, through the claims' index: by what the allocation holds,
// not by what its group asks for now, so a claim outlives a new version of
// its job that no longer asks for the volume and is still released.
func claimedVolumesTxn(txn *memdb.Txn, alloc *structs.Allocation) ([]*structs.CSIVolume, error) {
	iter, err := getWatch(txn, nil, TableCSIVolumes, indexClaimAlloc, alloc.ID)
	if err != nil {
		return nil, err
	}
	var out []*structs.CSIVolume
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		out = append(out, raw.(*structs.CSIVolume))
	}
	return out, nil
}

// loseNodeAllocsTxn marks the live allocations of a node that went down as
// lost, which releases their claims: the node's side of the release will be
// skipped by the watcher, the controller's still runs.
func loseNodeAllocsTxn(txn *memdb.Txn, index uint64, now int64, nodeID string) error {
	allocs, err := collectAllocs(txn, nil, indexNode, nodeID)
	if err != nil {
		return err
	}
	jobs := map[[2]string]bool{}
	for _, a := range allocs {
		if a.ClientTerminal() {
			continue
		}
		c := a.Copy()
		c.ClientStatus = structs.AllocClientStatusLost
		c.ClientDescription = "node is down"
		c.ModifyTime = now
		if err := upsertAllocTxn(txn, index, c); err != nil {
			return err
		}
		jobs[[2]string{a.Namespace, a.JobID}] = true
	}
	// The jobs' status follows their allocations', as in UpsertAllocs.
	return refreshJobsTxn(txn, index, jobs)
}
