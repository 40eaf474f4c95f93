package state

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

func TestNodeDown_InstancesUnhealthyUntilBack(t *testing.T) {
	s := TestStateStore(t)
	n := mock.NodeWithController("dev")
	must.NoError(t, s.UpsertNode(10, n))

	p, err := s.CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.Eq(t, 1, p.NodesHealthy)

	must.NoError(t, s.UpdateNodeStatus(11, &structs.NodeUpdateStatusRequest{NodeID: n.ID, Status: structs.NodeStatusDown}))
	p, err = s.CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.Eq(t, 0, p.NodesHealthy)
	must.Eq(t, 0, p.ControllersHealthy)
	must.Eq(t, 1, p.NodesExpected)
	must.Eq(t, "node is down", p.Nodes[n.ID].HealthDescription)

	// Back: the node's own fingerprints count again, without new ones.
	must.NoError(t, s.UpdateNodeStatus(12, &structs.NodeUpdateStatusRequest{NodeID: n.ID, Status: structs.NodeStatusReady}))
	p, err = s.CSIPluginByID(nil, "dev")
	must.NoError(t, err)
	must.Eq(t, 1, p.NodesHealthy)
	must.Eq(t, 1, p.ControllersHealthy)
}
