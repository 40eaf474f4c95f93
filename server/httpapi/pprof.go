package httpapi

import (
	"net/http"
	"net/http/pprof"
)

// pprofRoutes are Nomad's agent profiling routes (GET /v1/agent/pprof/...),
// served by net/http/pprof for this agent's own process: the index of
// profiles, cmdline, profile?seconds= (CPU), symbol, trace?seconds=, and
// each named runtime profile (heap, goroutine, allocs, block, mutex,
// threadcreate; ?debug= and ?gc= as net/http/pprof takes them). Every
// request is first checked by Config.AuthorizeDebug: as in Nomad, with
// ACLs off the agent must run with enable_debug = true, and with ACLs on
// the token must have agent write.
func (h *handler) pprofRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/agent/pprof/{$}":     h.debugOnly(pprof.Index),
		"GET /v1/agent/pprof/cmdline": h.debugOnly(pprof.Cmdline),
		"GET /v1/agent/pprof/profile": h.debugOnly(pprof.Profile),
		"GET /v1/agent/pprof/symbol":  h.debugOnly(pprof.Symbol),
		"POST /v1/agent/pprof/symbol": h.debugOnly(pprof.Symbol),
		"GET /v1/agent/pprof/trace":   h.debugOnly(pprof.Trace),
		"GET /v1/agent/pprof/{name}": h.debugOnly(func(w http.ResponseWriter, r *http.Request) {
			// net/http/pprof answers 404 "Unknown profile" to a name the
			// runtime does not have.
			pprof.Handler(r.PathValue("name")).ServeHTTP(w, r)
		}),
	}
}

// pprofEndpoint is the name of the profiling routes in the servers' ACL
// table.
const pprofEndpoint = "Agent.Pprof"

// debugOnly serves fn when the request may profile the agent.
func (h *handler) debugOnly(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.authorizeDebug == nil {
			writeText(w, http.StatusNotFound, "404 page not found")
			return
		}
		if err := h.authorizeDebug(r.Header.Get(headerToken)); err != nil {
			h.writeError(w, r, err)
			return
		}
		fn(w, r)
	}
}
