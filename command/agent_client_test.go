package command

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/client"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

func TestAgentClient_Flags(t *testing.T) {
	c := &AgentCommand{UI: cli.NewMockUi()}
	cfg, dev, err := c.parse([]string{
		"-client", "-data-dir", "/var/lib/volplane", "-servers", "10.0.0.5, 10.0.0.6:5647",
		"-csi-plugin", "ebs=unix:///run/csi/ebs.sock,type=node",
		"-csi-plugin", "dev=unix:///run/csi/dev.sock",
	})
	must.NoError(t, err)
	must.False(t, dev)
	must.True(t, cfg.Client.Enabled)
	must.False(t, cfg.Server.Enabled)

	cc, err := clientConfig(cfg, cfg.DataDir, nil, nil, nil)
	must.NoError(t, err)
	must.Eq(t, []string{"10.0.0.5:4647", "10.0.0.6:5647"}, cc.Servers, must.Sprint("an address without a port gets the RPC port"))
	must.Eq(t, "/var/lib/volplane/client", cc.DataDir)
	must.Eq(t, []client.PluginConfig{
		{ID: "ebs", Endpoint: "unix:///run/csi/ebs.sock", Type: structs.CSIPluginTypeNode},
		{ID: "dev", Endpoint: "unix:///run/csi/dev.sock"},
	}, cc.Plugins)
}

func TestAgentClient_ConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "client.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`
data_dir = "/var/lib/volplane"
client {
  enabled = true
  servers = ["10.0.0.5"]
  csi_plugin {
    id       = "ebs"
    endpoint = "unix:///run/csi/ebs.sock"
    type     = "controller"
  }
}
`), 0o600))
	c := &AgentCommand{UI: cli.NewMockUi()}
	cfg, _, err := c.parse([]string{"-config", file})
	must.NoError(t, err)
	cc, err := clientConfig(cfg, cfg.DataDir, nil, nil, nil)
	must.NoError(t, err)
	must.Eq(t, []string{"10.0.0.5:4647"}, cc.Servers)
	must.Eq(t, []client.PluginConfig{{ID: "ebs", Endpoint: "unix:///run/csi/ebs.sock", Type: structs.CSIPluginTypeController}}, cc.Plugins)

	// Flags override the file.
	cfg, _, err = c.parse([]string{"-config", file, "-servers", "10.0.0.9:1", "-csi-plugin", "x=unix:///x.sock"})
	must.NoError(t, err)
	must.Eq(t, []string{"10.0.0.9:1"}, cfg.Client.Servers)
	must.SliceLen(t, 1, cfg.Client.CSIPlugins)
	must.Eq(t, "x", cfg.Client.CSIPlugins[0].ID)

	for src, want := range map[string]string{
		`client {
		   csi_plugin {
		     id = "a"
		   }
		 }`: `"endpoint" is required`,
		`client {
		   csi_plugin {
		     id = "a"
		     endpoint = "unix:///a.sock"
		     type = "sidecar"
		   }
		 }`: `unknown type "sidecar"`,
		`client {
		   csi_plugin {
		     id = "a"
		     endpoint = "unix:///a.sock"
		   }
		   csi_plugin {
		     id = "a"
		     endpoint = "unix:///b.sock"
		   }
		 }`: `client.csi_plugin "a" is configured twice`,
		`client { servers = ["[::1"] }`: `client.servers address "[::1"`,
	} {
		_, err := ParseAgentConfig("client.hcl", []byte(src))
		must.ErrorContains(t, err, want)
	}
}

func TestAgentClient_StartupErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-client", "-data-dir", t.TempDir(), "-csi-plugin", "dev=unix:///x.sock,type=sidecar"},
			`-csi-plugin: csi plugin "dev=unix:///x.sock,type=sidecar": unknown type "sidecar"`},
		{[]string{"-client", "-data-dir", t.TempDir(), "-csi-plugin", "dev"},
			`-csi-plugin: csi plugin "dev": want ID=unix:///path/csi.sock`},
		{[]string{"-client", "-data-dir", t.TempDir()}, "a client needs the addresses of servers"},
		{[]string{"-client", "-servers", "127.0.0.1:1"}, "a client needs a data_dir"},
	} {
		ui := cli.NewMockUi()
		c := &AgentCommand{UI: ui, ShutdownCh: make(chan struct{})}
		must.Eq(t, 1, c.Run(tc.args), must.Sprintf("args %q", tc.args))
		must.StrContains(t, ui.ErrorWriter.String(), tc.want)
	}
}

var httpAddrRe = regexp.MustCompile(`HTTP (http://[0-9.:]+)`)

// `volplane agent -dev` runs a server, a client and the development plugin
// "dev": the plugin is healthy, and the example volume registers.
func TestAgentClient_Dev(t *testing.T) {
	ui := cli.NewMockUi()
	stop := make(chan struct{})
	c := &AgentCommand{UI: ui, ShutdownCh: stop}
	done := make(chan int, 1)
	go func() { done <- c.Run([]string{"-dev", "-http-port", "0", "-rpc-port", "0", "-log-level", "error"}) }()
	defer func() {
		close(stop)
		must.Eq(t, 0, <-done)
	}()

	var addr string
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		m := httpAddrRe.FindStringSubmatch(ui.OutputWriter.String())
		if m == nil {
			return false, fmt.Errorf("no HTTP address in %q (errors %q)", ui.OutputWriter.String(), ui.ErrorWriter.String())
		}
		addr = m[1]
		return true, nil
	})
	apiClient, err := api.NewClient(api.Config{Address: addr})
	must.NoError(t, err)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		p, _, err := apiClient.Plugins().Info("dev", nil)
		if err != nil {
			return false, err
		}
		if p.ControllersHealthy != 1 || p.NodesHealthy != 1 {
			return false, fmt.Errorf("plugin dev: %d/%d controllers and %d/%d nodes healthy",
				p.ControllersHealthy, p.ControllersExpected, p.NodesHealthy, p.NodesExpected)
		}
		return true, nil
	})
	must.StrContains(t, ui.OutputWriter.String(), "volplane client started")

	t.Setenv("VOLPLANE_ADDR", addr)
	r := run(t, "", "volume", "register", filepath.Join("..", "examples", "volume.hcl"))
	must.Eq(t, 0, r.code, must.Sprintf("stdout %q stderr %q", r.out, r.stderr))
}
