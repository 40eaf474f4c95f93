package command

import (
	"os"
	"regexp"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
)

// aclAgent starts a real server with ACLs on and points the CLI at it, with
// no token in the environment.
func aclAgent(t *testing.T) *server.Server {
	t.Helper()
	s := server.TestServer(t, func(c *server.Config) { c.ACLEnabled = true })
	server.WaitForLeader(t, s)
	t.Setenv("VOLPLANE_ADDR", "http://"+s.HTTPAddr())
	for _, env := range []string{"VOLPLANE_TOKEN", "NOMAD_TOKEN"} {
		t.Setenv(env, "")
		must.NoError(t, os.Unsetenv(env))
	}
	return s
}

// field returns the value of "Key = value" in out.
func field(t *testing.T, out, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` += (.*)$`).FindStringSubmatch(out)
	must.SliceLen(t, 2, m, must.Sprintf("no %q in:\n%s", key, out))
	return m[1]
}

func TestACLCommands(t *testing.T) {
	aclAgent(t)

	r := run(t, "", "acl", "bootstrap")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "management", field(t, r.out, "Type"))
	must.Eq(t, structs.BootstrapTokenName, field(t, r.out, "Name"))
	mgmt := field(t, r.out, "Secret ID")
	again := run(t, "", "acl", "bootstrap")
	must.Eq(t, 1, again.code)
	must.StrContains(t, again.stderr, "ACL bootstrap already done (reset index: ")

	// Without a token nothing is allowed; the token comes from -token,
	// VOLPLANE_TOKEN or NOMAD_TOKEN.
	r = run(t, "", "acl", "token", "list")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error listing ACL tokens: Permission denied\n", r.stderr)
	t.Setenv("NOMAD_TOKEN", mgmt)
	r = run(t, "", "acl", "token", "list")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Bootstrap Token  management  true")

	bad := writeFile(t, "bad.hcl", "namespace \"default\" {\n  capabilities = [\"csi-read-volume\", \"csi-wrte-volume\"]\n}\n")
	r = run(t, "", "acl", "policy", "apply", "readers", bad)
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, `line 2: namespace "default": unknown capability "csi-wrte-volume"`)

	rules := writeFile(t, "readers.hcl", `namespace "default" { policy = "read" }
plugin { policy = "read" }
`)
	r = run(t, "", "acl", "policy", "apply", "-description", "read CSI volumes", "readers", rules)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Successfully wrote \"readers\" ACL policy!\n", r.out)
	r = run(t, "", "acl", "policy", "list")
	must.Eq(t, "Name     Description\nreaders  read CSI volumes\n", r.out)
	r = run(t, "", "acl", "policy", "info", "readers")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Rules\n\nnamespace \"default\" { policy = \"read\" }")

	r = run(t, "", "acl", "token", "create", "-name", "reader", "-policy", "readers", "-ttl", "1h")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	reader, accessor := field(t, r.out, "Secret ID"), field(t, r.out, "Accessor ID")
	must.Eq(t, "readers", field(t, r.out, "Policies"))
	must.NotEq(t, "<none>", field(t, r.out, "Expiry Time"))

	// -token wins over the environment; a token never shows its secret
	// again.
	r = run(t, "", "acl", "token", "self", "-token", reader)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "reader", field(t, r.out, "Name"))
	must.StrNotContains(t, r.out, "Secret ID")
	must.StrNotContains(t, r.out, reader)
	r = run(t, "", "acl", "token", "info", accessor)
	must.StrNotContains(t, r.out, reader)
	r = run(t, "", "acl", "token", "list", "-token", reader)
	must.Eq(t, "Error listing ACL tokens: Permission denied\n", r.stderr)
	r = run(t, "", "volume", "status", "-token", reader)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))

	r = run(t, "", "acl", "token", "update", "-name", "renamed", accessor)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "renamed", field(t, r.out, "Name"))
	must.Eq(t, "readers", field(t, r.out, "Policies"), must.Sprint("what is not given stays"))
	r = run(t, "", "acl", "token", "create", "-policy", "nope")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, `policy "nope" does not exist`)

	r = run(t, "", "acl", "token", "delete", accessor)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	r = run(t, "", "acl", "token", "self", "-token", reader)
	must.Eq(t, "Error reading ACL token: ACL token not found\n", r.stderr)
	r = run(t, "", "acl", "policy", "delete", "readers")
	must.Eq(t, "Successfully deleted \"readers\" ACL policy!\n", r.out)
}

func TestNamespaceCommands(t *testing.T) {
	s := aclAgent(t)
	r := run(t, "", "acl", "bootstrap")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	t.Setenv("VOLPLANE_TOKEN", field(t, r.out, "Secret ID"))

	r = run(t, "", "namespace", "apply", "-description", "team A", "-meta", "owner=storage", "team-a")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Successfully applied namespace \"team-a\"!\n", r.out)
	r = run(t, "", "namespace", "apply", "-meta", "owner=platform", "team-a")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	r = run(t, "", "namespace", "status", "team-a")
	must.Eq(t, "team A", field(t, r.out, "Description"), must.Sprint("what is not given stays"))
	must.Eq(t, "platform", field(t, r.out, "owner"))
	r = run(t, "", "namespace", "list")
	must.Eq(t, "Name     Description\ndefault  Default shared namespace\nteam-a   team A\n", r.out)

	// A namespace that holds a volume is not deleted; the error names it.
	reg := &structs.NodeRegisterRequest{Node: &structs.Node{ID: "node-1", SecretID: "node-secret-1", Name: "n1",
		Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{"dev": {PluginID: "dev", Healthy: true,
			NodeInfo: &structs.CSINodeInfo{ID: "ext-1", MaxVolumes: 10}}}}}
	must.NoError(t, s.RPC("Node.Register", reg, &structs.NodeUpdateResponse{}))
	vol := writeFile(t, "vol.json", `{"ID":"data","PluginID":"dev","RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}]}`)
	r = run(t, "", "volume", "register", "-namespace", "team-a", vol)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	r = run(t, "", "namespace", "delete", "team-a")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, `namespace "team-a" still holds 1 volume (data)`)
	r = run(t, "", "volume", "register", "-namespace", "nowhere", vol)
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, `namespace "nowhere" does not exist`)
	r = run(t, "", "volume", "deregister", "-namespace", "team-a", "data")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	r = run(t, "", "namespace", "delete", "team-a")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Successfully deleted namespace \"team-a\"!\n", r.out)
}
