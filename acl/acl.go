package acl

import (
	"slices"
	"strings"
)

// AllNamespaces is the namespace a request names to mean every namespace
// (?namespace=*): an operation on it is allowed when some namespace allows
// it, and the endpoint then shows only what each namespace allows.
const AllNamespaces = "*"

// ACL is what one token may do: the merge of its policies, or everything
// for a management token. It is immutable once built and safe to share.
type ACL struct {
	management bool

	// exact holds the namespace blocks without a glob; globs the others,
	// sorted by pattern so that ties between equally close globs are
	// broken the same way on every server.
	exact map[string]capSet
	globs []globRule

	plugin, node, operator, agent string
}

type globRule struct {
	pattern string
	caps    capSet
}

// capSet is a set of capabilities; a set holding deny holds nothing else.
type capSet map[string]struct{}

func (c capSet) has(op string) bool {
	_, ok := c[op]
	return ok
}

func (c capSet) denies() bool { return c.has(NamespaceCapabilityDeny) }

// Management is the ACL of management tokens: everything is allowed.
var Management = &ACL{management: true}

// DenyAll is the ACL of a token with no policy that grants anything.
var DenyAll = New(nil)

// New compiles policies into one ACL. Namespace blocks of the same name
// (or glob) are merged by union of capabilities, unless one of them denies,
// which wins; levels keep the most privilege, deny again winning.
func New(policies []*Policy) *ACL {
	a := &ACL{exact: map[string]capSet{}}
	globs := map[string]capSet{}
	for _, p := range policies {
		if p == nil {
			continue
		}
		for _, ns := range p.Namespaces {
			target := a.exact
			if strings.Contains(ns.Name, "*") {
				target = globs
			}
			set := target[ns.Name]
			if set == nil {
				set = capSet{}
				target[ns.Name] = set
			}
			for _, c := range ns.Capabilities {
				set[c] = struct{}{}
			}
		}
		a.plugin = maxPrivilege(a.plugin, p.Plugin)
		a.node = maxPrivilege(a.node, p.Node)
		a.operator = maxPrivilege(a.operator, p.Operator)
		a.agent = maxPrivilege(a.agent, p.Agent)
	}
	for _, m := range []map[string]capSet{a.exact, globs} {
		for name, set := range m {
			if set.denies() {
				m[name] = capSet{NamespaceCapabilityDeny: {}}
			}
		}
	}
	for pattern, set := range globs {
		a.globs = append(a.globs, globRule{pattern: pattern, caps: set})
	}
	slices.SortFunc(a.globs, func(x, y globRule) int { return strings.Compare(x.pattern, y.pattern) })
	return a
}

// maxPrivilege merges two levels: deny wins, then write, read, list.
func maxPrivilege(a, b string) string {
	rank := func(l string) int {
		switch l {
		case PolicyDeny:
			return 4
		case PolicyWrite:
			return 3
		case PolicyRead:
			return 2
		case PolicyList:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// IsManagement reports whether the ACL is a management token's.
func (a *ACL) IsManagement() bool { return a != nil && a.management }

// AllowNamespaceOperation reports whether op (a namespace capability) is
// allowed in namespace ns. For AllNamespaces it is whether any namespace
// block allows it.
func (a *ACL) AllowNamespaceOperation(ns, op string) bool {
	switch {
	case a == nil:
		return false
	case a.management:
		return true
	case ns == AllNamespaces:
		return a.anyNamespace(func(c capSet) bool { return c.has(op) && !c.denies() })
	}
	set, ok := a.namespaceSet(ns)
	return ok && set.has(op) && !set.denies()
}

// AllowNsOpAnyOf reports whether any of ops is allowed in ns.
func (a *ACL) AllowNsOpAnyOf(ns string, ops ...string) bool {
	for _, op := range ops {
		if a.AllowNamespaceOperation(ns, op) {
			return true
		}
	}
	return false
}

// AllowNamespace reports whether any operation is allowed in ns: whether
// the token may know the namespace exists.
func (a *ACL) AllowNamespace(ns string) bool {
	switch {
	case a == nil:
		return false
	case a.management:
		return true
	case ns == AllNamespaces:
		return a.anyNamespace(func(c capSet) bool { return len(c) > 0 && !c.denies() })
	}
	set, ok := a.namespaceSet(ns)
	return ok && len(set) > 0 && !set.denies()
}

func (a *ACL) anyNamespace(f func(capSet) bool) bool {
	for _, set := range a.exact {
		if f(set) {
			return true
		}
	}
	for _, g := range a.globs {
		if f(g.caps) {
			return true
		}
	}
	return false
}

// namespaceSet is the capabilities that apply to ns: its own block, or the
// closest glob that matches it, the one whose wildcards stand for the
// fewest characters (Nomad's rule: "team-a-*" beats "team-*" for
// "team-a-1").
func (a *ACL) namespaceSet(ns string) (capSet, bool) {
	if set, ok := a.exact[ns]; ok {
		return set, true
	}
	best, bestDiff := -1, 0
	for i, g := range a.globs {
		if !globMatch(g.pattern, ns) {
			continue
		}
		diff := len(ns) - len(g.pattern) + strings.Count(g.pattern, "*")
		if best < 0 || diff < bestDiff {
			best, bestDiff = i, diff
		}
	}
	if best < 0 {
		return nil, false
	}
	return a.globs[best].caps, true
}

// globMatch reports whether s matches pattern, where * matches any run of
// characters, including none.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

func levelAllows(level, want string) bool {
	switch want {
	case PolicyList:
		return level == PolicyList || level == PolicyRead || level == PolicyWrite
	case PolicyRead:
		return level == PolicyRead || level == PolicyWrite
	case PolicyWrite:
		return level == PolicyWrite
	}
	return false
}

// AllowPluginList reports whether the token may list CSI plugins.
func (a *ACL) AllowPluginList() bool {
	return a.IsManagement() || a != nil && levelAllows(a.plugin, PolicyList)
}

// AllowPluginRead reports whether the token may read CSI plugins.
func (a *ACL) AllowPluginRead() bool {
	return a.IsManagement() || a != nil && levelAllows(a.plugin, PolicyRead)
}

// AllowNodeRead reports whether the token may read client nodes.
func (a *ACL) AllowNodeRead() bool {
	return a.IsManagement() || a != nil && levelAllows(a.node, PolicyRead)
}

// AllowNodeWrite reports whether the token may change client nodes.
func (a *ACL) AllowNodeWrite() bool {
	return a.IsManagement() || a != nil && levelAllows(a.node, PolicyWrite)
}

// AllowOperatorRead reports whether the token may read the cluster's
// operator state (Raft peers, security status).
func (a *ACL) AllowOperatorRead() bool {
	return a.IsManagement() || a != nil && levelAllows(a.operator, PolicyRead)
}

// AllowOperatorWrite reports whether the token may change the cluster
// (remove Raft peers).
func (a *ACL) AllowOperatorWrite() bool {
	return a.IsManagement() || a != nil && levelAllows(a.operator, PolicyWrite)
}

// AllowAgentRead reports whether the token may read an agent's own state.
func (a *ACL) AllowAgentRead() bool {
	return a.IsManagement() || a != nil && levelAllows(a.agent, PolicyRead)
}

// AllowAgentWrite reports whether the token may change an agent.
func (a *ACL) AllowAgentWrite() bool {
	return a.IsManagement() || a != nil && levelAllows(a.agent, PolicyWrite)
}
