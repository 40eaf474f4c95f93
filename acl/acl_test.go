package acl

import (
	"testing"

	"github.com/shoenig/test/must"
)

func mustACL(t *testing.T, rules ...string) *ACL {
	t.Helper()
	var ps []*Policy
	for _, r := range rules {
		p, err := Parse(r)
		must.NoError(t, err)
		ps = append(ps, p)
	}
	return New(ps)
}

func TestACL_Namespaces(t *testing.T) {
	a := mustACL(t, `
namespace "default" { policy = "read" }
namespace "team-*"  { capabilities = ["csi-list-volume"] }
namespace "team-a-*" { capabilities = ["csi-write-volume"] }
namespace "*"       { capabilities = ["list-jobs"] }
`)
	must.True(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIReadVolume))
	must.False(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIWriteVolume))
	// An exact block wins over every glob: default has no list-jobs from "*"... it has it from read.
	must.True(t, a.AllowNamespaceOperation("default", NamespaceCapabilityListJobs))

	// The closest glob applies, alone: team-a-1 matches team-a-* (closer
	// than team-* and *), so it may write but not list.
	must.True(t, a.AllowNamespaceOperation("team-a-1", NamespaceCapabilityCSIWriteVolume))
	must.False(t, a.AllowNamespaceOperation("team-a-1", NamespaceCapabilityCSIListVolume))
	must.True(t, a.AllowNamespaceOperation("team-b", NamespaceCapabilityCSIListVolume))
	must.False(t, a.AllowNamespaceOperation("team-b", NamespaceCapabilityListJobs))
	must.True(t, a.AllowNamespaceOperation("other", NamespaceCapabilityListJobs))
	must.False(t, a.AllowNamespaceOperation("other", NamespaceCapabilityReadJob))

	// "*" in a request: allowed where any namespace allows it.
	must.True(t, a.AllowNamespaceOperation(AllNamespaces, NamespaceCapabilityCSIWriteVolume))
	must.False(t, a.AllowNamespaceOperation(AllNamespaces, NamespaceCapabilitySubmitJob))
	must.True(t, a.AllowNamespace(AllNamespaces))
	must.True(t, a.AllowNamespace("team-x"))

	must.True(t, a.AllowNsOpAnyOf("team-b", NamespaceCapabilityCSIReadVolume, NamespaceCapabilityCSIListVolume))
	must.False(t, a.AllowNsOpAnyOf("team-b", NamespaceCapabilityCSIReadVolume, NamespaceCapabilitySubmitJob))
}

func TestACL_OnlyNamedNamespaces(t *testing.T) {
	a := mustACL(t, `namespace "a" { policy = "write" }`)
	must.True(t, a.AllowNamespace("a"))
	must.False(t, a.AllowNamespace("b"))
	must.False(t, a.AllowNamespaceOperation("b", NamespaceCapabilityCSIReadVolume))
	must.False(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIReadVolume))
	must.False(t, a.AllowPluginRead())
	must.False(t, a.AllowNodeRead())
	must.False(t, a.AllowOperatorRead())
	must.False(t, a.IsManagement())
}

func TestACL_MergeDenyWins(t *testing.T) {
	a := mustACL(t,
		`namespace "default" { policy = "write" }
		 plugin { policy = "read" }
		 node { policy = "write" }`,
		`namespace "default" { capabilities = ["deny"] }
		 plugin { policy = "list" }
		 node { policy = "deny" }
		 operator { policy = "read" }`,
		`operator { policy = "write" }`,
	)
	must.False(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIReadVolume))
	must.False(t, a.AllowNamespace("default"))
	// The most privilege is kept...
	must.True(t, a.AllowPluginRead())
	must.True(t, a.AllowOperatorWrite())
	// ...unless one policy denies.
	must.False(t, a.AllowNodeRead())
}

func TestACL_MergeUnion(t *testing.T) {
	a := mustACL(t,
		`namespace "default" { capabilities = ["csi-list-volume"] }`,
		`namespace "default" { capabilities = ["csi-mount-volume"] }`)
	must.True(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIListVolume))
	must.True(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIMountVolume))
	must.False(t, a.AllowNamespaceOperation("default", NamespaceCapabilityCSIWriteVolume))
}

func TestACL_Levels(t *testing.T) {
	list := mustACL(t, `plugin { policy = "list" }`)
	must.True(t, list.AllowPluginList())
	must.False(t, list.AllowPluginRead())
	read := mustACL(t, `plugin { policy = "read" }
		agent { policy = "read" }
		operator { policy = "read" }`)
	must.True(t, read.AllowPluginList())
	must.True(t, read.AllowPluginRead())
	must.True(t, read.AllowAgentRead())
	must.False(t, read.AllowAgentWrite())
	must.False(t, read.AllowOperatorWrite())
}

func TestACL_Management(t *testing.T) {
	m := Management
	must.True(t, m.IsManagement())
	must.True(t, m.AllowNamespaceOperation("anything", NamespaceCapabilityCSIWriteVolume))
	must.True(t, m.AllowNamespace(AllNamespaces))
	must.True(t, m.AllowPluginRead())
	must.True(t, m.AllowNodeWrite())
	must.True(t, m.AllowOperatorWrite())
	must.True(t, m.AllowAgentWrite())

	var none *ACL
	must.False(t, none.AllowNamespaceOperation("default", NamespaceCapabilityCSIReadVolume))
	must.False(t, none.AllowPluginList())
	must.False(t, DenyAll.AllowNamespace(AllNamespaces))
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "a", true}, {"a*", "ba", false},
		{"*a", "ba", true}, {"*a", "ab", false}, {"a*b*c", "aXbYc", true}, {"a*b*c", "acb", false},
		{"a*a", "a", false}, {"a*a", "aa", true}, {"abc", "abc", true}, {"abc", "abcd", false},
	} {
		must.Eq(t, tc.want, globMatch(tc.pattern, tc.s), must.Sprintf("%q ~ %q", tc.pattern, tc.s))
	}
}
