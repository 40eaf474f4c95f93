package acl

import (
	"errors"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

func TestParse_Valid(t *testing.T) {
	p, err := Parse(`
namespace "default" {
  policy       = "read"
  capabilities = ["csi-mount-volume"]
}
namespace "team-*" {
  capabilities = ["host-volume-register"]
}
plugin   { policy = "list" }
node     { policy = "write" }
operator { policy = "read" }
agent    { policy = "deny" }

# Nomad's blocks volplane has no use for are accepted.
quota { policy = "read" }
node_pool "prod" { policy = "read" }
host_volume "data" { capabilities = ["mount-readonly"] }
namespace "vars" {
  variables {
    path "app/*" { capabilities = ["read"] }
  }
}
`)
	must.NoError(t, err)
	must.Len(t, 3, p.Namespaces)
	def := p.Namespaces[0]
	must.Eq(t, "default", def.Name)
	for _, c := range append(ExpandNamespacePolicy(PolicyRead), NamespaceCapabilityCSIMountVolume) {
		must.SliceContains(t, def.Capabilities, c)
	}
	must.SliceNotContains(t, def.Capabilities, NamespaceCapabilityCSIWriteVolume)
	// Implied capabilities come with the one that implies them.
	must.Eq(t, []string{NamespaceCapabilityHostVolumeCreate, NamespaceCapabilityHostVolumeRead,
		NamespaceCapabilityHostVolumeRegister}, p.Namespaces[1].Capabilities)
	must.Eq(t, []string{PolicyList, PolicyWrite, PolicyRead, PolicyDeny}, []string{p.Plugin, p.Node, p.Operator, p.Agent})
}

func TestParse_WriteExpandsAsNomad(t *testing.T) {
	write := ExpandNamespacePolicy(PolicyWrite)
	for _, c := range ExpandNamespacePolicy(PolicyRead) {
		must.SliceContains(t, write, c)
	}
	for _, c := range []string{NamespaceCapabilityCSIWriteVolume, NamespaceCapabilityCSIMountVolume,
		NamespaceCapabilitySubmitJob, NamespaceCapabilityReadLogs, NamespaceCapabilityAllocLifecycle} {
		must.SliceContains(t, write, c)
	}
	// Neither level registers plugins: that takes the capability itself.
	must.SliceNotContains(t, write, NamespaceCapabilityCSIRegisterPlugin)
	read := ExpandNamespacePolicy(PolicyRead)
	for _, c := range []string{NamespaceCapabilityCSIListVolume, NamespaceCapabilityCSIReadVolume,
		NamespaceCapabilityListJobs, NamespaceCapabilityReadJob} {
		must.SliceContains(t, read, c)
	}
	for _, c := range []string{NamespaceCapabilityCSIWriteVolume, NamespaceCapabilityCSIMountVolume, NamespaceCapabilitySubmitJob} {
		must.SliceNotContains(t, read, c)
	}
}

func TestParse_Errors(t *testing.T) {
	cases := map[string]struct {
		rules string
		line  int
		word  string
		msg   string
	}{
		"unknown capability": {`namespace "default" {
  policy = "read"
  capabilities = [
    "csi-read-volume",
    "csi-wrte-volume",
  ]
}`, 5, "csi-wrte-volume", `namespace "default": unknown capability "csi-wrte-volume"`},
		"unknown level":               {"\nplugin { policy = \"writ\" }", 2, "writ", `unknown policy "writ"`},
		"plugin level of a namespace": {`namespace "a" { policy = "list" }`, 1, "list", `unknown policy "list"`},
		"unknown block":               {"node { policy = \"read\" }\nvolume \"x\" { policy = \"read\" }", 2, "volume", `unknown block "volume"`},
		"unknown attribute": {"namespace \"a\" {\n  policy = \"read\"\n  capability = [\"read-job\"]\n}", 3, "capability",
			`unknown attribute "capability"`},
		"top-level attribute": {`policy = "read"`, 1, "policy", `unknown attribute "policy"`},
		"duplicate block":     {"node { policy = \"read\" }\n\nnode { policy = \"write\" }", 3, "node", "node is given twice (first on line 1)"},
		"duplicate namespace": {"namespace \"a\" { policy = \"read\" }\nnamespace \"a\" { policy = \"write\" }", 2, "namespace",
			`namespace "a" is given twice`},
		"missing label":   {`namespace { policy = "read" }`, 1, "namespace", "needs one name"},
		"extra label":     {`plugin "x" { policy = "read" }`, 1, "x", "takes no name"},
		"bad glob name":   {`namespace "a/b" { policy = "read" }`, 1, "a/b", "must be 1 to 128"},
		"empty block":     {"\n\nnamespace \"a\" {}", 3, "namespace", "grants nothing"},
		"not a list":      {`namespace "a" { capabilities = "read-job" }`, 1, "capabilities", "must be a list"},
		"syntax":          {"namespace \"a\" {\n  policy = \n}", 2, "", ""},
		"empty":           {"   \n# nothing\n", 0, "", "has no rules"},
		"variables attr":  {"namespace \"a\" {\n variables {\n  foo = 1\n }\n}", 3, "foo", `unknown attribute "foo"`},
		"variables cap":   {"namespace \"a\" {\n variables {\n  path \"x\" { capabilities = [\"execute\"] }\n }\n}", 3, "execute", `unknown capability "execute"`},
		"operator cap":    {`operator { capabilities = ["raft-remove"] }`, 1, "raft-remove", `unknown capability "raft-remove"`},
		"non-string caps": {`namespace "a" { capabilities = [1] }`, 1, "", "must be strings"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.rules)
			var pe *ParseError
			must.True(t, errors.As(err, &pe), must.Sprintf("want a *ParseError, got %v", err))
			must.Eq(t, tc.line, pe.Line, must.Sprint(err))
			if tc.word != "" {
				must.Eq(t, tc.word, pe.Word, must.Sprint(err))
			}
			must.StrContains(t, err.Error(), tc.msg)
			if tc.line > 0 {
				must.StrHasPrefix(t, "line ", err.Error())
			}
		})
	}
}

func TestParse_Oversized(t *testing.T) {
	rules := `namespace "default" { policy = "read" }` + "\n" + strings.Repeat("# padding\n", MaxRulesBytes/10+1)
	_, err := Parse(rules)
	must.ErrorContains(t, err, "more than the limit")
}
