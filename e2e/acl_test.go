package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// nomadClient is Nomad's official Go client, pointed at s with token.
func nomadClient(t *testing.T, s Server, token string) *nomad.Client {
	t.Helper()
	c, err := nomad.NewClient(&nomad.Config{Address: "http://" + strings.TrimPrefix(s.HTTPAddr(), "http://"), SecretID: token})
	must.NoError(t, err)
	return c
}

// kvField reads "Key = value" from the CLI's output.
func kvField(t *testing.T, res CLIResult, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + ` += (.*)$`).FindStringSubmatch(res.Stdout)
	must.SliceLen(t, 2, m, must.Sprintf("no %q in %s", key, res))
	return m[1]
}

// mustDeniedCLI asserts a CLI run refused with Nomad's 403 text.
func mustDeniedCLI(t *testing.T, res CLIResult) {
	t.Helper()
	must.Eq(t, 1, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stderr, "Permission denied", must.Sprint(res))
}

// statusOf is the HTTP status of an error of Nomad's client.
func statusOf(err error) int {
	var ue nomad.UnexpectedResponseError
	var uep *nomad.UnexpectedResponseError
	switch {
	case errors.As(err, &ue):
		return ue.StatusCode()
	case errors.As(err, &uep):
		return uep.StatusCode()
	}
	return 0
}

// TestE2E_ACL runs 3 servers with -acl-enabled and 2 client agents as
// processes. Nomad's Go client bootstraps the cluster; a read-only CSI
// policy applied with the CLI gives a token (made with Nomad's client) that
// lists and reads volumes and can register, deregister, detach, run and
// stop nothing; a token with csi-mount-volume and submit-job runs a job
// whose allocations claim volumes; the client agents, with their node
// secrets only, run it. The CLI and Nomad's client see the same tokens and
// policies.
func TestE2E_ACL(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: clientServerConfig, ExtraArgs: []string{"-acl-enabled"}})
	leader := WaitForLeader(t, c)
	f := Followers(c, leader)[0]

	// Before the bootstrap nothing is allowed, reads included.
	mustDeniedCLI(t, c.CLI(t, f, "volume status"))
	boot, _, err := nomadClient(t, f, "").ACLTokens().Bootstrap(nil)
	must.NoError(t, err)
	must.Eq(t, "management", boot.Type)
	again := c.CLI(t, leader, "acl bootstrap")
	must.Eq(t, 1, again.Code)
	must.StrContains(t, again.Stderr, "ACL bootstrap already done (reset index: ", must.Sprint(again))
	c.SetToken(boot.SecretID)

	// The clients register and heartbeat with their node secrets alone.
	e, s := newClientEnv(t, c)
	e.createVolumes(t, s, 3)

	rules := writeFile(t, t.TempDir(), "csi-read.hcl", `namespace "default" {
  capabilities = ["csi-list-volume", "csi-read-volume", "list-jobs", "read-job"]
}
plugin { policy = "read" }
`)
	res := e.cli(t, s, "acl policy apply", "-description", "read CSI volumes", "csi-read", rules)
	must.Zero(t, res.Code, must.Sprint(res))
	mgmt := nomadClient(t, s, boot.SecretID)
	pol, _, err := mgmt.ACLPolicies().Info("csi-read", nil)
	must.NoError(t, err)
	must.Eq(t, "read CSI volumes", pol.Description)
	reader, _, err := mgmt.ACLTokens().Create(&nomad.ACLToken{Name: "reader", Type: "client", Policies: []string{"csi-read"}}, nil)
	must.NoError(t, err)
	res = e.cli(t, s, "acl token list")
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, reader.AccessorID)
	must.StrNotContains(t, res.Stdout, reader.SecretID)
	res = e.cli(t, s, "acl token self", "-token="+reader.SecretID)
	must.Eq(t, "reader", kvField(t, res, "Name"))

	// The reader lists and reads volumes...
	asReader := "-token=" + reader.SecretID
	res = e.cli(t, s, "volume status", asReader)
	must.Zero(t, res.Code, must.Sprint(res))
	for i := range 3 {
		must.StrContains(t, res.Stdout, volID(i))
	}
	res = e.cli(t, s, "volume status", asReader, volID(0))
	must.Zero(t, res.Code, must.Sprint(res))
	rc := nomadClient(t, s, reader.SecretID)
	vols, _, err := rc.CSIVolumes().List(nil)
	must.NoError(t, err)
	must.Len(t, 3, vols)

	// ...and changes nothing.
	mustDeniedCLI(t, e.cli(t, s, "volume register", asReader, e.writeSpec(t, "vol-x", "")))
	mustDeniedCLI(t, e.cli(t, s, "volume create", asReader, e.writeSpec(t, "vol-y", `capacity_min = "1MiB"`)))
	mustDeniedCLI(t, e.cli(t, s, "volume deregister", asReader, volID(0)))
	mustDeniedCLI(t, e.cli(t, s, "volume deregister", asReader, "-force", volID(0)))
	mustDeniedCLI(t, e.cli(t, s, "volume detach", asReader, volID(0), e.nodeIDs["c1"]))
	mustDeniedCLI(t, e.cli(t, s, "job run", asReader, "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl")))
	_, err = rc.CSIVolumes().Register(&nomad.CSIVolume{ID: "vol-z", PluginID: pluginID}, nil)
	must.Eq(t, http.StatusForbidden, statusOf(err), must.Sprint(err))
	_, _, err = rc.Nodes().List(nil)
	must.Eq(t, http.StatusForbidden, statusOf(err), must.Sprint(err))

	// A token that may mount volumes and submit jobs runs the job; the
	// clients claim its volumes with their node secrets.
	mount := writeFile(t, t.TempDir(), "csi-mount.hcl", `namespace "default" {
  capabilities = ["submit-job", "csi-mount-volume", "read-job", "list-jobs"]
}
plugin { policy = "read" }
`)
	res = e.cli(t, s, "acl policy apply", "csi-mount", mount)
	must.Zero(t, res.Code, must.Sprint(res))
	res = e.cli(t, s, "acl token create", "-name", "deployer", "-policy", "csi-mount")
	must.Zero(t, res.Code, must.Sprint(res))
	deployer := kvField(t, res, "Secret ID")
	res = e.cli(t, s, "job run", "-token="+deployer, "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	allocs := e.waitJobAllocs(t, s, "web", structs.AllocClientStatusRunning)
	for i := range 3 {
		a := allocs[fmt.Sprintf("web.app[%d]", i)]
		must.NotNil(t, a)
		must.NotNil(t, e.volume(t, s, volID(i)).WriteClaims[a.ID], must.Sprintf("%s claims %s", a.Name, volID(i)))
	}
	// Without submit-job, the job is not stopped; with it, it is, and its
	// volumes are released.
	mustDeniedCLI(t, e.cli(t, s, "job stop", asReader, "web"))
	res = e.cli(t, s, "job stop", "-token="+deployer, "web")
	must.Zero(t, res.Code, must.Sprint(res))
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for i := range 3 {
			if e.volume(t, s, volID(i)).InUse() {
				return false, fmt.Errorf("%s is still claimed", volID(i))
			}
		}
		return true, nil
	})

	// A deleted token stops working on every server.
	res = e.cli(t, s, "acl token delete", reader.AccessorID)
	must.Zero(t, res.Code, must.Sprint(res))
	for _, srv := range c.Servers() {
		// A stale read, answered by each server from its own state.
		nc := nomadClient(t, srv, reader.SecretID)
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			_, _, err := nc.CSIVolumes().List(&nomad.QueryOptions{AllowStale: true})
			return statusOf(err) == http.StatusForbidden && strings.Contains(err.Error(), "ACL token not found"),
				fmt.Errorf("%s: %v", srv.Name(), err)
		})
	}
	e.checkSecrets(t)
}

// TestE2E_ACLNamespaces: two namespaces, a token for each; each sees only
// its own namespace's volumes through the CLI and Nomad's client, and a
// namespace that holds a volume is not deleted.
func TestE2E_ACLNamespaces(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: clientServerConfig, ExtraArgs: []string{"-acl-enabled"}})
	leader := WaitForLeader(t, c)
	res := c.CLI(t, leader, "acl bootstrap")
	must.Zero(t, res.Code, must.Sprint(res))
	c.SetToken(kvField(t, res, "Secret ID"))
	e, s := newClientEnv(t, c)

	tokens := map[string]string{}
	for _, ns := range []string{"team-a", "team-b"} {
		res := e.cli(t, s, "namespace apply", "-description", "volumes of "+ns, ns)
		must.Zero(t, res.Code, must.Sprint(res))
		rules := writeFile(t, t.TempDir(), ns+".hcl", fmt.Sprintf(`namespace %q { policy = "write" }
plugin { policy = "read" }
`, ns))
		res = e.cli(t, s, "acl policy apply", ns, rules)
		must.Zero(t, res.Code, must.Sprint(res))
		res = e.cli(t, s, "acl token create", "-name", ns, "-policy", ns)
		must.Zero(t, res.Code, must.Sprint(res))
		tokens[ns] = kvField(t, res, "Secret ID")
		res = e.cli(t, s, "volume create", "-token="+tokens[ns], "-namespace="+ns, e.writeSpec(t, ns+"-vol", `capacity_min = "1MiB"`))
		must.Zero(t, res.Code, must.Sprint(res))
	}
	res = e.cli(t, s, "volume create", "-token="+tokens["team-a"], "-namespace=team-b", e.writeSpec(t, "intruder", `capacity_min = "1MiB"`))
	mustDeniedCLI(t, res)

	for ns, other := range map[string]string{"team-a": "team-b", "team-b": "team-a"} {
		nc := nomadClient(t, s, tokens[ns])
		vols, _, err := nc.CSIVolumes().List(&nomad.QueryOptions{Namespace: "*"})
		must.NoError(t, err)
		var ids []string
		for _, v := range vols {
			ids = append(ids, v.Namespace+"/"+v.ID)
		}
		must.Eq(t, []string{ns + "/" + ns + "-vol"}, ids)
		_, _, err = nc.CSIVolumes().Info(other+"-vol", &nomad.QueryOptions{Namespace: other})
		must.Eq(t, http.StatusForbidden, statusOf(err), must.Sprint(err))
		nss, _, err := nc.Namespaces().List(nil)
		must.NoError(t, err)
		must.True(t, slices.ContainsFunc(nss, func(n *nomad.Namespace) bool { return n.Name == ns }))
		must.False(t, slices.ContainsFunc(nss, func(n *nomad.Namespace) bool { return n.Name == other }))
		res := e.cli(t, s, "volume status", "-token="+tokens[ns], "-namespace=*")
		must.Zero(t, res.Code, must.Sprint(res))
		must.StrContains(t, res.Stdout, ns+"-vol")
		must.StrNotContains(t, res.Stdout, other+"-vol")
	}
	res = e.cli(t, s, "namespace delete", "team-a")
	must.Eq(t, 1, res.Code)
	must.StrContains(t, res.Stderr, `namespace "team-a" still holds 1 volume (team-a-vol)`, must.Sprint(res))
}
