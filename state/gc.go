package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// The node and plugin garbage collection. The leader decides what to
// collect (CheckNodeGC, GCPluginCandidates) and writes it through Raft; the
// writes here check every rule again against the state they apply to, so a
// node that came back, or was claimed, in between is kept.

// GCNodes removes down nodes and their plugin instances, all or nothing:
// each must be down since at least req.Threshold before req.Timestamp (the
// leader's clock, carried in the entry) and have no claim, live or being
// released, left on it.
func (s *StateStore) GCNodes(index uint64, req *structs.NodeGCRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(req.NodeIDs) == 0 {
		return structs.ErrInvalid("node gc: no node ids given")
	}
	if req.Threshold < 0 {
		return structs.ErrInvalid("node gc: negative threshold %s", req.Threshold)
	}
	for _, id := range req.NodeIDs {
		if err := checkNodeGCTxn(txn, id, req.Threshold, req.Timestamp); err != nil {
			return err
		}
	}
	if err := deleteNodesTxn(txn, index, req.NodeIDs); err != nil {
		return err
	}
	return commit(txn, index)
}

// CheckNodeGC applies the rules of GCNodes to one node without writing
// anything: nil when the node may be collected at now with the threshold,
// otherwise an error that says why not (not found; conflict: not down, not
// down long enough, claims left).
func (s *StateStore) CheckNodeGC(nodeID string, threshold time.Duration, now int64) error {
	return checkNodeGCTxn(s.db.Txn(false), nodeID, threshold, now)
}

func checkNodeGCTxn(txn *memdb.Txn, nodeID string, threshold time.Duration, now int64) error {
	n, err := nodeByIDTxn(txn, nil, nodeID)
	if err != nil {
		return err
	}
	switch {
	case n == nil:
		return structs.ErrNotFound("node %q not found", nodeID)
	case n.Status != structs.NodeStatusDown:
		return structs.ErrConflict("node %q is %s, not down", nodeID, n.Status)
	case n.StatusUpdatedAt > now-int64(threshold):
		return structs.ErrConflict("node %q has been down only since %s, less than the node GC threshold of %s",
			nodeID, time.Unix(0, n.StatusUpdatedAt).UTC().Format(time.RFC3339), threshold)
	}
	claims, err := claimsOnNodeTxn(txn, nodeID)
	if err != nil {
		return err
	}
	if len(claims) > 0 {
		return structs.ErrConflict("node %q still has claims being released: %s", nodeID, strings.Join(claims, ", "))
	}
	return nil
}

// claimsOnNodeTxn lists, sorted, the claims (live or being released) that
// name the node, as "namespace/volume (allocation)". The scan reads every
// volume: the GC runs rarely, and only for down nodes.
func claimsOnNodeTxn(txn *memdb.Txn, nodeID string) ([]string, error) {
	iter, err := txn.Get(TableCSIVolumes, indexID)
	if err != nil {
		return nil, fmt.Errorf("state: listing volumes: %w", err)
	}
	var out []string
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		v := raw.(*structs.CSIVolume)
		seen := map[string]bool{}
		for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
			for allocID, c := range m {
				if c != nil && c.NodeID == nodeID && !seen[allocID] {
					seen[allocID] = true
					out = append(out, fmt.Sprintf("%s/%s (allocation %s)", v.Namespace, v.ID, allocID))
				}
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// GCPlugins removes plugin rows that no node runs and no volume names. A
// plugin already gone is skipped (another collection got there first); one
// that has instances or volumes again is refused, all or nothing.
func (s *StateStore) GCPlugins(index uint64, ids []string) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(ids) == 0 {
		return structs.ErrInvalid("plugin gc: no plugin ids given")
	}
	for _, id := range ids {
		p, err := pluginByIDTxn(txn, nil, id)
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		if !p.IsEmpty() {
			return structs.ErrConflict("plugin %q still has instances on nodes %s", id,
				strings.Join(slices.Sorted(maps.Keys(mergeKeys(p.Controllers, p.Nodes))), ", "))
		}
		inUse, err := pluginInUseTxn(txn, id)
		if err != nil {
			return err
		}
		if inUse {
			return structs.ErrConflict("plugin %q is named by registered volumes", id)
		}
		if err := deletePluginTxn(txn, p); err != nil {
			return err
		}
	}
	return commit(txn, index)
}

// GCPluginCandidates lists, sorted, the plugins GCPlugins would remove: no
// instance and no volume. Rows like these are removed as soon as they
// become empty; what is left was restored from an older snapshot or
// written by an older version.
func (s *StateStore) GCPluginCandidates() ([]string, error) {
	txn := s.db.Txn(false)
	iter, err := txn.Get(TableCSIPlugins, indexID)
	if err != nil {
		return nil, fmt.Errorf("state: listing plugins: %w", err)
	}
	var out []string
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		p := raw.(*structs.CSIPlugin)
		if !p.IsEmpty() {
			continue
		}
		inUse, err := pluginInUseTxn(txn, p.ID)
		if err != nil {
			return nil, err
		}
		if !inUse {
			out = append(out, p.ID)
		}
	}
	return out, nil
}

func mergeKeys(a, b map[string]*structs.CSIInfo) map[string]struct{} {
	out := map[string]struct{}{}
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}
