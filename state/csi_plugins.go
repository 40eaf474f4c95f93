package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func csiPluginsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableCSIPlugins,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: idIndex(),
		},
	}
}

// Plugins are never written by hand: the node writes derive them, in the same
// transaction, from the fingerprints each node reports.

// setPluginInstancesTxn records the controller and node instances (nil for
// none) that one node runs of one plugin, and recounts the plugin's health.
func setPluginInstancesTxn(txn *memdb.Txn, index uint64, pluginID, nodeID string, ctrl, node *structs.CSIInfo) error {
	existing, err := pluginByIDTxn(txn, nil, pluginID)
	if err != nil {
		return err
	}
	var p *structs.CSIPlugin
	switch {
	case existing != nil:
		p = existing.Copy()
	case !infoHealthy(ctrl) && !infoHealthy(node):
		// A plugin nobody has seen healthy yet is not worth a row: a node
		// whose plugin fails to start would otherwise list it as present.
		return nil
	default:
		p = structs.NewCSIPlugin(pluginID, index)
	}
	p.SetInstances(nodeID, ctrl, node)

	if p.IsEmpty() {
		inUse, err := pluginInUseTxn(txn, pluginID)
		if err != nil {
			return err
		}
		if !inUse {
			return deletePluginTxn(txn, existing)
		}
		// A plugin that volumes still name stays, with no instances, so the
		// volumes read as unschedulable rather than pointing at nothing.
	}
	if existing != nil && pluginsEqual(existing, p) {
		return nil
	}
	p.ModifyIndex = index
	return insertPluginTxn(txn, p)
}

// deletePluginIfUnusedTxn deletes the plugin when no node runs it and no
// volume names it any more, as after the deregistration of its last volume.
func deletePluginIfUnusedTxn(txn *memdb.Txn, pluginID string) error {
	p, err := pluginByIDTxn(txn, nil, pluginID)
	if err != nil || p == nil || !p.IsEmpty() {
		return err
	}
	inUse, err := pluginInUseTxn(txn, pluginID)
	if err != nil || inUse {
		return err
	}
	return deletePluginTxn(txn, p)
}

func deletePluginTxn(txn *memdb.Txn, p *structs.CSIPlugin) error {
	if p == nil {
		return nil
	}
	if err := txn.Delete(TableCSIPlugins, p); err != nil {
		return fmt.Errorf("state: deleting plugin %q: %w", p.ID, err)
	}
	return nil
}

func insertPluginTxn(txn *memdb.Txn, p *structs.CSIPlugin) error {
	if err := txn.Insert(TableCSIPlugins, p); err != nil {
		return fmt.Errorf("state: writing plugin %q: %w", p.ID, err)
	}
	return nil
}

// pluginInUseTxn reports whether any volume names the plugin.
func pluginInUseTxn(txn *memdb.Txn, pluginID string) (bool, error) {
	raw, err := txn.First(TableCSIVolumes, indexPluginID, pluginID)
	if err != nil {
		return false, fmt.Errorf("state: reading volumes of plugin %q: %w", pluginID, err)
	}
	return raw != nil, nil
}

func infoHealthy(i *structs.CSIInfo) bool { return i != nil && i.Healthy }

// pluginsEqual compares two plugin rows, ignoring the modify index and time
// and the instances' update times.
func pluginsEqual(a, b *structs.CSIPlugin) bool {
	return a.ID == b.ID &&
		a.Provider == b.Provider &&
		a.Version == b.Version &&
		a.ControllerRequired == b.ControllerRequired &&
		a.ControllersHealthy == b.ControllersHealthy &&
		a.ControllersExpected == b.ControllersExpected &&
		a.NodesHealthy == b.NodesHealthy &&
		a.NodesExpected == b.NodesExpected &&
		a.CreateIndex == b.CreateIndex &&
		a.CreateTime == b.CreateTime &&
		structs.PluginsEqual(a.Controllers, b.Controllers) &&
		structs.PluginsEqual(a.Nodes, b.Nodes)
}

// CSIPluginByID returns the plugin, or nil when it is unknown.
func (s *StateStore) CSIPluginByID(ws memdb.WatchSet, id string) (*structs.CSIPlugin, error) {
	return pluginByIDTxn(s.db.Txn(false), ws, id)
}

func pluginByIDTxn(txn *memdb.Txn, ws memdb.WatchSet, id string) (*structs.CSIPlugin, error) {
	ch, raw, err := txn.FirstWatch(TableCSIPlugins, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading plugin %q: %w", id, err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.CSIPlugin), nil
}

// CSIPlugins iterates over every plugin (*structs.CSIPlugin), by ID.
func (s *StateStore) CSIPlugins(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableCSIPlugins, indexID)
}

// CSIPluginsByIDPrefix iterates over the plugins whose ID starts with prefix.
func (s *StateStore) CSIPluginsByIDPrefix(ws memdb.WatchSet, prefix string) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableCSIPlugins, indexIDPrefix, prefix)
}

// CSIPluginRestore restores one plugin as persisted; it is not recomputed
// from the nodes.
func (r *StateRestore) CSIPluginRestore(p *structs.CSIPlugin) error {
	return insertPluginTxn(r.txn, p)
}
