package state

import (
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestUpsertNode_DerivesPluginWithHealthCounts(t *testing.T) {
	s := TestStateStore(t)

	// n1 runs a monolith (controller and node), n2 only a node plugin whose
	// node service is unhealthy.
	n1 := withPlugin(testNode("n1"), ctrlInfo("ebs", true), nodeInfo("ebs", true, true))
	n2 := withPlugin(testNode("n2"), nil, nodeInfo("ebs", false, true))
	must.NoError(t, s.UpsertNode(100, n1))
	must.NoError(t, s.UpsertNode(101, n2))

	p, err := s.CSIPluginByID(nil, "ebs")
	must.NoError(t, err)
	must.NotNil(t, p)
	must.True(t, p.ControllerRequired)
	must.Eq(t, 1, p.ControllersHealthy)
	must.Eq(t, 1, p.ControllersExpected)
	must.Eq(t, 1, p.NodesHealthy)
	must.Eq(t, 2, p.NodesExpected)
	must.Eq(t, "example.com/ebs", p.Provider)
	must.Eq(t, uint64(100), p.CreateIndex)
	must.Eq(t, uint64(101), p.ModifyIndex)
	must.MapContainsKeys(t, p.Nodes, []string{"n1", "n2"})

	mustIndex(t, s, TableNodes, 101)
	mustIndex(t, s, TableCSIPlugins, 101)

	got, err := s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, uint64(100), got.CreateIndex)
	must.Eq(t, uint64(100), got.ModifyIndex)
}

func TestUpsertNode_DoesNotModifyCaller(t *testing.T) {
	s := TestStateStore(t)
	n := healthyNodePlugin("n1", "p")
	must.NoError(t, s.UpsertNode(5, n))
	must.Eq(t, uint64(0), n.CreateIndex)

	// Nor is the stored row shared with the caller's object.
	n.Name = "changed"
	got, err := s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, "name-n1", got.Name)
}

func TestUpsertNode_UnhealthyUnknownPluginIsNotCreated(t *testing.T) {
	s := TestStateStore(t)
	n1 := withPlugin(testNode("n1"), ctrlInfo("p", false), nodeInfo("p", false, true))
	must.NoError(t, s.UpsertNode(10, n1))

	p, err := s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p)
	mustIndex(t, s, TableCSIPlugins, 0)

	// Once a healthy instance shows up elsewhere, the plugin exists, and a
	// later write from n1 counts n1's unhealthy instances too.
	must.NoError(t, s.UpsertNode(11, healthyNodePlugin("n2", "p")))
	n1 = n1.Copy()
	n1.Name = "renamed"
	must.NoError(t, s.UpsertNode(12, n1))
	p, err = s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.NotNil(t, p)
	must.Eq(t, 2, p.NodesExpected)
	must.Eq(t, 1, p.NodesHealthy)
	must.Eq(t, 1, p.ControllersExpected)
	must.Eq(t, 0, p.ControllersHealthy)
}

func TestUpsertNode_ControllerRequiredFromNodeOnlyFingerprint(t *testing.T) {
	s := TestStateStore(t)
	// The node plugin says the plugin has a controller, which has not
	// fingerprinted anywhere yet.
	must.NoError(t, s.UpsertNode(10, withPlugin(testNode("n1"), nil, nodeInfo("p", true, true))))
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("vol", "p")}))

	p, err := s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.True(t, p.ControllerRequired)
	must.Eq(t, 0, p.ControllersExpected)

	v, err := s.CSIVolumeByID(nil, structs.DefaultNamespace, "vol")
	must.NoError(t, err)
	must.True(t, v.ControllerRequired)
	must.Eq(t, 1, v.NodesHealthy)
	must.False(t, v.Schedulable)
}

func TestUpsertNode_DroppingPlugin(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertNode(11, healthyNodePlugin("n2", "p")))
	must.NoError(t, s.UpsertNode(12, healthyNodePlugin("n1", "q")))

	// n1 now runs q instead of p: p loses n1 and keeps n2.
	p, err := s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.MapLen(t, 1, p.Nodes)
	must.MapContainsKey(t, p.Nodes, "n2")
	must.Eq(t, 1, p.NodesHealthy)
	must.Eq(t, uint64(12), p.ModifyIndex)

	// n2 drops p too: p has no instances and no volumes, so it goes.
	must.NoError(t, s.UpsertNode(13, testNode("n2")))
	p, err = s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p)
	mustIndex(t, s, TableCSIPlugins, 13)

	q, err := s.CSIPluginByID(nil, "q")
	must.NoError(t, err)
	must.NotNil(t, q)
}

func TestUpsertNode_EmptyPluginReferencedByVolumeIsKept(t *testing.T) {
	s := setupVolume(t)
	must.NoError(t, s.UpsertNode(12, testNode("n1")))

	p, err := s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.NotNil(t, p)
	must.True(t, p.IsEmpty())
	must.Eq(t, 0, p.NodesExpected)
	must.Eq(t, uint64(12), p.ModifyIndex)

	v, err := s.CSIVolumeByID(nil, structs.DefaultNamespace, "vol")
	must.NoError(t, err)
	must.False(t, v.Schedulable)
	must.Eq(t, 0, v.NodesHealthy)

	// Deregistering the last volume then removes the empty plugin.
	must.NoError(t, s.CSIVolumeDeregister(13, structs.DefaultNamespace, []string{"vol"}, false))
	p, err = s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p)
	mustIndex(t, s, TableCSIPlugins, 13)
}

func TestUpsertNode_NoOpDoesNotBumpIndexes(t *testing.T) {
	s := TestStateStore(t)
	n := healthyNodePlugin("n1", "p")
	must.NoError(t, s.UpsertNode(10, n))

	ws := memdb.NewWatchSet()
	_, err := s.NodeByID(ws, "n1")
	must.NoError(t, err)
	_, err = s.IndexWatch(ws, TableNodes, TableCSIPlugins)
	must.NoError(t, err)

	// Same node; only the timestamps differ.
	again := n.Copy()
	again.StatusUpdatedAt = 12345
	again.CSINodePlugins["p"].UpdateTime = again.CSINodePlugins["p"].UpdateTime.Add(1e9)
	must.NoError(t, s.UpsertNode(11, again))

	mustIndex(t, s, TableNodes, 10)
	mustIndex(t, s, TableCSIPlugins, 10)
	must.False(t, fired(ws))
	got, err := s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, uint64(10), got.ModifyIndex)

	// A real change bumps and wakes.
	again.Name = "other"
	must.NoError(t, s.UpsertNode(12, again))
	mustIndex(t, s, TableNodes, 12)
	mustIndex(t, s, TableCSIPlugins, 10)
	must.True(t, fired(ws))
	got, err = s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, uint64(10), got.CreateIndex)
	must.Eq(t, uint64(12), got.ModifyIndex)
}

func TestUpdateNodeStatus(t *testing.T) {
	s := TestStateStore(t)

	err := s.UpdateNodeStatus(9, &structs.NodeUpdateStatusRequest{NodeID: "nope", Status: structs.NodeStatusDown})
	mustCode(t, err, structs.ErrCodeNotFound)
	must.StrContains(t, err.Error(), `node "nope" not found`)

	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))

	// A status change without fingerprints keeps the node's fingerprints,
	// but a down node's instances count as unhealthy.
	must.NoError(t, s.UpdateNodeStatus(11, &structs.NodeUpdateStatusRequest{
		NodeID: "n1", Status: structs.NodeStatusDown, UpdatedAt: 500,
	}))
	n, err := s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, structs.NodeStatusDown, n.Status)
	must.Eq(t, int64(500), n.StatusUpdatedAt)
	must.Eq(t, uint64(11), n.ModifyIndex)
	must.MapLen(t, 1, n.CSINodePlugins)
	mustIndex(t, s, TableCSIPlugins, 11)

	// New fingerprints: p turns unhealthy.
	must.NoError(t, s.UpdateNodeStatus(12, &structs.NodeUpdateStatusRequest{
		NodeID: "n1", Status: structs.NodeStatusReady, UpdatedAt: 600,
		CSINodePlugins: map[string]*structs.CSIInfo{"p": nodeInfo("p", false, false)},
	}))
	p, err := s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Eq(t, 0, p.NodesHealthy)
	must.Eq(t, 1, p.NodesExpected)
	must.Eq(t, uint64(12), p.ModifyIndex)

	// A heartbeat that changes nothing but its time writes nothing.
	must.NoError(t, s.UpdateNodeStatus(13, &structs.NodeUpdateStatusRequest{
		NodeID: "n1", Status: structs.NodeStatusReady, UpdatedAt: 700,
	}))
	mustIndex(t, s, TableNodes, 12)

	// An empty map means the node runs no node plugin any more.
	must.NoError(t, s.UpdateNodeStatus(14, &structs.NodeUpdateStatusRequest{
		NodeID: "n1", Status: structs.NodeStatusReady, UpdatedAt: 800,
		CSINodePlugins: map[string]*structs.CSIInfo{},
	}))
	p, err = s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p)
	mustIndex(t, s, TableNodes, 14)
	mustIndex(t, s, TableCSIPlugins, 14)
}

func TestDeleteNode(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertNode(11, healthyNodePlugin("n2", "p")))

	// All or nothing: an unknown ID fails the whole delete.
	err := s.DeleteNode(12, []string{"n1", "nope"})
	mustCode(t, err, structs.ErrCodeNotFound)
	must.StrContains(t, err.Error(), `node "nope" not found`)
	n, err := s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.NotNil(t, n)
	mustIndex(t, s, TableNodes, 11)

	mustCode(t, s.DeleteNode(12, nil), structs.ErrCodeInvalid)

	must.NoError(t, s.DeleteNode(13, []string{"n1"}))
	n, err = s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Nil(t, n)
	p, err := s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.MapLen(t, 1, p.Nodes)
	must.MapContainsKey(t, p.Nodes, "n2")
	mustIndex(t, s, TableNodes, 13)
	mustIndex(t, s, TableCSIPlugins, 13)

	must.NoError(t, s.DeleteNode(14, []string{"n2"}))
	p, err = s.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Nil(t, p)
}

func TestNodesByIDPrefix(t *testing.T) {
	s := TestStateStore(t)
	for i, id := range []string{"aa1", "aa2", "ab1"} {
		must.NoError(t, s.UpsertNode(uint64(10+i), testNode(id)))
	}
	ids := func(iter memdb.ResultIterator, err error) []string {
		must.NoError(t, err)
		var out []string
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			out = append(out, raw.(*structs.Node).ID)
		}
		return out
	}
	must.Eq(t, []string{"aa1", "aa2"}, ids(s.NodesByIDPrefix(nil, "aa")))
	must.Eq(t, []string{"aa1", "aa2", "ab1"}, ids(s.Nodes(nil)))
	must.Eq(t, []string(nil), ids(s.NodesByIDPrefix(nil, "b")))
}
