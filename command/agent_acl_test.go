package command

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"
)

func TestAgentConfig_ACL(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "server.hcl")
	must.NoError(t, os.WriteFile(file, []byte(`
server { enabled = true }
acl {
  enabled    = true
  token_ttl  = "45s"
  policy_ttl = "2m"
}
`), 0o600))
	c := &AgentCommand{UI: cli.NewMockUi()}
	cfg, _, err := c.parse([]string{"-config", file})
	must.NoError(t, err)
	srv, cleanup, err := c.serverConfig(cfg, false)
	must.NoError(t, err)
	defer cleanup()
	must.True(t, srv.ACLEnabled)
	must.Eq(t, 45*time.Second, srv.ACLTokenTTL)
	must.Eq(t, 2*time.Minute, srv.ACLPolicyTTL)

	// The flag turns ACLs on without a file, and off over one.
	cfg, _, err = c.parse([]string{"-dev", "-acl-enabled"})
	must.NoError(t, err)
	srv, cleanup, err = c.serverConfig(cfg, true)
	must.NoError(t, err)
	defer cleanup()
	must.True(t, srv.ACLEnabled)
	cfg, _, err = c.parse([]string{"-config", file, "-acl-enabled=false"})
	must.NoError(t, err)
	srv, _, err = c.serverConfig(cfg, false)
	must.NoError(t, err)
	must.False(t, srv.ACLEnabled)

	_, err = ParseAgentConfig("bad.hcl", []byte(`acl { token_ttl = "-1s" }`))
	must.ErrorContains(t, err, `acl.token_ttl "-1s"`)
	_, err = ParseAgentConfig("bad.hcl", []byte(`acl { enable = true }`))
	must.ErrorContains(t, err, "bad.hcl:1")
}
