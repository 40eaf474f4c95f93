package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi"
	"github.com/volplane/volplane/structs"
)

// routeFixture is what a request to one route needs besides its token: a
// query and a body the HTTP layer accepts, so that the request reaches its
// endpoint's ACL check.
var routeFixture = map[string]struct{ query, body string }{
	"CSIVolume.Register":         {body: `{"Volumes":[{"ID":"x","PluginID":"p"}]}`},
	"CSIVolume.Create":           {body: `{"Volumes":[{"ID":"x","PluginID":"p"}]}`},
	"CSIVolume.Detach":           {query: "node=n1"},
	"Job.Register":               {body: `{"Job":{"ID":"x","Name":"x","Type":"service"}}`},
	"Job.Plan":                   {body: `{"Job":{"ID":"x","Name":"x","Type":"service"}}`},
	"Job.Validate":               {body: `{"Job":{"ID":"x","Name":"x","Type":"service"}}`},
	"Operator.RaftRemovePeer":    {query: "id=nope"},
	"Operator.NodeIntroCreate":   {body: `{}`},
	"Node.UpdateDrain":           {body: `{"DrainSpec":{"Deadline":3600000000000}}`},
	"Node.UpdateEligibility":     {body: `{"Eligibility":"ineligible"}`},
	"ACL.UpsertPolicies":         {body: `{"Rules":"node { policy = \"read\" }"}`},
	"ACL.UpsertTokens":           {body: `{"Name":"t","Type":"client","Policies":["target"]}`},
	"Namespace.UpsertNamespaces": {body: `{"Name":"target"}`},
	"CSIVolume.CreateSnapshot":   {body: `{"Snapshots":[{"SourceVolumeID":"x","PluginID":"p"}]}`},
	"CSIVolume.DeleteSnapshot":   {query: "plugin_id=p&snapshot_id=s"},
	// Profiles: one second, not the default thirty.
	"Agent.Pprof": {query: "seconds=1"},
	// Writes without a body.
	"ACL.Bootstrap":         {},
	"Keyring.Rotate":        {},
	"System.GarbageCollect": {},
}

// httpAs sends one request and returns the status and the body (the first
// bytes of a stream).
func httpAs(t *testing.T, s *Server, method, path, body, token string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.HTTPAddr()+path, rd)
	must.NoError(t, err)
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	must.NoError(t, err)
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "application/x-ndjson" {
		// An event stream: its status says all; it never ends by itself.
		return resp.StatusCode, ""
	}
	b, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestACL_EveryRoute visits every HTTP route with no token, a token that
// does not resolve, a token lacking each thing its endpoint's row of
// aclRules asks for, and one that has it all: 403 with Nomad's text where
// the row refuses, anything else where it allows. A route added without a
// row (or without a fixture here, when its body must say something) fails.
func TestACL_EveryRoute(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	call := func(method string, args structs.RequestWithToken, reply any) {
		t.Helper()
		args.SetRequestToken(mgmt)
		must.NoError(t, s.RPC(method, args, reply))
	}
	garbage := "not-a-token"

	for _, pattern := range httpapi.Routes() {
		endpoint, ok := httpapi.RouteEndpoint(pattern)
		must.True(t, ok, must.Sprintf("route %q has no endpoint", pattern))
		rule, ok := aclRules[endpoint]
		must.True(t, ok, must.Sprintf("route %q: endpoint %s has no row in aclRules", pattern, endpoint))
		t.Run(pattern, func(t *testing.T) {
			// The objects a route names by path: re-made for each route,
			// since the routes that delete them do.
			call("ACL.UpsertPolicies", &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{
				{Name: "target", Rules: `node { policy = "read" }`}}}, &structs.GenericResponse{})
			var tok structs.ACLTokenUpsertResponse
			call("ACL.UpsertTokens", &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{
				{Name: "target", Type: structs.ACLClientToken, Policies: []string{"target"}}}}, &tok)
			call("Namespace.UpsertNamespaces", &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{
				{Name: "target"}}}, &structs.GenericResponse{})

			method, path, _ := strings.Cut(pattern, " ")
			path = strings.NewReplacer("{id}", "x", "{name}", "target", "{accessor}", tok.Tokens[0].AccessorID).Replace(path)
			fx, hasFixture := routeFixture[endpoint]
			if fx.query != "" {
				path += "?" + fx.query
			}
			if strings.HasPrefix(pattern, "PUT /v1/namespace/") || strings.HasPrefix(pattern, "POST /v1/namespace/") {
				fx.body = `{}`
			}
			if (method == http.MethodPut || method == http.MethodPost) && !hasFixture {
				t.Fatalf("route %q has no fixture in routeFixture: give it a body its endpoint's check can be reached with", pattern)
			}
			denied := func(what, token, text string) {
				t.Helper()
				status, body := httpAs(t, s, method, path, fx.body, token)
				must.Eq(t, http.StatusForbidden, status, must.Sprintf("%s: %s", what, body))
				must.Eq(t, text, body, must.Sprint(what))
			}
			allowed := func(what, token string) {
				t.Helper()
				status, body := httpAs(t, s, method, path, fx.body, token)
				must.NotEq(t, http.StatusForbidden, status, must.Sprintf("%s: %s", what, body))
			}

			switch {
			case rule.kind == ruleOpen:
				allowed("no token", "")
				return
			case rule.kind != ruleToken:
				t.Fatalf("route %q leads to %s, a %s endpoint that no HTTP route may call", pattern, endpoint, rule.kind)
			}
			denied("a token that does not resolve", garbage, "ACL token not found")
			if rule.check != nil {
				// The token's own objects: an unrelated token is refused,
				// a management token reads every one.
				denied("no token", "", "Permission denied")
				other := tokenWith(t, s, mgmt, `namespace "elsewhere" { policy = "write" }`)
				denied("another token", other.SecretID, "Permission denied")
				allowed("a management token", mgmt)
				return
			}
			needs := ruleNeeds(rule, nil)
			with, lacking := grantsFor(t, s, mgmt, needs)
			if len(needs) == 0 {
				allowed("no token (the anonymous token's view)", "")
			} else {
				denied("no token", "", "Permission denied")
			}
			for _, l := range lacking {
				denied("a token lacking one need", l, "Permission denied")
			}
			allowed("a token with every need", with)
		})
	}
}

// TestACL_Off: without ACLs every request goes through as before, tokens
// or not, and the ACL routes say ACLs are off.
func TestACL_Off(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	status, body := httpAs(t, s, http.MethodGet, "/v1/volumes", "", "garbage")
	must.Eq(t, http.StatusOK, status, must.Sprint(body))
	status, body = httpAs(t, s, http.MethodPut, "/v1/acl/bootstrap", "", "")
	must.Eq(t, http.StatusBadRequest, status)
	must.Eq(t, "ACL support disabled", body)
	// Namespaces are there with or without ACLs.
	status, body = httpAs(t, s, http.MethodPut, "/v1/namespace", `{"Name":"team"}`, "")
	must.Eq(t, http.StatusOK, status, must.Sprint(body))
	status, body = httpAs(t, s, http.MethodGet, "/v1/namespaces", "", "")
	must.Eq(t, http.StatusOK, status)
	must.StrContains(t, body, `"Name":"team"`)
	must.StrContains(t, body, `"Name":"default"`)
}
