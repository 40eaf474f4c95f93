package command

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"
)

// enable_debug is off by default, on with the file's setting and in -dev,
// as Nomad's.
func TestAgentConfig_EnableDebug(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.hcl")
	must.NoError(t, os.WriteFile(plain, []byte("server { enabled = true }\n"), 0o600))
	debug := filepath.Join(dir, "debug.hcl")
	must.NoError(t, os.WriteFile(debug, []byte("enable_debug = true\nserver { enabled = true }\n"), 0o600))
	c := &AgentCommand{UI: cli.NewMockUi()}

	for _, tc := range []struct {
		args []string
		dev  bool
		want bool
	}{
		{[]string{"-config", plain}, false, false},
		{[]string{"-config", debug}, false, true},
		{[]string{"-dev"}, true, true},
	} {
		cfg, _, err := c.parse(tc.args)
		must.NoError(t, err)
		srv, cleanup, err := c.serverConfig(cfg, tc.dev)
		must.NoError(t, err)
		must.Eq(t, tc.want, srv.EnableDebug, must.Sprint(tc.args))
		cleanup()
	}
}
