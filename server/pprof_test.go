package server

import (
	"net/http"
	"testing"

	"github.com/shoenig/test/must"
)

// pprofPaths are the profiling routes, each with what its answer starts
// with or holds.
var pprofPaths = []struct{ path, holds string }{
	{"/v1/agent/pprof/", "goroutine"},
	{"/v1/agent/pprof/cmdline", ""},
	{"/v1/agent/pprof/symbol", "num_symbols"},
	{"/v1/agent/pprof/goroutine?debug=1", "goroutine profile"},
	{"/v1/agent/pprof/heap?debug=1", "heap profile"},
	{"/v1/agent/pprof/profile?seconds=1", ""},
	{"/v1/agent/pprof/trace?seconds=1", ""},
}

// Without ACLs the profiling routes answer only with enable_debug, as
// Nomad's; by default they are refused.
func TestPprof_EnableDebug(t *testing.T) {
	off := TestServer(t, nil)
	WaitForLeader(t, off)
	for _, p := range pprofPaths {
		status, body := httpAs(t, off, http.MethodGet, p.path, "", "")
		must.Eq(t, http.StatusForbidden, status, must.Sprintf("%s: %s", p.path, body))
		must.Eq(t, "Permission denied", body)
	}

	on := TestServer(t, func(c *Config) { c.EnableDebug = true })
	WaitForLeader(t, on)
	for _, p := range pprofPaths {
		status, body := httpAs(t, on, http.MethodGet, p.path, "", "")
		must.Eq(t, http.StatusOK, status, must.Sprintf("%s: %s", p.path, body))
		must.StrContains(t, body, p.holds, must.Sprint(p.path))
		must.Positive(t, len(body), must.Sprint(p.path))
	}
	status, _ := httpAs(t, on, http.MethodGet, "/v1/agent/pprof/nosuchprofile", "", "")
	must.Eq(t, http.StatusNotFound, status)
}

// With ACLs on, a token with agent write profiles the agent (enable_debug
// or not, as in Nomad); agent read, another token or none is refused.
func TestPprof_ACL(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	write := tokenWith(t, s, mgmt, `agent { policy = "write" }`)
	read := tokenWith(t, s, mgmt, `agent { policy = "read" }`)
	operator := tokenWith(t, s, mgmt, `operator { policy = "write" }`)
	path := "/v1/agent/pprof/heap?debug=1"
	for _, tok := range []string{"", read.SecretID, operator.SecretID} {
		status, body := httpAs(t, s, http.MethodGet, path, "", tok)
		must.Eq(t, http.StatusForbidden, status, must.Sprint(body))
	}
	for _, tok := range []string{write.SecretID, mgmt} {
		status, body := httpAs(t, s, http.MethodGet, path, "", tok)
		must.Eq(t, http.StatusOK, status, must.Sprint(body))
		must.StrContains(t, body, "heap profile")
	}
}
