package server

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/acl"
	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/structs"
)

// aclTestServer starts a single server with ACLs on and bootstraps it; it
// returns the server and the management token's secret.
func aclTestServer(t *testing.T, cb func(*Config)) (*Server, string) {
	t.Helper()
	s := TestServer(t, func(c *Config) {
		c.ACLEnabled = true
		if cb != nil {
			cb(c)
		}
	})
	WaitForLeader(t, s)
	return s, bootstrap(t, s)
}

func bootstrap(t *testing.T, s *Server) string {
	t.Helper()
	var reply structs.ACLTokenUpsertResponse
	must.NoError(t, s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &reply))
	must.Len(t, 1, reply.Tokens)
	must.Eq(t, structs.ACLManagementToken, reply.Tokens[0].Type)
	must.NotEq(t, "", reply.Tokens[0].SecretID)
	return reply.Tokens[0].SecretID
}

var policySeq atomic.Int64

// tokenWith creates a policy of rules and a client token holding it, and
// returns the token (with its secret).
func tokenWith(t *testing.T, s *Server, mgmt, rules string) *structs.ACLToken {
	t.Helper()
	name := fmt.Sprintf("p%d", policySeq.Add(1))
	pol := &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: name, Rules: rules}}}
	pol.AuthToken = mgmt
	must.NoError(t, s.RPC("ACL.UpsertPolicies", pol, &structs.GenericResponse{}), must.Sprint(rules))
	req := &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{Name: name, Type: structs.ACLClientToken, Policies: []string{name}}}}
	req.AuthToken = mgmt
	var reply structs.ACLTokenUpsertResponse
	must.NoError(t, s.RPC("ACL.UpsertTokens", req, &reply))
	return reply.Tokens[0]
}

// servedMethods lists every method net/rpc serves, with its argument and
// reply types.
func servedMethods(s *Server) map[string][2]reflect.Type {
	errType := reflect.TypeFor[error]()
	out := map[string][2]reflect.Type{}
	for name, rcvr := range s.endpoints(nil) {
		typ := reflect.TypeOf(rcvr)
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			if !m.IsExported() || m.Type.NumIn() != 3 || m.Type.NumOut() != 1 ||
				m.Type.In(2).Kind() != reflect.Pointer || m.Type.Out(0) != errType {
				continue
			}
			out[name+"."+m.Name] = [2]reflect.Type{m.Type.In(1).Elem(), m.Type.In(2).Elem()}
		}
	}
	return out
}

// grant is a policy being built by the tests below from a rule's needs.
type grant struct {
	ns                            map[string][]string
	plugin, node, operator, agent string
	management                    bool
}

func newGrant() *grant { return &grant{ns: map[string][]string{}} }

// add grants one need (its first capability, in the namespace it names,
// "default" for the request's or any).
func (g *grant) add(n aclNeed) {
	switch n.area {
	case areaNamespace:
		g.addNs(testNs(n), n.caps[0])
	case areaPlugin:
		g.plugin = n.level
	case areaNode:
		g.node = n.level
	case areaOperator:
		g.operator = n.level
	case areaAgent:
		g.agent = n.level
	case areaManagement:
		g.management = true
	}
}

func testNs(n aclNeed) string {
	if n.ns == "" || n.ns == acl.AllNamespaces {
		return structs.DefaultNamespace
	}
	return n.ns
}

func (g *grant) addNs(ns string, caps ...string) {
	g.ns[ns] = append(g.ns[ns], caps...)
}

// lackOne grants what comes closest to n without satisfying it: every
// other capability in its namespace and its capability in another (unless
// any namespace would do), or the level just below.
func (g *grant) lackOne(n aclNeed) {
	below := map[string]string{acl.PolicyList: acl.PolicyDeny, acl.PolicyRead: acl.PolicyDeny, acl.PolicyWrite: acl.PolicyRead}
	switch n.area {
	case areaNamespace:
		for _, c := range acl.NamespaceCapabilities() {
			if c != acl.NamespaceCapabilityDeny && !slices.Contains(n.caps, c) {
				g.addNs(testNs(n), c)
			}
		}
		if n.ns != acl.AllNamespaces {
			g.addNs("elsewhere", n.caps...)
		}
	case areaPlugin:
		g.plugin = map[string]string{acl.PolicyList: acl.PolicyDeny, acl.PolicyRead: acl.PolicyList}[n.level]
	case areaNode:
		g.node = below[n.level]
	case areaOperator:
		g.operator = below[n.level]
	case areaAgent:
		g.agent = below[n.level]
	case areaManagement:
		// A client token with every capability everywhere is still not
		// a management token.
		g.addNs("*", acl.ExpandNamespacePolicy(acl.PolicyWrite)...)
		g.plugin, g.node, g.operator, g.agent = acl.PolicyRead, acl.PolicyWrite, acl.PolicyWrite, acl.PolicyWrite
	}
}

func (g *grant) hcl() string {
	var b strings.Builder
	for _, ns := range slices.Sorted(maps.Keys(g.ns)) {
		caps := slices.Compact(slices.Sorted(slices.Values(g.ns[ns])))
		fmt.Fprintf(&b, "namespace %q { capabilities = [%s] }\n", ns, `"`+strings.Join(caps, `", "`)+`"`)
	}
	for _, l := range [][2]string{{"plugin", g.plugin}, {"node", g.node}, {"operator", g.operator}, {"agent", g.agent}} {
		if l[1] != "" {
			fmt.Fprintf(&b, "%s { policy = %q }\n", l[0], l[1])
		}
	}
	if b.Len() == 0 {
		// A policy must grant something; this grants nothing an
		// endpoint checks.
		b.WriteString(`namespace "unused" { policy = "deny" }`)
	}
	return b.String()
}

// ruleNeeds is a rule's needs for a request of zero value.
func ruleNeeds(r aclRule, args any) []aclNeed {
	needs := slices.Clone(r.needs)
	if r.extra != nil {
		needs = append(needs, r.extra(args)...)
	}
	return needs
}

// grantsFor returns the secret of a token that has the needs, and of one
// token per need that lacks only that one.
func grantsFor(t *testing.T, s *Server, mgmt string, needs []aclNeed) (with string, lacking []string) {
	t.Helper()
	g := newGrant()
	for _, n := range needs {
		g.add(n)
	}
	with = mgmt
	if !g.management {
		with = tokenWith(t, s, mgmt, g.hcl()).SecretID
	}
	for i, n := range needs {
		l := newGrant()
		for j, other := range needs {
			if j != i {
				l.add(other)
			}
		}
		l.lackOne(n)
		lacking = append(lacking, tokenWith(t, s, mgmt, l.hcl()).SecretID)
	}
	return with, lacking
}

// callAs calls method with a zero request carrying token.
func callAs(s *Server, method string, types [2]reflect.Type, token string) error {
	args := reflect.New(types[0]).Interface()
	if r, ok := args.(structs.RequestWithToken); ok {
		r.SetRequestToken(token)
	}
	return s.RPC(method, args, reflect.New(types[1]).Interface())
}

// TestACL_EveryEndpoint checks every RPC endpoint against its row of
// aclRules with no token, with a token lacking each thing the row asks for,
// and with one having it all, on a server with ACLs on; and checks that
// every endpoint and every HTTP route has a row, and every row an endpoint
// or route.
func TestACL_EveryEndpoint(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	methods := servedMethods(s)
	routeEndpoints := map[string]bool{}
	for _, p := range httpapi.Routes() {
		e, ok := httpapi.RouteEndpoint(p)
		must.True(t, ok, must.Sprintf("HTTP route %q names no endpoint (httpapi routeEndpoints)", p))
		routeEndpoints[e] = true
	}
	for m := range methods {
		if _, ok := aclRules[m]; !ok {
			t.Errorf("RPC method %s has no row in aclRules (server/acl_endpoints.go)", m)
		}
	}
	for e := range routeEndpoints {
		if _, ok := aclRules[e]; !ok {
			t.Errorf("HTTP route endpoint %s has no row in aclRules (server/acl_endpoints.go)", e)
		}
	}
	for e := range aclRules {
		if _, ok := methods[e]; !ok && !routeEndpoints[e] {
			t.Errorf("aclRules names %s, which is neither an RPC method nor an HTTP route's endpoint", e)
		}
	}

	garbage := "4f1b0c1e-0000-4000-8000-000000000000"
	for _, method := range slices.Sorted(maps.Keys(methods)) {
		rule, types := aclRules[method], methods[method]
		t.Run(method, func(t *testing.T) {
			switch {
			case rule.kind == ruleOpen || rule.kind == ruleServer:
				// Anyone (open), or the server itself calling in
				// process (server): no token is asked for.
				err := callAs(s, method, types, "")
				must.NotEq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
				return
			case rule.kind == ruleNode:
				return // TestACL_NodeEndpoints
			case rule.check != nil:
				return // TestACL_OwnObjects
			}
			// A token that does not resolve is refused, with Nomad's text.
			err := callAs(s, method, types, garbage)
			must.ErrorIs(t, err, structs.ErrTokenNotFound)

			zero := reflect.New(types[0]).Interface()
			needs := ruleNeeds(rule, zero)
			with, lacking := grantsFor(t, s, mgmt, needs)
			err = callAs(s, method, types, "")
			if len(needs) > 0 {
				must.ErrorIs(t, err, structs.ErrPermissionDenied, must.Sprint("without a token"))
			} else {
				// Nothing to lack: the anonymous token calls it and sees
				// what it may (nothing, until an anonymous policy says).
				must.NotEq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
			}
			for i, tok := range lacking {
				before := metrics.ACLDeniedCount(method)
				err := callAs(s, method, types, tok)
				must.ErrorIs(t, err, structs.ErrPermissionDenied, must.Sprintf("a token lacking need %d of %+v", i, needs))
				must.Eq(t, before+1, metrics.ACLDeniedCount(method), must.Sprint("each refusal is counted"))
			}
			err = callAs(s, method, types, with)
			must.NotEq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprintf("a token with %+v: %v", needs, err))
			err = callAs(s, method, types, mgmt)
			must.NotEq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
		})
	}
}

// TestACL_NodeEndpoints: the endpoints client agents call for their own
// node take the node's secret; an ACL token, even a management one, does
// not stand in for it.
func TestACL_NodeEndpoints(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	n := registerNode(t, s, "dev")
	requests := func(secret string) map[string]any {
		return map[string]any{
			"Node.UpdateStatus":    &structs.NodeUpdateStatusRequest{NodeID: n.ID, SecretID: secret, Status: structs.NodeStatusReady},
			"Node.GetClientAllocs": &structs.NodeClientAllocsRequest{NodeID: n.ID, SecretID: secret},
			"Node.UpdateAlloc": &structs.NodeUpdateAllocRequest{NodeID: n.ID, SecretID: secret,
				Allocs: []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientStatusRunning}}},
			"CSIVolume.Claim": &structs.CSIVolumeClaimRequest{VolumeID: "vol", NodeSecretID: secret,
				Claim: &structs.CSIVolumeClaim{AllocationID: "a1", NodeID: n.ID, Mode: structs.CSIVolumeClaimWrite,
					AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}},
			"Node.Register": &structs.NodeRegisterRequest{Node: func() *structs.Node {
				c := n.Copy()
				c.SecretID = secret
				return c
			}()},
		}
	}
	methods := servedMethods(s)
	for method, rule := range aclRules {
		if rule.kind == ruleNode {
			must.MapContainsKey(t, requests(""), method, must.Sprintf("node endpoint %s has no case here", method))
		}
	}
	for method, args := range requests("wrong-secret") {
		t.Run(method+"/wrong secret", func(t *testing.T) {
			args.(structs.RequestWithToken).SetRequestToken(mgmt)
			err := s.RPC(method, args, reflect.New(methods[method][1]).Interface())
			must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
		})
	}
	for method, args := range requests(n.SecretID) {
		t.Run(method+"/node secret", func(t *testing.T) {
			err := s.RPC(method, args, reflect.New(methods[method][1]).Interface())
			must.NotEq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
		})
	}

	// The node's secret as a token reads a volume it claims, and nothing
	// else: not another volume, not a list.
	vol := mock.CSIVolume("dev")
	reg := &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}}
	reg.AuthToken = mgmt
	must.NoError(t, s.RPC("CSIVolume.Register", reg, &structs.CSIVolumeRegisterResponse{}))
	get := &structs.CSIVolumeGetRequest{ID: vol.ID}
	get.AuthToken = n.SecretID
	var got structs.CSIVolumeGetResponse
	must.NoError(t, s.RPC("CSIVolume.Get", get, &got))
	must.Nil(t, got.Volume, must.Sprint("the node holds no claim on it"))
	list := &structs.CSIVolumeListRequest{}
	list.AuthToken = n.SecretID
	must.ErrorIs(t, s.RPC("CSIVolume.List", list, &structs.CSIVolumeListResponse{}), structs.ErrPermissionDenied)
	self := &structs.GenericRequest{}
	self.AuthToken = n.SecretID
	must.ErrorIs(t, s.RPC("ACL.ResolveToken", self, &structs.SingleACLTokenResponse{}), structs.ErrPermissionDenied)
}

// TestACL_OwnObjects: the endpoints where a token reads what is its own.
func TestACL_OwnObjects(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	a := tokenWith(t, s, mgmt, `namespace "team-a" { policy = "read" }`)
	b := tokenWith(t, s, mgmt, `namespace "default" { capabilities = ["csi-list-volume"] }`)
	ns := &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{{Name: "team-a"}}}
	ns.AuthToken = mgmt
	must.NoError(t, s.RPC("Namespace.UpsertNamespaces", ns, &structs.GenericResponse{}))

	call := func(method string, args structs.RequestWithToken, reply any, token string) error {
		args.SetRequestToken(token)
		return s.RPC(method, args, reply)
	}
	for _, tc := range []struct {
		method string
		args   func() structs.RequestWithToken
		allow  []string
		deny   []string
	}{
		{"ACL.GetPolicy", func() structs.RequestWithToken { return &structs.ACLPolicySpecificRequest{Name: a.Policies[0]} },
			[]string{a.SecretID, mgmt}, []string{b.SecretID, ""}},
		{"ACL.GetToken", func() structs.RequestWithToken { return &structs.ACLTokenSpecificRequest{AccessorID: a.AccessorID} },
			[]string{a.SecretID, mgmt}, []string{b.SecretID, ""}},
		{"Namespace.GetNamespace", func() structs.RequestWithToken { return &structs.NamespaceSpecificRequest{Name: "team-a"} },
			[]string{a.SecretID, mgmt}, []string{b.SecretID, ""}},
	} {
		for _, tok := range tc.allow {
			reply := reflect.New(servedMethods(s)[tc.method][1]).Interface()
			must.NoError(t, call(tc.method, tc.args(), reply, tok), must.Sprint(tc.method))
		}
		for _, tok := range tc.deny {
			reply := reflect.New(servedMethods(s)[tc.method][1]).Interface()
			must.ErrorIs(t, call(tc.method, tc.args(), reply, tok), structs.ErrPermissionDenied, must.Sprint(tc.method))
		}
	}

	// A token lists its own policies, and sees only its own namespaces.
	var pols structs.ACLPolicyListResponse
	must.NoError(t, call("ACL.ListPolicies", &structs.ACLPolicyListRequest{}, &pols, a.SecretID))
	must.Len(t, 1, pols.Policies)
	must.Eq(t, a.Policies[0], pols.Policies[0].Name)
	var nss structs.NamespaceListResponse
	must.NoError(t, call("Namespace.ListNamespaces", &structs.NamespaceListRequest{}, &nss, a.SecretID))
	must.Len(t, 1, nss.Namespaces)
	must.Eq(t, "team-a", nss.Namespaces[0].Name)
	must.NoError(t, call("Namespace.ListNamespaces", &structs.NamespaceListRequest{}, &nss, mgmt))
	must.Len(t, 2, nss.Namespaces)

	// Self: the token, never its secret.
	var self structs.SingleACLTokenResponse
	must.NoError(t, call("ACL.ResolveToken", &structs.GenericRequest{}, &self, a.SecretID))
	must.Eq(t, a.AccessorID, self.Token.AccessorID)
	must.Eq(t, "", self.Token.SecretID)
	must.SliceEmpty(t, self.Token.SecretHash)
	must.NoError(t, call("ACL.ResolveToken", &structs.GenericRequest{}, &self, ""))
	must.Eq(t, "anonymous", self.Token.AccessorID)
}
