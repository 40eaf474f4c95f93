package httpapitest

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// ACLFixture is what the ACL compatibility suite needs of the cluster: a
// CSI plugin with a healthy node, so that a volume registers.
type ACLFixture struct {
	PluginID string
}

// RunNomadClientACLCompat drives the ACL and namespace endpoints of a
// cluster with ACLs enabled and not yet bootstrapped, at addr, with Nomad's
// official Go client: the bootstrap, policies in Nomad's language, tokens
// with and without expiry, a read-only CSI token that reads volumes and
// writes nothing, and namespaces. It leaves the cluster bootstrapped and
// returns the management token's secret.
func RunNomadClientACLCompat(t *testing.T, addr string, fx ACLFixture) string {
	t.Helper()
	cfg := nomad.DefaultConfig()
	cfg.Address = addr
	cfg.SecretID = ""
	anon, err := nomad.NewClient(cfg)
	must.NoError(t, err)
	as := func(secret string) *nomad.Client {
		c, err := nomad.NewClient(&nomad.Config{Address: addr, SecretID: secret})
		must.NoError(t, err)
		return c
	}

	// Nothing is allowed before the bootstrap.
	_, _, err = anon.CSIVolumes().List(nil)
	mustDenied(t, err)

	boot, wm, err := anon.ACLTokens().Bootstrap(nil)
	must.NoError(t, err)
	must.Positive(t, wm.LastIndex)
	must.Eq(t, "management", boot.Type)
	must.Eq(t, "Bootstrap Token", boot.Name)
	must.True(t, boot.Global)
	must.NotEq(t, "", boot.SecretID)
	must.NotEq(t, "", boot.AccessorID)
	_, _, err = anon.ACLTokens().Bootstrap(nil)
	mustStatus(t, http.StatusBadRequest, err)
	must.StrContains(t, err.Error(), "ACL bootstrap already done (reset index: ")
	mgmt := as(boot.SecretID)

	// Policies.
	const readRules = `namespace "default" {
  policy       = "read"
  capabilities = ["csi-list-volume"]
}
plugin { policy = "read" }
`
	_, err = mgmt.ACLPolicies().Upsert(&nomad.ACLPolicy{Name: "csi-read", Description: "read CSI volumes", Rules: readRules}, nil)
	must.NoError(t, err)
	_, err = mgmt.ACLPolicies().Upsert(&nomad.ACLPolicy{Name: "csi-mount", Rules: `namespace "default" {
  capabilities = ["submit-job", "csi-mount-volume", "read-job"]
}
plugin { policy = "read" }`}, nil)
	must.NoError(t, err)
	_, err = mgmt.ACLPolicies().Upsert(&nomad.ACLPolicy{Name: "bad", Rules: `namespace "default" { policy = "raed" }`}, nil)
	mustStatus(t, http.StatusBadRequest, err)
	must.StrContains(t, err.Error(), `line 1: namespace "default": unknown policy "raed"`)
	stubs, _, err := mgmt.ACLPolicies().List(nil)
	must.NoError(t, err)
	var names []string
	for _, s := range stubs {
		names = append(names, s.Name)
	}
	must.Eq(t, []string{"csi-mount", "csi-read"}, names)
	pol, _, err := mgmt.ACLPolicies().Info("csi-read", nil)
	must.NoError(t, err)
	must.Eq(t, readRules, pol.Rules)
	must.Eq(t, "read CSI volumes", pol.Description)

	// Tokens: created with a secret shown once, read without it.
	reader, _, err := mgmt.ACLTokens().Create(&nomad.ACLToken{Name: "reader", Type: "client",
		Policies: []string{"csi-read"}, ExpirationTTL: time.Hour}, nil)
	must.NoError(t, err)
	must.NotEq(t, "", reader.SecretID)
	must.NotNil(t, reader.ExpirationTime)
	must.True(t, reader.ExpirationTime.After(time.Now().Add(50*time.Minute)))
	forever, _, err := mgmt.ACLTokens().Create(&nomad.ACLToken{Name: "forever", Type: "client", Policies: []string{"csi-mount"}}, nil)
	must.NoError(t, err)
	must.Nil(t, forever.ExpirationTime)
	_, err = mgmt.ACLTokens().Delete(forever.AccessorID, nil)
	must.NoError(t, err)
	info, _, err := mgmt.ACLTokens().Info(reader.AccessorID, nil)
	must.NoError(t, err)
	must.Eq(t, "", info.SecretID, must.Sprint("a secret is shown only at its creation"))
	must.Eq(t, []string{"csi-read"}, info.Policies)
	info.Name = "csi reader"
	upd, _, err := mgmt.ACLTokens().Update(info, nil)
	must.NoError(t, err)
	must.Eq(t, "csi reader", upd.Name)
	must.Eq(t, "", upd.SecretID)
	_, _, err = mgmt.ACLTokens().Create(&nomad.ACLToken{Type: "client", Policies: []string{"nope"}}, nil)
	mustStatus(t, http.StatusBadRequest, err)
	list, _, err := mgmt.ACLTokens().List(nil)
	must.NoError(t, err)
	must.Len(t, 2, list)
	self, _, err := as(reader.SecretID).ACLTokens().Self(nil)
	must.NoError(t, err)
	must.Eq(t, reader.AccessorID, self.AccessorID)
	mine, _, err := as(reader.SecretID).ACLPolicies().List(nil)
	must.NoError(t, err)
	must.Len(t, 1, mine)

	// The read-only CSI token reads volumes and plugins, and writes nothing.
	ro := as(reader.SecretID)
	vol := &nomad.CSIVolume{ID: "nomad-acl-vol", PluginID: fx.PluginID, RequestedCapabilities: []*nomad.CSIVolumeCapability{{
		AccessMode: nomad.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: nomad.CSIVolumeAttachmentModeFilesystem}}}
	_, err = ro.CSIVolumes().Register(vol, nil)
	mustDenied(t, err)
	_, err = mgmt.CSIVolumes().Register(vol, nil)
	must.NoError(t, err)
	vols, _, err := ro.CSIVolumes().List(nil)
	must.NoError(t, err)
	must.True(t, slices.ContainsFunc(vols, func(v *nomad.CSIVolumeListStub) bool { return v.ID == vol.ID }))
	got, _, err := ro.CSIVolumes().Info(vol.ID, nil)
	must.NoError(t, err)
	must.Eq(t, vol.ID, got.ID)
	_, _, err = ro.CSIPlugins().Info(fx.PluginID, nil)
	must.NoError(t, err)
	mustDenied(t, ro.CSIVolumes().Deregister(vol.ID, true, nil))
	mustDenied(t, ro.CSIVolumes().Detach(vol.ID, "some-node", nil))
	_, _, err = ro.Nodes().List(nil)
	mustDenied(t, err)
	_, _, err = ro.ACLTokens().List(nil)
	mustDenied(t, err)
	_, _, err = as("9a0b1ed3-0000-4000-8000-000000000000").CSIVolumes().List(nil)
	mustStatus(t, http.StatusForbidden, err)
	must.StrContains(t, err.Error(), "ACL token not found")
	must.NoError(t, mgmt.CSIVolumes().Deregister(vol.ID, true, nil))

	// Namespaces.
	_, err = mgmt.Namespaces().Register(&nomad.Namespace{Name: "nomad-acl-ns", Description: "compat",
		Meta: map[string]string{"team": "storage"}}, nil)
	must.NoError(t, err)
	_, err = ro.Namespaces().Register(&nomad.Namespace{Name: "nomad-acl-ns2"}, nil)
	mustDenied(t, err)
	nss, _, err := mgmt.Namespaces().List(nil)
	must.NoError(t, err)
	var nsNames []string
	for _, n := range nss {
		nsNames = append(nsNames, n.Name)
	}
	must.SliceContainsAll(t, []string{"default", "nomad-acl-ns"}, nsNames)
	roNs, _, err := ro.Namespaces().List(nil)
	must.NoError(t, err)
	must.Len(t, 1, roNs, must.Sprint("the reader sees the default namespace only"))
	ns, _, err := mgmt.Namespaces().Info("nomad-acl-ns", nil)
	must.NoError(t, err)
	must.Eq(t, "compat", ns.Description)
	must.Eq(t, map[string]string{"team": "storage"}, ns.Meta)
	_, err = mgmt.Namespaces().Delete("nomad-acl-ns", nil)
	must.NoError(t, err)
	_, _, err = mgmt.Namespaces().Info("nomad-acl-ns", nil)
	mustStatus(t, http.StatusNotFound, err)

	// Deleting.
	_, err = mgmt.ACLTokens().Delete(reader.AccessorID, nil)
	must.NoError(t, err)
	_, _, err = ro.CSIVolumes().List(nil)
	mustStatus(t, http.StatusForbidden, err)
	_, err = mgmt.ACLPolicies().Delete("csi-read", nil)
	must.NoError(t, err)
	_, _, err = mgmt.ACLPolicies().Info("csi-read", nil)
	mustStatus(t, http.StatusNotFound, err)
	return boot.SecretID
}

// mustDenied asserts a 403 with Nomad's "Permission denied".
func mustDenied(t *testing.T, err error) {
	t.Helper()
	mustStatus(t, http.StatusForbidden, err)
	var ue nomad.UnexpectedResponseError
	var uep *nomad.UnexpectedResponseError
	switch {
	case errors.As(err, &ue):
	case errors.As(err, &uep):
		ue = *uep
	}
	must.Eq(t, "Permission denied", strings.TrimSpace(ue.Body()))
}
