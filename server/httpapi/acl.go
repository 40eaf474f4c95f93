package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/volplane/volplane/structs"
)

// routeEndpoints names, for every route, the endpoint whose row of the
// servers' ACL table says what calling it takes: the RPC method it calls,
// or, for the routes that make no RPC call, a name of their own. A route
// without an entry fails TestRouteEndpoints_EveryRoute here and the
// servers' ACL table test.
var routeEndpoints = map[string]string{
	"GET /v1/volumes":                           "CSIVolume.List",
	"GET /v1/client/fs/logs/{alloc}":            "FileSystem.Logs",
	"GET /v1/agent/pprof/{$}":                   pprofEndpoint,
	"GET /v1/agent/pprof/cmdline":               pprofEndpoint,
	"GET /v1/agent/pprof/profile":               pprofEndpoint,
	"GET /v1/agent/pprof/symbol":                pprofEndpoint,
	"POST /v1/agent/pprof/symbol":               pprofEndpoint,
	"GET /v1/agent/pprof/trace":                 pprofEndpoint,
	"GET /v1/agent/pprof/{name}":                pprofEndpoint,
	"GET /{$}":                                  "Agent.UI",
	"GET /ui/":                                  "Agent.UI",
	"PUT /v1/volumes/snapshot":                  "CSIVolume.CreateSnapshot",
	"POST /v1/volumes/snapshot":                 "CSIVolume.CreateSnapshot",
	"GET /v1/volumes/snapshot":                  "CSIVolume.ListSnapshots",
	"DELETE /v1/volumes/snapshot":               "CSIVolume.DeleteSnapshot",
	"GET /v1/volumes/external":                  "CSIVolume.ListExternal",
	"PUT /v1/system/gc":                         "System.GarbageCollect",
	"PUT /v1/volume/csi/{id}":                   "CSIVolume.Register",
	"POST /v1/volume/csi/{id}":                  "CSIVolume.Register",
	"GET /v1/volume/csi/{id}":                   "CSIVolume.Get",
	"DELETE /v1/volume/csi/{id}":                "CSIVolume.Deregister",
	"PUT /v1/volume/csi/{id}/create":            "CSIVolume.Create",
	"POST /v1/volume/csi/{id}/create":           "CSIVolume.Create",
	"DELETE /v1/volume/csi/{id}/delete":         "CSIVolume.Delete",
	"DELETE /v1/volume/csi/{id}/detach":         "CSIVolume.Detach",
	"GET /v1/plugins":                           "CSIPlugin.List",
	"GET /v1/plugin/csi/{id}":                   "CSIPlugin.Get",
	"GET /v1/nodes":                             "Node.List",
	"GET /v1/node/{id}":                         "Node.GetNode",
	"GET /v1/node/{id}/allocations":             "Node.GetAllocs",
	"PUT /v1/node/{id}/drain":                   "Node.UpdateDrain",
	"POST /v1/node/{id}/drain":                  "Node.UpdateDrain",
	"PUT /v1/node/{id}/eligibility":             "Node.UpdateEligibility",
	"POST /v1/node/{id}/eligibility":            "Node.UpdateEligibility",
	"PUT /v1/jobs":                              "Job.Register",
	"POST /v1/jobs":                             "Job.Register",
	"GET /v1/jobs":                              "Job.List",
	"PUT /v1/job/{id}":                          "Job.Register",
	"POST /v1/job/{id}":                         "Job.Register",
	"GET /v1/job/{id}":                          "Job.GetJob",
	"DELETE /v1/job/{id}":                       "Job.Deregister",
	"GET /v1/job/{id}/allocations":              "Job.Allocations",
	"GET /v1/job/{id}/summary":                  "Job.Summary",
	"GET /v1/job/{id}/evaluations":              "Job.Evaluations",
	"GET /v1/job/{id}/deployment":               "Job.LatestDeployment",
	"GET /v1/job/{id}/deployments":              "Job.Deployments",
	"PUT /v1/job/{id}/plan":                     "Job.Plan",
	"POST /v1/job/{id}/plan":                    "Job.Plan",
	"PUT /v1/validate/job":                      "Job.Validate",
	"POST /v1/validate/job":                     "Job.Validate",
	"GET /v1/evaluations":                       "Eval.List",
	"GET /v1/evaluation/{id}":                   "Eval.GetEval",
	"GET /v1/evaluation/{id}/allocations":       "Eval.Allocations",
	"GET /v1/agent/self":                        "Agent.Self",
	"GET /v1/agent/members":                     "Agent.Members",
	"GET /v1/agent/health":                      "Agent.Health",
	"GET /v1/regions":                           "Region.List",
	"GET /v1/operator/scheduler/configuration":  "Operator.SchedulerGetConfiguration",
	"GET /v1/allocations":                       "Alloc.List",
	"GET /v1/allocation/{id}":                   "Alloc.GetAlloc",
	"GET /v1/status/leader":                     "Status.Leader",
	"GET /v1/status/peers":                      "Status.Peers",
	"GET /v1/operator/raft/configuration":       "Operator.RaftListPeers",
	"DELETE /v1/operator/raft/peer":             "Operator.RaftRemovePeer",
	"GET /v1/operator/security":                 "Operator.Security",
	"PUT /v1/operator/node-intro":               "Operator.NodeIntroCreate",
	"POST /v1/operator/node-intro":              "Operator.NodeIntroCreate",
	"GET /v1/operator/node-intro":               "Operator.NodeIntroList",
	"DELETE /v1/operator/node-intro/{accessor}": "Operator.NodeIntroDelete",
	"PUT /v1/operator/keyring/rotate":           "Keyring.Rotate",
	"POST /v1/operator/keyring/rotate":          "Keyring.Rotate",
	"GET /v1/operator/keyring/keys":             "Keyring.List",
	"GET /v1/event/stream":                      "Event.Stream",
	"GET /v1/metrics":                           "Agent.Metrics",

	"PUT /v1/acl/bootstrap":           "ACL.Bootstrap",
	"POST /v1/acl/bootstrap":          "ACL.Bootstrap",
	"GET /v1/acl/policies":            "ACL.ListPolicies",
	"GET /v1/acl/policy/{name}":       "ACL.GetPolicy",
	"PUT /v1/acl/policy/{name}":       "ACL.UpsertPolicies",
	"POST /v1/acl/policy/{name}":      "ACL.UpsertPolicies",
	"DELETE /v1/acl/policy/{name}":    "ACL.DeletePolicies",
	"GET /v1/acl/tokens":              "ACL.ListTokens",
	"PUT /v1/acl/token":               "ACL.UpsertTokens",
	"POST /v1/acl/token":              "ACL.UpsertTokens",
	"GET /v1/acl/token/self":          "ACL.ResolveToken",
	"GET /v1/acl/token/{accessor}":    "ACL.GetToken",
	"PUT /v1/acl/token/{accessor}":    "ACL.UpsertTokens",
	"POST /v1/acl/token/{accessor}":   "ACL.UpsertTokens",
	"DELETE /v1/acl/token/{accessor}": "ACL.DeleteTokens",
	"GET /v1/namespaces":              "Namespace.ListNamespaces",
	"GET /v1/namespace/{name}":        "Namespace.GetNamespace",
	"PUT /v1/namespace":               "Namespace.UpsertNamespaces",
	"POST /v1/namespace":              "Namespace.UpsertNamespaces",
	"PUT /v1/namespace/{name}":        "Namespace.UpsertNamespaces",
	"POST /v1/namespace/{name}":       "Namespace.UpsertNamespaces",
	"DELETE /v1/namespace/{name}":     "Namespace.DeleteNamespaces",
}

// Routes returns the pattern of every route the handler serves, as
// registered ("GET /v1/volumes"), sorted.
func Routes() []string {
	h := &handler{mux: http.NewServeMux()}
	h.routes()
	return h.patterns
}

// RouteEndpoint returns the name of a route's endpoint in the servers' ACL
// table, and whether the route has one.
func RouteEndpoint(pattern string) (string, bool) {
	e, ok := routeEndpoints[pattern]
	return e, ok
}

// aclRoutes are the ACL routes, with Nomad's paths.
func (h *handler) aclRoutes() map[string]endpoint {
	return map[string]endpoint{
		"PUT /v1/acl/bootstrap":           h.aclBootstrap,
		"POST /v1/acl/bootstrap":          h.aclBootstrap,
		"GET /v1/acl/policies":            h.aclPolicyList,
		"GET /v1/acl/policy/{name}":       h.aclPolicyGet,
		"PUT /v1/acl/policy/{name}":       h.aclPolicyUpsert,
		"POST /v1/acl/policy/{name}":      h.aclPolicyUpsert,
		"DELETE /v1/acl/policy/{name}":    h.aclPolicyDelete,
		"GET /v1/acl/tokens":              h.aclTokenList,
		"PUT /v1/acl/token":               h.aclTokenUpsert,
		"POST /v1/acl/token":              h.aclTokenUpsert,
		"GET /v1/acl/token/self":          h.aclTokenSelf,
		"GET /v1/acl/token/{accessor}":    h.aclTokenGet,
		"PUT /v1/acl/token/{accessor}":    h.aclTokenUpsert,
		"POST /v1/acl/token/{accessor}":   h.aclTokenUpsert,
		"DELETE /v1/acl/token/{accessor}": h.aclTokenDelete,
		"GET /v1/namespaces":              h.namespaceList,
		"GET /v1/namespace/{name}":        h.namespaceGet,
		"PUT /v1/namespace":               h.namespaceUpsert,
		"POST /v1/namespace":              h.namespaceUpsert,
		"PUT /v1/namespace/{name}":        h.namespaceUpsert,
		"POST /v1/namespace/{name}":       h.namespaceUpsert,
		"DELETE /v1/namespace/{name}":     h.namespaceDelete,
	}
}

// bootstrapBody is the optional body of PUT /v1/acl/bootstrap: an
// operator-chosen secret (a UUID), as Nomad's.
type bootstrapBody struct {
	BootstrapSecret string
}

// aclBootstrap serves PUT /v1/acl/bootstrap: the management token, with
// its secret.
func (h *handler) aclBootstrap(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.ACLTokenBootstrapRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	if r.ContentLength != 0 {
		var body bootstrapBody
		if err := h.decodeBody(w, r, &body); err != nil {
			return nil, err
		}
		args.BootstrapSecret = body.BootstrapSecret
	}
	var reply structs.ACLTokenUpsertResponse
	if err := h.backend.RPC("ACL.Bootstrap", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	if len(reply.Tokens) == 0 {
		return nil, structs.NewError(structs.ErrCodeInternal, "ACL bootstrap returned no token")
	}
	return reply.Tokens[0], nil
}

// policyBody is a policy as Nomad's client sends it.
type policyBody struct {
	Name        string
	Description string
	Rules       string
	// Nomad's workload-identity policies: volplane has no workloads with
	// identities, so a policy that sets it is refused.
	JobACL      json.RawMessage
	CreateIndex uint64
	ModifyIndex uint64
}

// aclPolicyList serves GET /v1/acl/policies.
func (h *handler) aclPolicyList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.ACLPolicyListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.ACLPolicyListResponse
	if err := h.backend.RPC("ACL.ListPolicies", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Policies), nil
}

// aclPolicyGet serves GET /v1/acl/policy/:name.
func (h *handler) aclPolicyGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.ACLPolicySpecificRequest{Name: r.PathValue("name")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleACLPolicyResponse
	if err := h.backend.RPC("ACL.GetPolicy", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Policy == nil {
		return nil, structs.ErrNotFound("ACL policy not found")
	}
	return reply.Policy, nil
}

// aclPolicyUpsert serves PUT /v1/acl/policy/:name; the body's name must be
// the path's (or empty).
func (h *handler) aclPolicyUpsert(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.ACLPolicyUpsertRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var body policyBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	switch body.Name {
	case "", name:
	default:
		return nil, structs.ErrInvalid("ACL policy name %q in the body does not match %q in the path", body.Name, name)
	}
	if set(body.JobACL) {
		return nil, structs.ErrInvalid("ACL policy %q: JobACL (workload identity policies) is not supported", name)
	}
	args.Policies = []*structs.ACLPolicy{{Name: name, Description: body.Description, Rules: body.Rules}}
	var reply structs.GenericResponse
	if err := h.backend.RPC("ACL.UpsertPolicies", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}

// aclPolicyDelete serves DELETE /v1/acl/policy/:name.
func (h *handler) aclPolicyDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.ACLPolicyDeleteRequest{Names: []string{r.PathValue("name")}}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var reply structs.GenericResponse
	if err := h.backend.RPC("ACL.DeletePolicies", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}

// tokenBody is a token as Nomad's client sends it.
type tokenBody struct {
	AccessorID string
	SecretID   string
	Name       string
	Type       string
	Policies   []string
	// Nomad's ACL roles: volplane has none, so a token naming one is
	// refused.
	Roles          []json.RawMessage
	Global         bool
	CreateTime     time.Time
	ExpirationTime *time.Time
	ExpirationTTL  duration
	CreateIndex    uint64
	ModifyIndex    uint64
}

// duration is a JSON duration: nanoseconds, as Nomad's client sends a
// time.Duration, or a string such as "1h".
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*d = duration(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return structs.ErrInvalid("ExpirationTTL must be a number of nanoseconds or a duration such as \"1h\"")
	}
	if str == "" {
		// Nomad's client sends a token without a TTL so.
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(str)
	if err != nil {
		return structs.ErrInvalid("ExpirationTTL %q is not a duration such as \"1h\"", str)
	}
	*d = duration(v)
	return nil
}

// aclTokenUpsert serves PUT /v1/acl/token (create) and
// PUT /v1/acl/token/:accessor (update): the token, with its secret only
// when it was created.
func (h *handler) aclTokenUpsert(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.ACLTokenUpsertRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var body tokenBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if accessor := r.PathValue("accessor"); accessor != "" {
		switch body.AccessorID {
		case "":
			body.AccessorID = accessor
		case accessor:
		default:
			return nil, structs.ErrInvalid("ACL token accessor %q in the body does not match %q in the path", body.AccessorID, accessor)
		}
	} else if body.AccessorID != "" {
		return nil, structs.ErrInvalid("ACL token: update a token at /v1/acl/token/%s", body.AccessorID)
	}
	if len(body.Roles) > 0 {
		return nil, structs.ErrInvalid("ACL token: roles are not supported; give policies")
	}
	args.Tokens = []*structs.ACLToken{{
		AccessorID: body.AccessorID, SecretID: body.SecretID, Name: body.Name, Type: body.Type,
		Policies: body.Policies, ExpirationTime: body.ExpirationTime, ExpirationTTL: time.Duration(body.ExpirationTTL),
	}}
	var reply structs.ACLTokenUpsertResponse
	if err := h.backend.RPC("ACL.UpsertTokens", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	if len(reply.Tokens) == 0 {
		return nil, structs.NewError(structs.ErrCodeInternal, "ACL token upsert returned no token")
	}
	return reply.Tokens[0], nil
}

// aclTokenList serves GET /v1/acl/tokens.
func (h *handler) aclTokenList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.ACLTokenListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.ACLTokenListResponse
	if err := h.backend.RPC("ACL.ListTokens", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Tokens), nil
}

// aclTokenGet serves GET /v1/acl/token/:accessor, never with the secret.
func (h *handler) aclTokenGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.ACLTokenSpecificRequest{AccessorID: r.PathValue("accessor")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleACLTokenResponse
	if err := h.backend.RPC("ACL.GetToken", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Token == nil {
		return nil, structs.ErrNotFound("ACL token not found")
	}
	return reply.Token.Public(), nil
}

// aclTokenSelf serves GET /v1/acl/token/self: the caller's own token.
func (h *handler) aclTokenSelf(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.GenericRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleACLTokenResponse
	if err := h.backend.RPC("ACL.ResolveToken", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Token == nil {
		return nil, structs.ErrNotFound("ACL token not found")
	}
	return reply.Token.Public(), nil
}

// aclTokenDelete serves DELETE /v1/acl/token/:accessor.
func (h *handler) aclTokenDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.ACLTokenDeleteRequest{AccessorIDs: []string{r.PathValue("accessor")}}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var reply structs.GenericResponse
	if err := h.backend.RPC("ACL.DeleteTokens", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}

// set reports whether an optional JSON value was given (not absent, not
// null).
func set(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}
