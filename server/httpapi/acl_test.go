package httpapi

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// TestRouteEndpoints_EveryRoute: every route the handler serves names its
// endpoint in the servers' ACL table, and the table names no route that
// is not served.
func TestRouteEndpoints_EveryRoute(t *testing.T) {
	routes := Routes()
	must.SliceNotEmpty(t, routes)
	must.True(t, slices.IsSorted(routes))
	for _, r := range routes {
		_, ok := RouteEndpoint(r)
		must.True(t, ok, must.Sprintf("route %q has no entry in routeEndpoints (server/httpapi/acl.go)", r))
	}
	for r := range routeEndpoints {
		must.SliceContains(t, routes, r, must.Sprintf("routeEndpoints names %q, which is not served", r))
	}
}

func TestACLHandlers_PassRequests(t *testing.T) {
	be, h := newTestHandler(t)
	tok := "X-Nomad-Token"

	// A policy: the path names it.
	rec := do(t, h, http.MethodPut, "/v1/acl/policy/readers",
		`{"Name":"readers","Description":"d","Rules":"node { policy = \"read\" }","JobACL":null,"CreateIndex":0,"ModifyIndex":0}`, tok, "secret-1")
	// The fake backend knows no ACL method: the request reached it.
	must.Eq(t, http.StatusInternalServerError, rec.Code)
	pol := be.call("ACL.UpsertPolicies").(*structs.ACLPolicyUpsertRequest)
	must.Eq(t, []*structs.ACLPolicy{{Name: "readers", Description: "d", Rules: `node { policy = "read" }`}}, pol.Policies)
	must.Eq(t, "secret-1", pol.AuthToken)

	// A token, as Nomad's client sends one; the TTL as nanoseconds or as
	// a duration.
	for _, ttl := range []string{`3600000000000`, `"1h"`} {
		do(t, h, http.MethodPut, "/v1/acl/token",
			`{"AccessorID":"","SecretID":"","Name":"n","Type":"client","Policies":["readers"],"Roles":null,"Global":false,`+
				`"CreateTime":"0001-01-01T00:00:00Z","ExpirationTTL":`+ttl+`,"CreateIndex":0,"ModifyIndex":0}`)
		up := be.call("ACL.UpsertTokens").(*structs.ACLTokenUpsertRequest)
		must.Len(t, 1, up.Tokens)
		must.Eq(t, time.Hour, up.Tokens[0].ExpirationTTL)
		must.Eq(t, []string{"readers"}, up.Tokens[0].Policies)
	}
	do(t, h, http.MethodPut, "/v1/acl/token", `{"Type":"client","Policies":["readers"],"ExpirationTTL":""}`)
	must.Eq(t, time.Duration(0), be.call("ACL.UpsertTokens").(*structs.ACLTokenUpsertRequest).Tokens[0].ExpirationTTL)
	// An update: the accessor comes from the path.
	do(t, h, http.MethodPost, "/v1/acl/token/acc-1", `{"Name":"renamed","Type":"client","Policies":["readers"]}`)
	up := be.call("ACL.UpsertTokens").(*structs.ACLTokenUpsertRequest)
	must.Eq(t, "acc-1", up.Tokens[0].AccessorID)

	do(t, h, http.MethodGet, "/v1/acl/token/self", "", tok, "secret-2")
	must.Eq(t, "secret-2", be.call("ACL.ResolveToken").(*structs.GenericRequest).AuthToken)
	do(t, h, http.MethodDelete, "/v1/acl/token/acc-1", "")
	must.Eq(t, []string{"acc-1"}, be.call("ACL.DeleteTokens").(*structs.ACLTokenDeleteRequest).AccessorIDs)

	// A namespace, as Nomad's client sends one: the name in the body.
	do(t, h, http.MethodPut, "/v1/namespace",
		`{"Name":"team","Description":"d","Quota":"","Capabilities":null,"NodePoolConfiguration":null,`+
			`"VaultConfiguration":null,"ConsulConfiguration":null,"Meta":{"k":"v"},"CreateIndex":0,"ModifyIndex":0}`)
	ns := be.call("Namespace.UpsertNamespaces").(*structs.NamespaceUpsertRequest)
	must.Eq(t, []*structs.Namespace{{Name: "team", Description: "d", Meta: map[string]string{"k": "v"}}}, ns.Namespaces)

	// The bootstrap, with and without a chosen secret.
	do(t, h, http.MethodPut, "/v1/acl/bootstrap", "")
	must.Eq(t, "", be.call("ACL.Bootstrap").(*structs.ACLTokenBootstrapRequest).BootstrapSecret)
	do(t, h, http.MethodPut, "/v1/acl/bootstrap", `{"BootstrapSecret":"2b778dd9-f5f1-6f29-b4b4-9a5fa948757a"}`)
	must.Eq(t, "2b778dd9-f5f1-6f29-b4b4-9a5fa948757a", be.call("ACL.Bootstrap").(*structs.ACLTokenBootstrapRequest).BootstrapSecret)
}

func TestACLHandlers_BadBodies(t *testing.T) {
	_, h := newTestHandler(t)
	for name, tc := range map[string]struct{ method, path, body, msg string }{
		"policy name mismatch": {http.MethodPut, "/v1/acl/policy/a", `{"Name":"b","Rules":"x"}`,
			`ACL policy name "b" in the body does not match "a" in the path`},
		"workload policy": {http.MethodPut, "/v1/acl/policy/a", `{"Rules":"x","JobACL":{"Namespace":"default"}}`,
			"JobACL (workload identity policies) is not supported"},
		"roles": {http.MethodPut, "/v1/acl/token", `{"Type":"client","Roles":[{"ID":"r"}]}`,
			"roles are not supported"},
		"accessor on create": {http.MethodPut, "/v1/acl/token", `{"AccessorID":"a","Type":"client"}`,
			"update a token at /v1/acl/token/a"},
		"accessor mismatch": {http.MethodPut, "/v1/acl/token/a", `{"AccessorID":"b"}`,
			`ACL token accessor "b" in the body does not match "a" in the path`},
		"bad ttl": {http.MethodPut, "/v1/acl/token", `{"Type":"client","ExpirationTTL":"soon"}`,
			`ExpirationTTL "soon" is not a duration`},
		"unknown field": {http.MethodPut, "/v1/acl/token", `{"Type":"client","Hash":"x"}`,
			`unknown field "Hash"`},
		"namespace quota": {http.MethodPut, "/v1/namespace", `{"Name":"a","Quota":"q"}`,
			`namespace "a": Quota is not supported by volplane`},
		"namespace without name": {http.MethodPut, "/v1/namespace", `{"Description":"x"}`,
			"the body has no namespace name"},
		"namespace name mismatch": {http.MethodPut, "/v1/namespace/a", `{"Name":"b"}`,
			`namespace name "b" in the body does not match "a" in the path`},
	} {
		t.Run(name, func(t *testing.T) {
			rec := do(t, h, tc.method, tc.path, tc.body)
			must.Eq(t, http.StatusBadRequest, rec.Code, must.Sprint(rec.Body.String()))
			must.StrContains(t, rec.Body.String(), tc.msg)
		})
	}
}

func TestACLHandlers_PermissionDeniedIs403(t *testing.T) {
	be, h := newTestHandler(t)
	be.failWith("CSIVolume.List", structs.ErrPermissionDenied)
	rec := do(t, h, http.MethodGet, "/v1/volumes", "", "X-Nomad-Token", "bad")
	must.Eq(t, http.StatusForbidden, rec.Code)
	must.Eq(t, "Permission denied", rec.Body.String())
}
