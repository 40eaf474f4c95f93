package client

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestParsePluginFlag(t *testing.T) {
	good := []struct {
		in   string
		want PluginConfig
	}{
		{"dev=unix:///run/csi/dev.sock", PluginConfig{ID: "dev", Endpoint: "unix:///run/csi/dev.sock"}},
		{"ebs=unix:///run/ebs.sock,type=node", PluginConfig{ID: "ebs", Endpoint: "unix:///run/ebs.sock", Type: structs.CSIPluginTypeNode}},
		{"ebs=unix:///run/ebs.sock,type=controller", PluginConfig{ID: "ebs", Endpoint: "unix:///run/ebs.sock", Type: structs.CSIPluginTypeController}},
		{"ebs=unix:///run/ebs.sock, type = monolith", PluginConfig{ID: "ebs", Endpoint: "unix:///run/ebs.sock", Type: structs.CSIPluginTypeMonolith}},
		{"bare=/run/bare.sock", PluginConfig{ID: "bare", Endpoint: "/run/bare.sock"}},
	}
	for _, tc := range good {
		got, err := ParsePluginFlag(tc.in)
		must.NoError(t, err, must.Sprintf("flag %q", tc.in))
		must.Eq(t, tc.want, got)
	}

	bad := []struct {
		in, want string
	}{
		{"dev", "want ID=unix:///path/csi.sock"},
		{"=unix:///run/dev.sock", "missing plugin id"},
		{"a/b=unix:///run/dev.sock", "must not contain"},
		{"dev=", "missing endpoint"},
		{"dev=unix://relative.sock", "want unix:///absolute/path.sock"},
		{"dev=tcp://127.0.0.1:9000", "only unix:// sockets are supported"},
		{"dev=unix:///run/dev.sock,type=sidecar", `unknown type "sidecar"`},
		{"dev=unix:///run/dev.sock,mode=node", `unknown option "mode"`},
		{"dev=unix:///run/dev.sock,node", `option "node" is not key=value`},
		{"dev=unix:///run/dev.sock,type=node,type=node", "type is given twice"},
	}
	for _, tc := range bad {
		_, err := ParsePluginFlag(tc.in)
		must.ErrorContains(t, err, tc.want, must.Sprintf("flag %q", tc.in))
		must.ErrorContains(t, err, tc.in, must.Sprint("the error quotes the flag"))
	}
}

func TestConfig_Normalize(t *testing.T) {
	cfg := &Config{DataDir: t.TempDir(), Servers: []string{"127.0.0.1:4647"}}
	must.NoError(t, cfg.normalize())
	must.Eq(t, DefaultFingerprintInterval, cfg.FingerprintInterval)
	must.Eq(t, DefaultUnhealthyThreshold, cfg.UnhealthyThreshold)
	must.Eq(t, DefaultPluginGoneTTL, cfg.PluginGoneTTL)
	must.Eq(t, DefaultRPCTimeout, cfg.RPCTimeout)
	must.Eq(t, DefaultDatacenter, cfg.Datacenter)
	must.NotEq(t, "", cfg.NodeName)

	cfg = &Config{Plugins: []PluginConfig{
		{ID: "a", Endpoint: "unix:///a.sock"},
		{ID: "a", Endpoint: "unix:///b.sock"},
		{ID: "c", Endpoint: "c.sock"},
	}}
	err := cfg.normalize()
	must.ErrorContains(t, err, "needs a data dir")
	must.ErrorContains(t, err, "at least one server")
	must.ErrorContains(t, err, `csi plugin "a" is configured twice`)
	must.ErrorContains(t, err, `csi plugin "c": endpoint "c.sock"`)
}
