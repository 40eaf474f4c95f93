package state

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// Fixture factories for the state tests. Each returns a fresh object the
// test may change.

func testNode(id string) *structs.Node {
	return &structs.Node{
		ID:         id,
		Name:       "name-" + id,
		SecretID:   "secret-" + id,
		Datacenter: "dc1",
		Status:     structs.NodeStatusReady,
	}
}

// info is one fingerprint of plugin on a node.
func info(pluginID string, healthy, controllerRequired bool) *structs.CSIInfo {
	return &structs.CSIInfo{
		PluginID:                 pluginID,
		Healthy:                  healthy,
		Provider:                 "example.com/" + pluginID,
		ProviderVersion:          "1.0",
		RequiresControllerPlugin: controllerRequired,
		UpdateTime:               time.Unix(1700000000, 0),
	}
}

func ctrlInfo(pluginID string, healthy bool) *structs.CSIInfo {
	i := info(pluginID, healthy, true)
	i.ControllerInfo = &structs.CSIControllerInfo{SupportsAttachDetach: true}
	return i
}

func nodeInfo(pluginID string, healthy, controllerRequired bool) *structs.CSIInfo {
	i := info(pluginID, healthy, controllerRequired)
	i.NodeInfo = &structs.CSINodeInfo{ID: "ext-" + pluginID}
	return i
}

// withPlugin adds fingerprints of a plugin to a node: a controller instance
// when ctrl is not nil, a node instance when node is not nil.
func withPlugin(n *structs.Node, ctrl, node *structs.CSIInfo) *structs.Node {
	if ctrl != nil {
		if n.CSIControllerPlugins == nil {
			n.CSIControllerPlugins = map[string]*structs.CSIInfo{}
		}
		n.CSIControllerPlugins[ctrl.PluginID] = ctrl
	}
	if node != nil {
		if n.CSINodePlugins == nil {
			n.CSINodePlugins = map[string]*structs.CSIInfo{}
		}
		// Each node reports a storage node ID of its own: two nodes may
		// not hold the same one for a plugin.
		node = node.Copy()
		node.NodeInfo.ID = "ext-" + n.ID
		n.CSINodePlugins[node.PluginID] = node
	}
	return n
}

// healthyNodePlugin is a node running a healthy node-only plugin that needs
// no controller.
func healthyNodePlugin(nodeID, pluginID string) *structs.Node {
	return withPlugin(testNode(nodeID), nil, nodeInfo(pluginID, true, false))
}

func testVolume(id, pluginID string) *structs.CSIVolume {
	return &structs.CSIVolume{
		ID:         id,
		Namespace:  structs.DefaultNamespace,
		Name:       id,
		ExternalID: "ext-" + id,
		PluginID:   pluginID,
		RequestedCapabilities: []*structs.CSIVolumeCapability{
			{AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
			{AccessMode: structs.CSIVolumeAccessModeMultiNodeReader, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
		},
		Parameters: map[string]string{"type": "ssd"},
	}
}

func testAlloc(id, nodeID string) *structs.Allocation {
	return &structs.Allocation{
		ID:            id,
		Namespace:     structs.DefaultNamespace,
		Name:          "web.app[0]",
		JobID:         "web",
		TaskGroup:     "app",
		NodeID:        nodeID,
		DesiredStatus: structs.AllocDesiredStatusRun,
		ClientStatus:  structs.AllocClientStatusRunning,
	}
}

func writeClaim(allocID, nodeID string) *structs.CSIVolumeClaim {
	return &structs.CSIVolumeClaim{
		AllocationID:   allocID,
		NodeID:         nodeID,
		Mode:           structs.CSIVolumeClaimWrite,
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		State:          structs.CSIVolumeClaimStateTaken,
	}
}

func readClaim(allocID, nodeID string) *structs.CSIVolumeClaim {
	c := writeClaim(allocID, nodeID)
	c.Mode = structs.CSIVolumeClaimRead
	c.AccessMode = structs.CSIVolumeAccessModeMultiNodeReader
	c.ReadOnly = true
	return c
}

// mustCode fails unless err is a *structs.Error with the code.
func mustCode(t *testing.T, err error, code structs.ErrorCode) {
	t.Helper()
	must.Error(t, err)
	var e *structs.Error
	must.True(t, errors.As(err, &e), must.Sprintf("not a *structs.Error: %v", err))
	must.Eq(t, code, e.Code, must.Sprint(err))
}

func mustIndex(t *testing.T, s *StateStore, table string, want uint64) {
	t.Helper()
	got, err := s.Index(table)
	must.NoError(t, err)
	must.Eq(t, want, got, must.Sprintf("index of %s", table))
}

// setupVolume stores a node running a healthy node plugin "p" and a volume
// "vol" of it, at indexes 10 and 11.
func setupVolume(t *testing.T) *StateStore {
	t.Helper()
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))
	return s
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// fired reports whether any channel of the watch set is closed, without
// waiting.
func fired(ws memdb.WatchSet) bool {
	for ch := range ws {
		if closed(ch) {
			return true
		}
	}
	return false
}
