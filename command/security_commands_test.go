package command

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestOperatorNodeIntroCommands(t *testing.T) {
	f := newFakeAgent(t)
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tok := &structs.NodeIntroToken{AccessorID: "acc-1", Name: "rack-4", SingleUse: true, CreateTime: created,
		ExpirationTime: created.Add(time.Hour)}
	f.json("PUT /v1/operator/node-intro", 200, &structs.NodeIntroCreateResponse{Token: tok, SecretID: "the-secret"})
	f.json("GET /v1/operator/node-intro", 200, []*structs.NodeIntroToken{tok})
	f.json("DELETE /v1/operator/node-intro/acc-1", 200, nil)

	r := run(t, "", "operator", "node-intro", "create", "-name", "rack-4", "-ttl", "1h", "-single-use")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Secret ID   = the-secret")
	must.StrContains(t, r.out, "Single Use  = true")
	must.Eq(t, `{"Name":"rack-4","SingleUse":true,"TTL":"1h0m0s"}`, f.requests()[0].Body)

	r = run(t, "", "operator", "node-intro", "list")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "acc-1        rack-4  true")
	must.StrNotContains(t, r.out, "the-secret")

	r = run(t, "", "operator", "node-intro", "revoke", "acc-1")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Revoked node introduction token \"acc-1\"\n", r.out)

	r = run(t, "", "operator", "node-intro", "revoke")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes one argument: <accessor-id>")
}

func TestOperatorKeyringCommands(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/operator/keyring/rotate", 200, &structs.KeyringRotateResponse{Key: &structs.RootKey{KeyID: "k2", Active: true}, Resealed: 3})
	f.json("GET /v1/operator/keyring/keys", 200, []*structs.RootKey{
		{KeyID: "k1", KEKID: "kek", CreateTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{KeyID: "k2", KEKID: "kek", Active: true, CreateTime: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)},
	})
	r := run(t, "", "operator", "root", "keyring", "rotate", "-full")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "New active root key k2\nSealed the secrets of 3 volumes again\n", r.out)
	must.Eq(t, "full=true", f.requests()[0].Query)

	r = run(t, "", "operator", "root", "keyring", "list")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	must.SliceLen(t, 3, lines)
	must.Eq(t, []string{"k1", "inactive", "kek"}, strings.Fields(lines[1])[:3])
	must.Eq(t, []string{"k2", "active", "kek"}, strings.Fields(lines[2])[:3])
}

// The tls commands write a CA and role certificates that verify, refuse to
// overwrite files, and need exactly one role.
func TestTLSCommands(t *testing.T) {
	t.Chdir(t.TempDir())
	r := run(t, "", "tls", "ca", "create")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	r = run(t, "", "tls", "ca", "create")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "volplane-agent-ca.pem already exists")

	for _, role := range []string{"server", "client", "cli"} {
		r = run(t, "", "tls", "cert", "create", "-"+role, "-additional-dnsname", "vp.example", "-additional-ipaddress", "10.0.0.9")
		must.Eq(t, 0, r.code, must.Sprint(r.stderr))
		pair, err := tls.LoadX509KeyPair("global-"+role+"-volplane.pem", "global-"+role+"-volplane-key.pem")
		must.NoError(t, err)
		must.SliceContains(t, pair.Leaf.DNSNames, role+".global.volplane")
		must.SliceContains(t, pair.Leaf.DNSNames, "vp.example")
		caPEM, err := os.ReadFile("volplane-agent-ca.pem")
		must.NoError(t, err)
		pool := x509.NewCertPool()
		must.True(t, pool.AppendCertsFromPEM(caPEM))
		_, err = pair.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		must.NoError(t, err)
		info, err := os.Stat("global-" + role + "-volplane-key.pem")
		must.NoError(t, err)
		must.Eq(t, os.FileMode(0o600), info.Mode().Perm())
	}
	r = run(t, "", "tls", "cert", "create")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Give exactly one of -server, -client or -cli")
	r = run(t, "", "tls", "cert", "create", "-server", "-region", "bad region")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "must be letters, digits and dashes")
}
