package command

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

var updated = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func devPlugin() *structs.CSIPlugin {
	return &structs.CSIPlugin{
		ID: "dev", Provider: "dev.csi.volplane", Version: "1.0.0", ControllerRequired: true,
		Controllers: map[string]*structs.CSIInfo{
			"node0001-aaaa": {PluginID: "dev", Healthy: true, HealthDescription: "healthy", UpdateTime: updated},
		},
		Nodes: map[string]*structs.CSIInfo{
			"node0001-aaaa": {PluginID: "dev", Healthy: true, HealthDescription: "healthy", UpdateTime: updated,
				NodeInfo: &structs.CSINodeInfo{ID: "ext-node-1", MaxVolumes: 16,
					AccessibleTopology: &structs.CSITopology{Segments: map[string]string{"rack": "R1"}}}},
			"node0002-bbbb": {PluginID: "dev", Healthy: false, HealthDescription: "probe failed: socket not found", UpdateTime: updated},
		},
		ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 1, NodesExpected: 2,
	}
}

func TestPluginStatus_List(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/plugins", 200, []*structs.CSIPluginListStub{devPlugin().Stub(),
		{ID: "nfs", Provider: "nfs.csi.k8s.io", NodesHealthy: 3, NodesExpected: 3}})

	r := run(t, "", "plugin", "status")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID   Provider          Controllers Healthy/Expected  Nodes Healthy/Expected
dev  dev.csi.volplane  1/1                           1/2
nfs  nfs.csi.k8s.io    0/0                           3/3
`, r.out)
	must.Eq(t, request{Method: "GET", Path: "/v1/plugins", Query: "type=csi"}, r0(f))
}

func TestPluginStatus_Detail(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/plugin/csi/dev", 200, devPlugin())
	when := updated.Local().Format(time.RFC3339)

	r := run(t, "", "plugin", "status", "dev")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID                   = dev
Provider             = dev.csi.volplane
Version              = 1.0.0
Controller Required  = true
Controllers Healthy  = 1
Controllers Expected = 1
Nodes Healthy        = 1
Nodes Expected       = 2

Controllers
Node ID   Healthy  Health Description  Update Time
node0001  true     healthy             `+when+`

Nodes
Node ID   Healthy  Health Description              Update Time
node0001  true     healthy                         `+when+`
node0002  false    probe failed: socket not found  `+when+`
`, r.out)

	r = run(t, "", "plugin", "status", "-verbose", "dev")
	must.Eq(t, 0, r.code)
	must.StrContains(t, r.out, "node0001-aaaa  true     healthy                         "+when+"  ext-node-1        16           rack=R1")

	r = run(t, "", "plugin", "status", "-json", "dev")
	must.Eq(t, 0, r.code)
	var got structs.CSIPlugin
	must.NoError(t, json.Unmarshal([]byte(r.out), &got))
	must.Eq(t, "probe failed: socket not found", got.Nodes["node0002-bbbb"].HealthDescription)
}

func TestPluginStatus_NotFound(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/plugin/csi/nope", 404, `plugin "nope" not found`)
	f.json("GET /v1/plugins", 200, []any{})

	r := run(t, "", "plugin", "status", "nope")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying plugin: plugin \"nope\" not found\n", r.stderr)
}

func testNode() *structs.Node {
	return &structs.Node{
		ID: "node0001-aaaa-bbbb-cccc-000000000001", Name: "worker-1", Datacenter: "dc1", Address: "10.0.0.11",
		Status: structs.NodeStatusReady, StatusUpdatedAt: updated.UnixNano(),
		Attributes: map[string]string{"os": "linux"},
		CSIControllerPlugins: map[string]*structs.CSIInfo{
			"dev": {PluginID: "dev", Provider: "dev.csi.volplane", Healthy: true, HealthDescription: "healthy", UpdateTime: updated,
				ControllerInfo: &structs.CSIControllerInfo{SupportsAttachDetach: true}},
		},
		CSINodePlugins: map[string]*structs.CSIInfo{
			"dev": {PluginID: "dev", Provider: "dev.csi.volplane", Healthy: false, HealthDescription: "probe timed out", UpdateTime: updated,
				NodeInfo: &structs.CSINodeInfo{ID: "ext-node-1"}},
			"nfs": {PluginID: "nfs", Provider: "nfs.csi.k8s.io", Healthy: true, HealthDescription: "healthy", UpdateTime: updated,
				NodeInfo: &structs.CSINodeInfo{ID: "worker-1", MaxVolumes: 8}},
		},
	}
}

func TestNodeStatus_List(t *testing.T) {
	f := newFakeAgent(t)
	n2 := &structs.NodeListStub{ID: "node0002-aaaa-bbbb-cccc-000000000002", Name: "worker-2", Status: structs.NodeStatusDown,
		GCAfter: updated.Add(24 * time.Hour)}
	f.json("GET /v1/nodes", 200, []*structs.NodeListStub{testNode().Stub(), n2})
	when := time.Unix(0, updated.UnixNano()).Format(time.RFC3339)
	gcAfter := updated.Add(24 * time.Hour).Local().Format(time.RFC3339)

	r := run(t, "", "node", "status")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID        Name      Drain  Eligibility  Status  Plugins  Last Heartbeat        GC After
node0001  worker-1  false  eligible     ready   dev,nfs  `+when+`  <none>
node0002  worker-2  false  eligible     down    <none>   <none>                `+gcAfter+`
`, r.out)
	must.Eq(t, request{Method: "GET", Path: "/v1/nodes"}, f.requests()[0])
}

func TestNodeStatus_Detail(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/node/node0001", 404, `node "node0001" not found`)
	f.json("GET /v1/nodes", 200, []*structs.NodeListStub{testNode().Stub()})
	f.json("GET /v1/node/node0001-aaaa-bbbb-cccc-000000000001", 200, testNode())
	when := updated.Local().Format(time.RFC3339)

	// A prefix of the ID is enough.
	r := run(t, "", "node", "status", "node0001")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID                 = node0001-aaaa-bbbb-cccc-000000000001
Name               = worker-1
Datacenter         = dc1
Address            = 10.0.0.11
Status             = ready
Status Description = <none>
Drain              = false
Eligibility        = eligible
Last Heartbeat     = `+time.Unix(0, updated.UnixNano()).Format(time.RFC3339)+`
Status Changed     = `+time.Unix(0, updated.UnixNano()).Format(time.RFC3339)+`
Introduced By      = nothing (registered while the cluster was open)

CSI Controller Plugins
Plugin ID  Provider          Healthy  Health Description  Update Time
dev        dev.csi.volplane  true     healthy             `+when+`

CSI Node Plugins
Plugin ID  Provider          Healthy  External Node ID  Max Volumes  Topology  Health Description  Update Time
dev        dev.csi.volplane  false    ext-node-1        <none>       <none>    probe timed out     `+when+`
nfs        nfs.csi.k8s.io    true     worker-1          8            <none>    healthy             `+when+`
`, r.out)
	must.Eq(t, "", f.requests()[1].Query, must.Sprint("every node is listed, for a name to match"))

	r = run(t, "", "node", "status", "-verbose", "node0001-aaaa-bbbb-cccc-000000000001")
	must.Eq(t, 0, r.code)
	must.StrContains(t, r.out, "Attributes\nos = linux")

	r = run(t, "", "node", "status", "-json", "node0001-aaaa-bbbb-cccc-000000000001")
	must.Eq(t, 0, r.code)
	var got structs.Node
	must.NoError(t, json.Unmarshal([]byte(r.out), &got))
	must.Eq(t, "worker-1", got.Name)
}
