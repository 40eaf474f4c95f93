package state

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func nodesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableNodes,
		Indexes: map[string]*memdb.IndexSchema{
			indexID:     idIndex(),
			indexSecret: nodeSecretIndex(),
		},
	}
}

// UpsertNode registers a node or replaces it (a client re-registering after
// a restart), and derives the CSI plugins from its fingerprints in the same
// transaction.
func (s *StateStore) UpsertNode(index uint64, node *structs.Node) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := upsertNodeTxn(txn, index, node); err != nil {
		return err
	}
	return commit(txn, index)
}

func upsertNodeTxn(txn *memdb.Txn, index uint64, node *structs.Node) error {
	if node == nil || node.ID == "" {
		return structs.ErrInvalid("node upsert: missing node id")
	}
	if err := node.Validate(); err != nil {
		return err
	}
	existing, err := nodeByIDTxn(txn, nil, node.ID)
	if err != nil {
		return err
	}
	// The state keeps the secret's hash only, whatever form the entry
	// carried it in (older leaders wrote the secret itself).
	n := node.Copy()
	n.HashSecret()
	// The endpoint checked the secret against its state; a registration
	// that overtook it in the log must not hand the node to another
	// secret either.
	if existing != nil && (len(existing.SecretHash) != sha256.Size || subtle.ConstantTimeCompare(existing.SecretHash, n.SecretHash) != 1) {
		return structs.NewError(structs.ErrCodePermissionDenied, "node %q is registered with a different secret", node.ID)
	}
	// Drain and eligibility are the operator's: a registration, which
	// the node's agent sends after every restart, keeps them.
	n.KeepDrainState(existing)
	return writeNodeTxn(txn, index, existing, n)
}

// UpdateNodeStatus applies a heartbeat: the status, its time and, when the
// request carries them, new fingerprints. Nil fingerprint maps mean "no
// change"; an empty map means the node runs no such plugin any more.
func (s *StateStore) UpdateNodeStatus(index uint64, req *structs.NodeUpdateStatusRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := updateNodeStatusTxn(txn, index, req); err != nil {
		return err
	}
	return commit(txn, index)
}

func updateNodeStatusTxn(txn *memdb.Txn, index uint64, req *structs.NodeUpdateStatusRequest) error {
	existing, err := nodeByIDTxn(txn, nil, req.NodeID)
	if err != nil {
		return err
	}
	if existing == nil {
		return structs.ErrNotFound("node %q not found", req.NodeID)
	}
	n := existing.Copy()
	// An empty status is refused by the endpoint; should one get here, keep
	// the node's status rather than store a status nobody knows.
	if req.Status != "" {
		n.Status = req.Status
	}
	n.StatusUpdatedAt = req.UpdatedAt
	if req.CSIControllerPlugins != nil {
		n.CSIControllerPlugins = copyInfoMap(req.CSIControllerPlugins)
	}
	if req.CSINodePlugins != nil {
		n.CSINodePlugins = copyInfoMap(req.CSINodePlugins)
	}
	// The node as it would be stored must be one a registration could
	// store: a known status, well-formed fingerprints.
	if err := n.Validate(); err != nil {
		return err
	}
	if n.Status == structs.NodeStatusDown && existing.Status != structs.NodeStatusDown {
		// Down beyond its grace period (the servers wait that long before
		// saying so): what ran there is lost and its claims are released.
		if err := loseNodeAllocsTxn(txn, index, req.UpdatedAt, n.ID); err != nil {
			return err
		}
	}
	return writeNodeTxn(txn, index, existing, n)
}

// DeleteNode removes nodes, all or nothing, and takes them out of every
// plugin they ran.
func (s *StateStore) DeleteNode(index uint64, nodeIDs []string) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := deleteNodesTxn(txn, index, nodeIDs); err != nil {
		return err
	}
	return commit(txn, index)
}

func deleteNodesTxn(txn *memdb.Txn, index uint64, nodeIDs []string) error {
	if len(nodeIDs) == 0 {
		return structs.ErrInvalid("node deregister: no node ids given")
	}
	for _, id := range nodeIDs {
		existing, err := nodeByIDTxn(txn, nil, id)
		if err != nil {
			return err
		}
		if existing == nil {
			return structs.ErrNotFound("node %q not found", id)
		}
		if err := txn.Delete(TableNodes, existing); err != nil {
			return fmt.Errorf("state: deleting node %q: %w", id, err)
		}
		if err := updateNodePluginsTxn(txn, index, id, existing, nil); err != nil {
			return err
		}
	}
	return nil
}

// writeNodeTxn stores n, which the caller owns, in place of existing (nil
// when the node is new), then brings the plugins in line with n's
// fingerprints. A node that differs only in timestamps is not rewritten, so a
// heartbeat that reports nothing new does not wake node watchers.
func writeNodeTxn(txn *memdb.Txn, index uint64, existing, n *structs.Node) error {
	if existing == nil || !structs.PluginsEqual(existing.CSINodePlugins, n.CSINodePlugins) {
		if err := externalNodeIDConflictTxn(txn, n); err != nil {
			return err
		}
	}
	switch {
	case existing == nil:
		n.CreateIndex, n.ModifyIndex = index, index
	case nodesEqual(existing, n):
		n = existing
	default:
		n.CreateIndex, n.ModifyIndex = existing.CreateIndex, index
	}
	if n != existing {
		if err := insertNodeTxn(txn, n); err != nil {
			return err
		}
	}
	// Plugins are reconciled even when the node row did not change: it is
	// idempotent and writes only what differs.
	return updateNodePluginsTxn(txn, index, n.ID, existing, n)
}

// externalNodeIDConflictTxn refuses a node whose node plugin reports a
// storage provider node ID (NodeGetInfo) that another node already holds
// for the same plugin: controller publishes name that ID, so a second node
// claiming it could have volumes attached to it that belong to the first.
func externalNodeIDConflictTxn(txn *memdb.Txn, n *structs.Node) error {
	want := map[string]string{} // plugin ID -> external node ID
	for id, info := range n.CSINodePlugins {
		if info != nil && info.NodeInfo != nil && info.NodeInfo.ID != "" {
			want[id] = info.NodeInfo.ID
		}
	}
	if len(want) == 0 {
		return nil
	}
	iter, err := txn.Get(TableNodes, indexID)
	if err != nil {
		return fmt.Errorf("state: listing nodes: %w", err)
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		other := raw.(*structs.Node)
		if other.ID == n.ID {
			continue
		}
		for pluginID, ext := range want {
			info := other.CSINodePlugins[pluginID]
			if info != nil && info.NodeInfo != nil && info.NodeInfo.ID == ext {
				return structs.ErrConflict("node %q: plugin %q reports storage node ID %q, which node %q (%s) holds already",
					n.ID, pluginID, ext, other.ID, other.Name)
			}
		}
	}
	return nil
}

func insertNodeTxn(txn *memdb.Txn, n *structs.Node) error {
	if err := txn.Insert(TableNodes, n); err != nil {
		return fmt.Errorf("state: writing node %q: %w", n.ID, err)
	}
	return nil
}

// nodesEqual compares two nodes, ignoring the indexes, the status time and
// the fingerprints' update times.
func nodesEqual(a, b *structs.Node) bool {
	return a.ID == b.ID &&
		a.Name == b.Name &&
		bytes.Equal(a.SecretHash, b.SecretHash) &&
		a.Datacenter == b.Datacenter &&
		a.Address == b.Address &&
		maps.Equal(a.Attributes, b.Attributes) &&
		a.Status == b.Status &&
		a.StatusDescription == b.StatusDescription &&
		a.IntroducedBy == b.IntroducedBy &&
		a.SchedulingEligibility == b.SchedulingEligibility &&
		a.DrainStrategy.Equal(b.DrainStrategy) &&
		reflect.DeepEqual(a.LastDrain, b.LastDrain) &&
		structs.PluginsEqual(a.CSIControllerPlugins, b.CSIControllerPlugins) &&
		structs.PluginsEqual(a.CSINodePlugins, b.CSINodePlugins)
}

// updateNodePluginsTxn sets, for every plugin the node ran before (old) or
// runs now (cur, nil when the node is deleted), the instances the node
// reports, so plugins the node no longer runs lose it.
func updateNodePluginsTxn(txn *memdb.Txn, index uint64, nodeID string, old, cur *structs.Node) error {
	ids := map[string]struct{}{}
	for _, n := range []*structs.Node{old, cur} {
		if n == nil {
			continue
		}
		for id := range n.CSIControllerPlugins {
			ids[id] = struct{}{}
		}
		for id := range n.CSINodePlugins {
			ids[id] = struct{}{}
		}
	}
	// Sorted, so that every replica writes in the same order.
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		var ctrl, node *structs.CSIInfo
		if cur != nil {
			ctrl, node = cur.CSIControllerPlugins[id], cur.CSINodePlugins[id]
			if cur.Status == structs.NodeStatusDown {
				// A down node's instances cannot serve anything, whatever
				// they last reported; when the node is back, its own
				// fingerprints count again.
				ctrl, node = downInstance(ctrl), downInstance(node)
			}
		}
		if err := setPluginInstancesTxn(txn, index, id, nodeID, ctrl, node); err != nil {
			return err
		}
	}
	return nil
}

// downInstance is a copy of a plugin instance on a down node, unhealthy.
func downInstance(i *structs.CSIInfo) *structs.CSIInfo {
	if i == nil {
		return nil
	}
	c := i.Copy()
	c.Healthy = false
	c.HealthDescription = "node is down"
	return c
}

func copyInfoMap(m map[string]*structs.CSIInfo) map[string]*structs.CSIInfo {
	if m == nil {
		return nil
	}
	out := make(map[string]*structs.CSIInfo, len(m))
	for k, v := range m {
		out[k] = v.Copy()
	}
	return out
}

// NodeByID returns the node, or nil when it is unknown.
func (s *StateStore) NodeByID(ws memdb.WatchSet, id string) (*structs.Node, error) {
	return nodeByIDTxn(s.db.Txn(false), ws, id)
}

func nodeByIDTxn(txn *memdb.Txn, ws memdb.WatchSet, id string) (*structs.Node, error) {
	ch, raw, err := txn.FirstWatch(TableNodes, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading node %q: %w", id, err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Node), nil
}

// Nodes iterates over every node (*structs.Node), by ID.
func (s *StateStore) Nodes(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableNodes, indexID)
}

// NodesByIDPrefix iterates over the nodes whose ID starts with prefix.
func (s *StateStore) NodesByIDPrefix(ws memdb.WatchSet, prefix string) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableNodes, indexIDPrefix, prefix)
}

// getWatch runs a memdb Get and adds the iterator's watch channel to ws.
func getWatch(txn *memdb.Txn, ws memdb.WatchSet, table, index string, args ...any) (memdb.ResultIterator, error) {
	iter, err := txn.Get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("state: listing %s by %s: %w", table, index, err)
	}
	watch(ws, iter.WatchCh())
	return iter, nil
}

// NodeRestore restores one node as persisted.
func (r *StateRestore) NodeRestore(n *structs.Node) error {
	// A snapshot of an older build holds the secret itself.
	n.HashSecret()
	return insertNodeTxn(r.txn, n)
}
