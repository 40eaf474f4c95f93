package csimanager

import (
	"errors"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

func TestPluginHealth_Hysteresis(t *testing.T) {
	h := newPluginHealth("dev", "", 3, time.Minute)
	now := time.Unix(1000, 0)
	tick := func() time.Time { now = now.Add(time.Second); return now }
	ctrl, node := mock.ControllerInfo("dev", true), mock.NodeInfo("dev", "n1", true)

	c, n := h.report()
	must.Nil(t, c)
	must.Nil(t, n, must.Sprint("nothing is reported before the first fingerprint"))

	h.observe(tick(), ctrl, node, nil, false)
	c, n = h.report()
	must.True(t, c.Healthy && n.Healthy)

	probeErr := errors.New("Probe: rpc error: code = Internal desc = disk on fire")
	for i := 1; i < 3; i++ {
		h.observe(tick(), nil, nil, probeErr, false)
		c, n = h.report()
		must.True(t, c.Healthy && n.Healthy, must.Sprintf("still healthy after %d failures", i))
		must.True(t, h.isHealthy())
	}
	h.observe(tick(), nil, nil, probeErr, false)
	c, n = h.report()
	must.False(t, c.Healthy)
	must.False(t, n.Healthy)
	must.Eq(t, probeErr.Error(), n.HealthDescription)
	must.NotNil(t, n.NodeInfo, must.Sprint("an unhealthy instance keeps its last capabilities"))
	must.False(t, h.isHealthy())

	// One success makes it healthy again.
	h.observe(tick(), ctrl, node, nil, false)
	_, n = h.report()
	must.True(t, n.Healthy)
	must.Eq(t, 0, h.failures)

	// A plugin answering ready=false counts as a failure too.
	notReady := node.Copy()
	notReady.Healthy, notReady.HealthDescription = false, "plugin is not ready"
	for range 2 {
		h.observe(tick(), nil, notReady, nil, false)
	}
	_, n = h.report()
	must.True(t, n.Healthy)
	h.observe(tick(), nil, notReady, nil, false)
	_, n = h.report()
	must.False(t, n.Healthy)
	must.Eq(t, "plugin is not ready", n.HealthDescription)
}

func TestPluginHealth_NeverHealthyIsUnhealthyAtOnce(t *testing.T) {
	cases := []struct {
		typ                      structs.CSIPluginType
		wantController, wantNode bool
	}{
		{"", false, true},
		{structs.CSIPluginTypeNode, false, true},
		{structs.CSIPluginTypeController, true, false},
		{structs.CSIPluginTypeMonolith, true, true},
	}
	for _, tc := range cases {
		h := newPluginHealth("dev", tc.typ, 3, time.Minute)
		h.observe(time.Unix(1, 0), nil, nil, errors.New("not a CSI plugin: unknown service csi.v1.Identity"), false)
		c, n := h.report()
		must.Eq(t, tc.wantController, c != nil, must.Sprintf("type %q", tc.typ))
		must.Eq(t, tc.wantNode, n != nil, must.Sprintf("type %q", tc.typ))
		for _, i := range []*structs.CSIInfo{c, n} {
			if i != nil {
				must.False(t, i.Healthy)
				must.Eq(t, "not a CSI plugin: unknown service csi.v1.Identity", i.HealthDescription)
				must.NoError(t, i.Validate(), must.Sprint("a placeholder passes the servers' checks"))
			}
		}
	}

	// A plugin that answers but is not ready shows what it answered.
	h := newPluginHealth("dev", "", 3, time.Minute)
	notReady := mock.NodeInfo("dev", "n1", false)
	h.observe(time.Unix(1, 0), nil, notReady, nil, false)
	_, n := h.report()
	must.False(t, n.Healthy)
	must.Eq(t, notReady.NodeInfo.ID, n.NodeInfo.ID)
}

func TestPluginHealth_GoneSocket(t *testing.T) {
	h := newPluginHealth("dev", "", 3, 10*time.Second)
	start := time.Unix(1000, 0)
	node := mock.NodeInfo("dev", "n1", true)
	h.observe(start, nil, node, nil, false)

	gone := errors.New("plugin socket /x/csi.sock: no such file")
	for i := 1; i <= 10; i++ {
		h.observe(start.Add(time.Duration(i)*time.Second), nil, nil, gone, true)
		_, n := h.report()
		must.NotNil(t, n, must.Sprintf("still reported %ds after the socket went", i-1))
		if i >= 3 {
			must.False(t, n.Healthy)
			must.Eq(t, gone.Error(), n.HealthDescription)
		}
	}
	h.observe(start.Add(11*time.Second), nil, nil, gone, true)
	c, n := h.report()
	must.Nil(t, c)
	must.Nil(t, n, must.Sprint("removed once missing for the TTL"))

	// The socket comes back: the instance is back, healthy.
	h.observe(start.Add(12*time.Second), nil, node, nil, false)
	_, n = h.report()
	must.NotNil(t, n)
	must.True(t, n.Healthy)

	// A missing socket that reappears within the TTL restarts the clock.
	h.observe(start.Add(13*time.Second), nil, nil, gone, true)
	h.observe(start.Add(20*time.Second), nil, node, nil, false)
	h.observe(start.Add(22*time.Second), nil, nil, gone, true)
	h.observe(start.Add(30*time.Second), nil, nil, gone, true)
	_, n = h.report()
	must.NotNil(t, n)
}
