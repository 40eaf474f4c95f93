package command

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"
)

// request is one request the fake agent received.
type request struct {
	Method, Path, Query, Token, Body string
}

// fakeAgent is a test double of the agent's HTTP API: canned answers for
// fixed routes, and a record of every request so that tests can assert what
// the CLI sent. The real server has end-to-end tests of its own.
type fakeAgent struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []request
	routes map[string]http.HandlerFunc
	// newRequest is closed (and replaced) on every request, for handlers
	// that wait for another request to come.
	newRequest chan struct{}
}

func newFakeAgent(t *testing.T) *fakeAgent {
	f := &fakeAgent{t: t, routes: map[string]http.HandlerFunc{}, newRequest: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		route := r.Method + " " + r.URL.EscapedPath()
		f.mu.Lock()
		f.reqs = append(f.reqs, request{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("X-Nomad-Token"), string(body)})
		close(f.newRequest)
		f.newRequest = make(chan struct{})
		h := f.routes[route]
		f.mu.Unlock()
		if h == nil {
			http.Error(w, "no canned answer for "+route, http.StatusNotFound)
			return
		}
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	// Commands default -address to $VOLPLANE_ADDR.
	t.Setenv("VOLPLANE_ADDR", f.srv.URL)
	t.Setenv("VOLPLANE_TOKEN", "")
	t.Setenv("VOLPLANE_NAMESPACE", "")
	return f
}

// json answers route with status and body encoded as JSON.
func (f *fakeAgent) json(route string, status int, body any) {
	f.routes[route] = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Nomad-Index", "10")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		w.WriteHeader(status)
		must.NoError(f.t, json.NewEncoder(w).Encode(body))
	}
}

// text answers route with status and a plain-text message, as the server
// does for errors.
func (f *fakeAgent) text(route string, status int, msg string) {
	f.routes[route] = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, msg+"\n")
	}
}

func (f *fakeAgent) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// result is what one CLI run printed and returned.
type result struct {
	code        int
	out, stderr string
}

// run runs the CLI with args as typed after "volplane", stdin as input.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ui := cli.NewMockUi()
	code := runWith(args, ui, strings.NewReader(stdin))
	return result{code: code, out: ui.OutputWriter.String(), stderr: ui.ErrorWriter.String()}
}

// closedAddress returns an address nothing listens on.
func closedAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	addr := l.Addr().String()
	must.NoError(t, l.Close())
	return addr
}
