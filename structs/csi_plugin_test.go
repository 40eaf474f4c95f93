package structs

import (
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func testControllerInfo(healthy bool) *CSIInfo {
	return &CSIInfo{
		PluginID:                 testPluginID,
		AllocID:                  "plugin-alloc",
		Healthy:                  healthy,
		HealthDescription:        "healthy",
		UpdateTime:               time.Unix(1700000000, 0).UTC(),
		Provider:                 "example.com/csi",
		ProviderVersion:          "1.2.3",
		RequiresControllerPlugin: true,
		ControllerInfo:           &CSIControllerInfo{SupportsAttachDetach: true, SupportsListVolumes: true},
	}
}

func testNodeInfo(healthy bool) *CSIInfo {
	return &CSIInfo{
		PluginID:          testPluginID,
		AllocID:           "plugin-alloc",
		Healthy:           healthy,
		HealthDescription: "healthy",
		UpdateTime:        time.Unix(1700000000, 0).UTC(),
		Provider:          "example.com/csi",
		ProviderVersion:   "1.2.3",
		NodeInfo: &CSINodeInfo{
			ID:                      "ext-node",
			MaxVolumes:              8,
			AccessibleTopology:      &CSITopology{Segments: map[string]string{"zone": "a"}},
			RequiresNodeStageVolume: true,
		},
	}
}

// withInfo returns a copy of i changed by f.
func withInfo(i *CSIInfo, f func(*CSIInfo)) *CSIInfo {
	c := i.Copy()
	f(c)
	return c
}

func TestCSIPlugin_SetInstances(t *testing.T) {
	type instances struct{ controller, node *CSIInfo }
	cases := []struct {
		name  string
		steps map[string]instances // applied in sorted node order
		then  func(p *CSIPlugin)   // optional further changes
		want  CSIPluginListStub
	}{
		{
			name: "monolith and node-only instances",
			steps: map[string]instances{
				"n1": {testControllerInfo(true), testNodeInfo(true)},
				"n2": {nil, testNodeInfo(true)},
				"n3": {nil, testNodeInfo(false)},
			},
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3", ControllerRequired: true,
				ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 2, NodesExpected: 3},
		},
		{
			name: "unhealthy controller",
			steps: map[string]instances{
				"n1": {testControllerInfo(false), testNodeInfo(true)},
				"n2": {testControllerInfo(true), nil},
			},
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3", ControllerRequired: true,
				ControllersHealthy: 1, ControllersExpected: 2, NodesHealthy: 1, NodesExpected: 1},
		},
		{
			name: "controller required from a node-only fingerprint",
			steps: map[string]instances{
				"n1": {nil, withInfo(testNodeInfo(true), func(i *CSIInfo) { i.RequiresControllerPlugin = true })},
				"n2": {nil, testNodeInfo(true)},
			},
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3", ControllerRequired: true,
				ControllersHealthy: 0, ControllersExpected: 0, NodesHealthy: 2, NodesExpected: 2},
		},
		{
			name: "no controller needed",
			steps: map[string]instances{
				"n1": {nil, testNodeInfo(true)},
			},
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3",
				NodesHealthy: 1, NodesExpected: 1},
		},
		{
			name: "provider from the first instance that has one, controllers first",
			steps: map[string]instances{
				"a": {nil, withInfo(testNodeInfo(true), func(i *CSIInfo) { i.Provider, i.ProviderVersion = "", "" })},
				"b": {nil, withInfo(testNodeInfo(true), func(i *CSIInfo) { i.Provider, i.ProviderVersion = "node-b", "2" })},
				"c": {withInfo(testControllerInfo(true), func(i *CSIInfo) { i.Provider, i.ProviderVersion = "ctrl-c", "3" }), nil},
			},
			want: CSIPluginListStub{Provider: "ctrl-c", Version: "3", ControllerRequired: true,
				ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 2, NodesExpected: 2},
		},
		{
			name: "provider from nodes in node id order",
			steps: map[string]instances{
				"a": {nil, withInfo(testNodeInfo(true), func(i *CSIInfo) { i.Provider, i.ProviderVersion = "", "" })},
				"c": {nil, withInfo(testNodeInfo(true), func(i *CSIInfo) { i.Provider, i.ProviderVersion = "node-c", "3" })},
				"b": {nil, withInfo(testNodeInfo(true), func(i *CSIInfo) { i.Provider, i.ProviderVersion = "node-b", "2" })},
			},
			want: CSIPluginListStub{Provider: "node-b", Version: "2", NodesHealthy: 3, NodesExpected: 3},
		},
		{
			name: "controller side removed",
			steps: map[string]instances{
				"n1": {testControllerInfo(true), testNodeInfo(true)},
			},
			then: func(p *CSIPlugin) { p.SetInstances("n1", nil, testNodeInfo(true)) },
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3",
				NodesHealthy: 1, NodesExpected: 1},
		},
		{
			name: "node side removed",
			steps: map[string]instances{
				"n1": {testControllerInfo(true), testNodeInfo(true)},
				"n2": {nil, testNodeInfo(true)},
			},
			then: func(p *CSIPlugin) { p.SetInstances("n1", testControllerInfo(true), nil) },
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3", ControllerRequired: true,
				ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 1, NodesExpected: 1},
		},
		{
			name: "an instance turning unhealthy",
			steps: map[string]instances{
				"n1": {nil, testNodeInfo(true)},
				"n2": {nil, testNodeInfo(true)},
			},
			then: func(p *CSIPlugin) { p.SetInstances("n2", nil, testNodeInfo(false)) },
			want: CSIPluginListStub{Provider: "example.com/csi", Version: "1.2.3", NodesHealthy: 1, NodesExpected: 2},
		},
		{
			name: "everything removed",
			steps: map[string]instances{
				"n1": {testControllerInfo(true), testNodeInfo(true)},
			},
			then: func(p *CSIPlugin) { p.SetInstances("n1", nil, nil) },
			want: CSIPluginListStub{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Map iteration differs from run to run: the result must not.
			for range 10 {
				p := NewCSIPlugin(testPluginID, 7)
				for _, id := range sortedKeys(tc.steps) {
					p.SetInstances(id, tc.steps[id].controller, tc.steps[id].node)
				}
				if tc.then != nil {
					tc.then(p)
				}
				want := tc.want
				want.ID, want.CreateIndex, want.ModifyIndex = testPluginID, 7, 7
				must.Eq(t, &want, p.Stub())
				must.Eq(t, want.ControllersExpected+want.NodesExpected == 0, p.IsEmpty())
			}
		})
	}
}

func TestCSIPlugin_SetInstancesDetails(t *testing.T) {
	t.Run("stores copies", func(t *testing.T) {
		p := NewCSIPlugin(testPluginID, 1)
		ctrl, node := testControllerInfo(true), testNodeInfo(true)
		p.SetInstances("n1", ctrl, node)
		ctrl.Healthy = false
		ctrl.ControllerInfo.SupportsAttachDetach = false
		node.NodeInfo.AccessibleTopology.Segments["zone"] = "changed"
		must.True(t, p.Controllers["n1"].Healthy)
		must.True(t, p.Controllers["n1"].ControllerInfo.SupportsAttachDetach)
		must.Eq(t, "a", p.Nodes["n1"].NodeInfo.AccessibleTopology.Segments["zone"])
	})

	t.Run("nil maps", func(t *testing.T) {
		p := &CSIPlugin{ID: testPluginID}
		p.SetInstances("n1", testControllerInfo(true), testNodeInfo(true))
		must.Eq(t, 1, p.ControllersHealthy)
		must.Eq(t, 1, p.NodesHealthy)
		q := &CSIPlugin{ID: testPluginID}
		q.SetInstances("n1", nil, nil)
		must.True(t, q.IsEmpty())
	})

	t.Run("other nodes untouched", func(t *testing.T) {
		p := NewCSIPlugin(testPluginID, 1)
		p.SetInstances("n1", testControllerInfo(true), testNodeInfo(true))
		p.SetInstances("n2", nil, testNodeInfo(true))
		p.SetInstances("n2", nil, nil)
		must.MapContainsKeys(t, p.Controllers, []string{"n1"})
		must.MapContainsKeys(t, p.Nodes, []string{"n1"})
		must.MapLen(t, 1, p.Nodes)
	})

	t.Run("supports attach detach", func(t *testing.T) {
		p := NewCSIPlugin(testPluginID, 1)
		must.False(t, p.SupportsAttachDetach())
		p.SetInstances("n1", nil, testNodeInfo(true))
		must.False(t, p.SupportsAttachDetach())
		p.SetInstances("n2", withInfo(testControllerInfo(true), func(i *CSIInfo) {
			i.ControllerInfo.SupportsAttachDetach = false
		}), nil)
		must.False(t, p.SupportsAttachDetach())
		p.SetInstances("n3", testControllerInfo(true), nil)
		must.True(t, p.SupportsAttachDetach())
	})
}

func TestCSIPlugin_CopyIsDeep(t *testing.T) {
	p := NewCSIPlugin(testPluginID, 1)
	p.SetInstances("n1", testControllerInfo(true), testNodeInfo(true))
	snapshot := p.Copy()
	must.Eq(t, snapshot, p)

	c := p.Copy()
	c.Controllers["n1"].Healthy = false
	c.Controllers["n1"].ControllerInfo.SupportsClone = true
	c.Nodes["n1"].NodeInfo.ID = "changed"
	c.Nodes["n1"].NodeInfo.AccessibleTopology.Segments["zone"] = "changed"
	c.Nodes["n2"] = testNodeInfo(true)
	delete(c.Controllers, "n1")
	must.Eq(t, snapshot, p)

	var nilPlugin *CSIPlugin
	must.Nil(t, nilPlugin.Copy())
	var nilInfo *CSIInfo
	must.Nil(t, nilInfo.Copy())
	var nilNodeInfo *CSINodeInfo
	must.Nil(t, nilNodeInfo.Copy())
}

func TestCSIInfo_Equal(t *testing.T) {
	cases := []struct {
		name  string
		a, b  *CSIInfo
		equal bool
	}{
		{name: "same", a: testNodeInfo(true), b: testNodeInfo(true), equal: true},
		{name: "update time ignored", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.UpdateTime = time.Now() }), equal: true},
		{name: "controller update time ignored", a: testControllerInfo(true),
			b: withInfo(testControllerInfo(true), func(i *CSIInfo) { i.UpdateTime = time.Time{} }), equal: true},
		{name: "health", a: testNodeInfo(true), b: testNodeInfo(false)},
		{name: "health description", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.HealthDescription = "slow" })},
		{name: "provider version", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.ProviderVersion = "9" })},
		{name: "requires controller", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.RequiresControllerPlugin = true })},
		{name: "controller capability", a: testControllerInfo(true),
			b: withInfo(testControllerInfo(true), func(i *CSIInfo) { i.ControllerInfo.SupportsGet = true })},
		{name: "controller info removed", a: testControllerInfo(true),
			b: withInfo(testControllerInfo(true), func(i *CSIInfo) { i.ControllerInfo = nil })},
		{name: "node info removed", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.NodeInfo = nil })},
		{name: "node external id", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.NodeInfo.ID = "other" })},
		{name: "node max volumes", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.NodeInfo.MaxVolumes = 9 })},
		{name: "node topology", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.NodeInfo.AccessibleTopology.Segments["zone"] = "b" })},
		{name: "node topology removed", a: testNodeInfo(true),
			b: withInfo(testNodeInfo(true), func(i *CSIInfo) { i.NodeInfo.AccessibleTopology = nil })},
		{name: "nil and nil", equal: true},
		{name: "nil and value", a: testNodeInfo(true)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.equal, tc.a.Equal(tc.b))
			must.Eq(t, tc.equal, tc.b.Equal(tc.a))
		})
	}
}

func TestCSIInfo_Validate(t *testing.T) {
	must.NoError(t, testNodeInfo(true).Validate())
	must.NoError(t, testControllerInfo(true).Validate())

	err := (&CSIInfo{PluginID: "bad id", NodeInfo: &CSINodeInfo{MaxVolumes: -1}}).Validate()
	must.Eq(t, ErrCodeInvalid, CodeOf(err))
	must.Eq(t, `plugin "bad id" fingerprint: plugin id "bad id" must not contain spaces or control characters; `+
		`max volumes must not be negative`, MessageOf(err))

	err = (&CSIInfo{PluginID: "p"}).Validate()
	must.Eq(t, `plugin "p" fingerprint: fingerprint has neither controller nor node info`, MessageOf(err))
}

func testNode() *Node {
	return &Node{
		ID:                   "node-1",
		Name:                 "worker-1",
		SecretID:             "node-secret",
		Datacenter:           "dc1",
		Status:               NodeStatusReady,
		Attributes:           map[string]string{"os": "linux"},
		CSIControllerPlugins: map[string]*CSIInfo{testPluginID: testControllerInfo(true)},
		CSINodePlugins:       map[string]*CSIInfo{testPluginID: testNodeInfo(true)},
	}
}

func TestNode_Validate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(n *Node)
		msg    string // "" when valid
	}{
		{name: "valid", mutate: func(n *Node) {}},
		{name: "no plugins", mutate: func(n *Node) { n.CSIControllerPlugins, n.CSINodePlugins = nil, nil }},
		{name: "status unset", mutate: func(n *Node) { n.Status = "" }},
		{name: "missing id", mutate: func(n *Node) { n.ID = "" }, msg: "node: missing node id"},
		{name: "bad id", mutate: func(n *Node) { n.ID = "a/b" }, msg: `node id "a/b" must not contain`},
		{name: "missing secret", mutate: func(n *Node) { n.SecretID = "" }, msg: "missing node secret"},
		{name: "missing name", mutate: func(n *Node) { n.Name = "" }, msg: "missing node name"},
		{name: "long name", mutate: func(n *Node) { n.Name = strings.Repeat("x", MaxNameLength+1) },
			msg: "node name is longer than 256 characters"},
		{name: "unknown status", mutate: func(n *Node) { n.Status = "sleepy" }, msg: `unknown node status "sleepy"`},
		{name: "controller fingerprint key mismatch", mutate: func(n *Node) {
			n.CSIControllerPlugins = map[string]*CSIInfo{"other": testControllerInfo(true)}
		}, msg: `plugin "other": fingerprint names plugin "plug-1"`},
		{name: "node fingerprint key mismatch", mutate: func(n *Node) {
			n.CSINodePlugins = map[string]*CSIInfo{"other": testNodeInfo(true)}
		}, msg: `plugin "other": fingerprint names plugin "plug-1"`},
		{name: "nil fingerprint", mutate: func(n *Node) { n.CSINodePlugins[testPluginID] = nil },
			msg: `plugin "plug-1": empty fingerprint`},
		{name: "controller entry without controller info", mutate: func(n *Node) {
			n.CSIControllerPlugins[testPluginID] = testNodeInfo(true)
		}, msg: `plugin "plug-1": controller fingerprint without controller info`},
		{name: "node entry without node info", mutate: func(n *Node) {
			n.CSINodePlugins[testPluginID] = testControllerInfo(true)
		}, msg: `plugin "plug-1": node fingerprint without node info`},
		{name: "negative max volumes", mutate: func(n *Node) { n.CSINodePlugins[testPluginID].NodeInfo.MaxVolumes = -1 },
			msg: `plugin "plug-1" fingerprint: max volumes must not be negative`},
		{name: "bad plugin id", mutate: func(n *Node) {
			n.CSINodePlugins = map[string]*CSIInfo{"p q": withInfo(testNodeInfo(true), func(i *CSIInfo) { i.PluginID = "p q" })}
		}, msg: `plugin id "p q" must not contain spaces`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := testNode()
			tc.mutate(n)
			err := n.Validate()
			if tc.msg == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			must.StrContains(t, err.Error(), tc.msg)
			if n.ID != "" {
				must.StrContains(t, err.Error(), `node "`+n.ID+`"`)
			}
		})
	}

	t.Run("all problems in one error, in a stable order", func(t *testing.T) {
		n := &Node{
			ID:     "node-1",
			Status: "bogus",
			CSIControllerPlugins: map[string]*CSIInfo{
				"c2": nil,
				"c1": testNodeInfo(true),
			},
			CSINodePlugins: map[string]*CSIInfo{
				"z": testNodeInfo(true),
				"a": nil,
				"m": withInfo(testNodeInfo(true), func(i *CSIInfo) { i.PluginID = "m"; i.NodeInfo = nil }),
			},
		}
		want := `node "node-1": missing node secret; missing node name; unknown node status "bogus"; ` +
			`plugin "c1": fingerprint names plugin "plug-1"; plugin "c2": empty fingerprint; ` +
			`plugin "a": empty fingerprint; plugin "m": node fingerprint without node info; ` +
			`plugin "z": fingerprint names plugin "plug-1"`
		for range 20 {
			must.Eq(t, want, MessageOf(n.Validate()))
		}
	})
}

func TestPluginsEqual(t *testing.T) {
	base := func() map[string]*CSIInfo {
		return map[string]*CSIInfo{"a": testNodeInfo(true), "b": testNodeInfo(false)}
	}
	cases := []struct {
		name  string
		a, b  map[string]*CSIInfo
		equal bool
	}{
		{name: "same", a: base(), b: base(), equal: true},
		{name: "update time only", a: base(), b: func() map[string]*CSIInfo {
			m := base()
			m["a"].UpdateTime = time.Now()
			return m
		}(), equal: true},
		{name: "health changed", a: base(), b: func() map[string]*CSIInfo {
			m := base()
			m["b"].Healthy = true
			return m
		}()},
		{name: "one more", a: base(), b: func() map[string]*CSIInfo {
			m := base()
			m["c"] = testNodeInfo(true)
			return m
		}()},
		{name: "nil and empty", a: nil, b: map[string]*CSIInfo{}, equal: true},
		{name: "nil and one", a: nil, b: map[string]*CSIInfo{"a": testNodeInfo(true)}},
		{name: "different keys, nil value", a: map[string]*CSIInfo{"a": nil}, b: map[string]*CSIInfo{"b": testNodeInfo(true)}},
		{name: "different keys, both nil values", a: map[string]*CSIInfo{"a": nil}, b: map[string]*CSIInfo{"b": nil}},
		{name: "same key, nil values", a: map[string]*CSIInfo{"a": nil}, b: map[string]*CSIInfo{"a": nil}, equal: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			must.Eq(t, tc.equal, PluginsEqual(tc.a, tc.b))
			must.Eq(t, tc.equal, PluginsEqual(tc.b, tc.a))
		})
	}
}

func TestNode_CopyAndStub(t *testing.T) {
	n := testNode()
	n.CSINodePlugins["another"] = withInfo(testNodeInfo(true), func(i *CSIInfo) { i.PluginID = "another" })
	snapshot := n.Copy()
	must.Eq(t, snapshot, n)

	c := n.Copy()
	c.Attributes["os"] = "changed"
	c.CSINodePlugins[testPluginID].NodeInfo.AccessibleTopology.Segments["zone"] = "changed"
	c.CSIControllerPlugins[testPluginID].ControllerInfo.SupportsGet = true
	delete(c.CSINodePlugins, "another")
	must.Eq(t, snapshot, n)

	bare := &Node{ID: "x"}
	must.Eq(t, bare, bare.Copy())
	var nilNode *Node
	must.Nil(t, nilNode.Copy())

	s := n.Stub()
	must.Eq(t, []string{"another", testPluginID}, s.CSINodePlugins)
	must.Eq(t, []string{testPluginID}, s.CSIControllerPlugins)
	must.Eq(t, n.Name, s.Name)
}

func TestPluginAndNodeEnums(t *testing.T) {
	for _, typ := range []CSIPluginType{CSIPluginTypeNode, CSIPluginTypeController, CSIPluginTypeMonolith} {
		must.True(t, typ.Valid())
	}
	must.False(t, CSIPluginType("").Valid())
	for _, s := range []string{NodeStatusInit, NodeStatusReady, NodeStatusDown} {
		must.True(t, ValidNodeStatus(s))
	}
	must.False(t, ValidNodeStatus("gone"))
}
