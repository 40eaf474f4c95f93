// Package httpapi is volplane's HTTP API. It speaks Nomad's dialect: the
// same paths, JSON field names and X-Nomad-* headers, so that Nomad's
// official Go client (github.com/hashicorp/nomad/api) and the nomad CLI
// work against it unchanged. Answers about jobs, allocations, volumes and
// plugins carry every field of volplane's structs (its own CLI and UI read
// them) plus the fields of Nomad's objects that Nomad's CLI reads; job
// bodies may be volplane's structs.Job or Nomad's api.Job (job_wire.go).
//
// The package holds no state. Every request becomes one in-process RPC on a
// Backend (the server, which forwards to the leader as needed); the typed
// *structs.Error it returns is turned into an HTTP status in one place
// (statusOf).
//
// Routes:
//
//	GET         /v1/volumes?type=csi[&plugin_id=&node_id=]   bare JSON array of volume stubs ([] for type=host)
//	PUT, POST   /v1/volume/csi/:id                            register; body {"Volumes":[...]}
//	GET         /v1/volume/csi/:id                            one volume, sanitized, with ReadAllocs, WriteAllocs, Allocations
//	DELETE      /v1/volume/csi/:id[?force=true]               deregister
//	PUT, POST   /v1/volume/csi/:id/create                     create in the plugin, then register
//	DELETE      /v1/volume/csi/:id/delete                     delete in the plugin, then deregister
//	DELETE      /v1/volume/csi/:id/detach?node=               release the volume's claims on a node now
//	PUT, POST   /v1/volumes/snapshot                          snapshot volumes; body {"Snapshots":[{"SourceVolumeID",...}]}
//	GET         /v1/volumes/snapshot?plugin_id=               a page of a plugin's snapshots (per_page, next_token)
//	DELETE      /v1/volumes/snapshot?plugin_id=&snapshot_id=  delete a snapshot
//	GET         /v1/volumes/external?plugin_id=               a page of the volumes the plugin's storage provider holds
//	PUT         /v1/system/gc                                 remove down nodes and unused plugins now
//	GET         /v1/plugins?type=csi                          bare JSON array of plugin stubs
//	GET         /v1/plugin/csi/:id                            one plugin, with Allocations
//	GET         /v1/nodes                                     bare JSON array of node stubs
//	GET         /v1/node/:id                                  one node
//	GET         /v1/node/:id/allocations                      bare JSON array of the node's allocations
//	PUT, POST   /v1/node/:id/drain                            start, update or end a node's drain (Nomad's NodeUpdateDrainRequest)
//	PUT, POST   /v1/node/:id/eligibility                      set a node's scheduling eligibility; body {"Eligibility"}
//	PUT, POST   /v1/jobs                                      register a job; body Nomad's JobRegisterRequest {"Job":{...},...}
//	PUT, POST   /v1/job/:id                                   the same, for the job of that ID
//	GET         /v1/jobs[?prefix=]                            bare JSON array of job stubs, each with its JobSummary
//	GET         /v1/job/:id                                   one job, mount flags redacted
//	DELETE      /v1/job/:id[?purge=true]                      stop a job (and with purge, remove it)
//	GET         /v1/job/:id/allocations                       bare JSON array of the job's allocations
//	GET         /v1/job/:id/summary                           Nomad's JobSummary: allocations by group and client status
//	GET         /v1/job/:id/evaluations                       the job's evaluations, derived (see Evaluation)
//	GET         /v1/job/:id/deployment                        null: volplane has no deployments
//	GET         /v1/job/:id/deployments                       []
//	PUT, POST   /v1/job/:id/plan                              a dry run of the placer: Nomad's JobPlanResponse
//	PUT, POST   /v1/validate/job                              Nomad's JobValidateResponse
//	GET         /v1/evaluations[?prefix=&job=&status=]        the evaluations of every job the caller may read
//	GET         /v1/evaluation/:id                            one evaluation
//	GET         /v1/evaluation/:id/allocations                the allocations it placed, as stubs
//	GET         /v1/allocations[?prefix=]                     bare JSON array of allocations
//	GET         /v1/allocation/:id                            one allocation, with its job and Nomad's TaskStates
//	GET         /v1/status/leader                             JSON string: the leader's RPC address
//	GET         /v1/status/peers                              JSON array of Raft peer addresses
//	GET         /v1/operator/raft/configuration               the Raft configuration
//	DELETE      /v1/operator/raft/peer?id=|address=           remove a Raft peer
//	GET         /v1/operator/security                         how the answering server is protected (TLS, node introduction)
//	PUT, POST   /v1/operator/node-intro                       create a node introduction token; body {"Name","TTL","SingleUse"}
//	GET         /v1/operator/node-intro                       list node introduction tokens (never their secrets)
//	DELETE      /v1/operator/node-intro/:accessor             revoke a node introduction token
//	PUT, POST   /v1/operator/keyring/rotate[?full=true]       a new active root key; full seals every volume again
//	GET         /v1/operator/keyring/keys                     the root keys (never their material)
//	GET         /v1/event/stream[?topic=&index=&namespace=]   newline-delimited JSON frames of events of this server's state (see eventStream)
//	GET         /v1/metrics[?format=prometheus]               Nomad's JSON metrics summary, or the Prometheus text format
//	GET         /v1/agent/self                                the answering server: config, member, stats
//	GET         /v1/agent/members                             the servers of the Raft configuration, as Nomad's ServerMembers
//	GET         /v1/agent/health                              healthy while a leader is known
//	GET         /v1/regions                                   ["global"], or the server's region
//	GET         /v1/operator/scheduler/configuration          the placer's fixed configuration, as Nomad's
//	PUT, POST   /v1/acl/bootstrap                             create the first management token (body {"BootstrapSecret"} optional)
//	GET         /v1/acl/policies                              bare JSON array of policy stubs the token may see
//	GET, PUT, POST, DELETE /v1/acl/policy/:name               one ACL policy; body {"Name","Description","Rules"}
//	GET         /v1/acl/tokens                                bare JSON array of token stubs (management)
//	PUT, POST   /v1/acl/token                                 create a token; the answer carries its SecretID, this once
//	GET         /v1/acl/token/self                            the caller's own token
//	GET, PUT, POST, DELETE /v1/acl/token/:accessor            one ACL token (never its secret)
//	GET         /v1/namespaces                                bare JSON array of the namespaces the token may see
//	PUT, POST   /v1/namespace[/:name]                         create or update a namespace; body {"Name","Description","Meta"}
//	GET, DELETE /v1/namespace/:name                           one namespace
//
// With ACLs enabled every route's endpoint (routeEndpoints) is checked
// against the caller's token by the servers; a refusal is a 403 whose body
// is "Permission denied" (or "ACL token not found", "ACL token expired").

//	GET         /v1/client/fs/logs/:alloc?task=&type=[&follow=&origin=&offset=&plain=]  a task's stdout or stderr (see allocLogs)
//	GET         /ui/                                          the web UI (see ui.go); / redirects there
//	GET         /v1/agent/pprof/[cmdline|profile|symbol|trace|heap|goroutine|...]  profiles of this agent (see pprofRoutes)
//
// Reads take index, wait, stale, namespace, region, prefix, per_page and
// next_token, and answer with X-Nomad-Index, X-Nomad-KnownLeader,
// X-Nomad-LastContact and, when there is a next page, X-Nomad-NextToken.
// Writes answer with X-Nomad-Index. The X-Nomad-Token header is the caller's
// token. Errors are plain text with the status of their code.
package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/ui"
)

// Backend is the server as the HTTP API sees it.
type Backend interface {
	// RPC makes an in-process call to a server endpoint (which forwards to
	// the leader as needed). Errors are *structs.Error with a code.
	RPC(method string, args, reply any) error
}

// Config configures NewHandler.
type Config struct {
	Backend Backend
	// Logger receives one debug line per request; nil discards.
	Logger hclog.Logger
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// Events returns the event broker of the server's current state store.
	// It is called for each subscription because a snapshot restore
	// replaces the store. Nil disables GET /v1/event/stream (404).
	Events func() *state.EventBroker
	// EventHeartbeat is how long an event stream stays silent before a
	// heartbeat line; 0 means DefaultEventHeartbeat.
	EventHeartbeat time.Duration
	// ShutdownCh, closed when the server shuts down, ends every event
	// stream: http.Server.Shutdown waits for running handlers, it does not
	// stop them.
	ShutdownCh <-chan struct{}
	// Metrics serves GET /v1/metrics; nil disables it (404).
	Metrics http.Handler
	// EventFilter, when set (ACLs on), checks the token of an event stream
	// subscription and returns which events it may see; the returned
	// function's error ends the stream (the token was deleted or expired).
	EventFilter func(token string) (func(ev state.Event) (bool, error), error)
	// BodyTimeout bounds the reading of one request body, so a body sent a
	// byte at a time cannot hold a connection and a handler forever; 0
	// means DefaultBodyTimeout.
	BodyTimeout time.Duration

	// WritesReady, when set, holds every write (a request of any method
	// but GET and HEAD) until it is closed, for at most WritesReadyTimeout
	// (DefaultWritesReadyTimeout when 0); then the write goes ahead and
	// succeeds or fails on its own. The dev agent closes it once its own
	// client has registered, so that a script that starts the agent and
	// creates a volume at once finds the client's plugin. Reads are never
	// held.
	WritesReady        <-chan struct{}
	WritesReadyTimeout time.Duration

	// Agent returns what the answering server says about itself and the
	// servers it knows (/v1/agent/self, /v1/agent/members, the region of
	// Nomad-shaped answers). Nil: those routes answer 404 and the region
	// is "global".
	Agent func() AgentInfo
	// Authorize, when set (ACLs on), checks a token against the servers'
	// ACL row of a route that makes no RPC call (routeEndpoints names it),
	// for a request in namespace ("" for the default).
	Authorize func(endpoint, token, namespace string) error
	// AuthorizeDebug decides whether a request with the given token may
	// use the profiling routes (GET /v1/agent/pprof/...); nil answers
	// them 404.
	AuthorizeDebug func(token string) error

	// StubCacheBytes bounds the cache of encoded volume stubs (see
	// stubCache); 0 means DefaultStubCacheBytes.
	StubCacheBytes int
}

// DefaultBodyTimeout is the body read bound when Config.BodyTimeout is 0.
const DefaultBodyTimeout = 30 * time.Second

// DefaultWritesReadyTimeout bounds how long a write waits for WritesReady.
const DefaultWritesReadyTimeout = 30 * time.Second

// DefaultMaxBodyBytes is the body limit when Config.MaxBodyBytes is 0.
const DefaultMaxBodyBytes int64 = 4 << 20

// Response headers shared with Nomad.
const (
	headerIndex       = "X-Nomad-Index"
	headerKnownLeader = "X-Nomad-KnownLeader"
	headerLastContact = "X-Nomad-LastContact"
	headerNextToken   = "X-Nomad-NextToken"
	headerToken       = "X-Nomad-Token"
)

type handler struct {
	backend Backend
	logger  hclog.Logger
	maxBody int64
	bodyTTL time.Duration
	mux     *http.ServeMux

	events         func() *state.EventBroker
	heartbeat      time.Duration
	shutdownCh     <-chan struct{}
	metricsHandler http.Handler

	writesReady        <-chan struct{}
	writesReadyTimeout time.Duration

	eventFilter    func(token string) (func(ev state.Event) (bool, error), error)
	agent          func() AgentInfo
	authorize      func(endpoint, token, namespace string) error
	authorizeDebug func(token string) error
	// stubs caches encoded volume stubs; gz the compressed large bodies.
	stubs *stubCache
	gz    gzipRecent
	// patterns are the routes, as registered, for Routes.
	patterns []string
}

// NewHandler returns the HTTP API served over cfg.Backend. It panics when
// cfg.Backend is nil: that is a wiring mistake, not a runtime condition.
func NewHandler(cfg Config) http.Handler {
	if cfg.Backend == nil {
		panic("httpapi: Config.Backend is nil")
	}
	h := &handler{
		backend: cfg.Backend,
		logger:  cfg.Logger,
		maxBody: cfg.MaxBodyBytes,
		bodyTTL: cfg.BodyTimeout,
		mux:     http.NewServeMux(),

		events:         cfg.Events,
		heartbeat:      cfg.EventHeartbeat,
		shutdownCh:     cfg.ShutdownCh,
		metricsHandler: cfg.Metrics,

		writesReady:        cfg.WritesReady,
		writesReadyTimeout: cfg.WritesReadyTimeout,
		eventFilter:        cfg.EventFilter,
		agent:              cfg.Agent,
		authorize:          cfg.Authorize,
		authorizeDebug:     cfg.AuthorizeDebug,
		stubs:              newStubCache(cfg.StubCacheBytes),
	}
	if h.logger == nil {
		h.logger = hclog.NewNullLogger()
	}
	h.logger = h.logger.Named("http")
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	if h.heartbeat <= 0 {
		h.heartbeat = DefaultEventHeartbeat
	}
	if h.bodyTTL <= 0 {
		h.bodyTTL = DefaultBodyTimeout
	}
	if h.writesReadyTimeout <= 0 {
		h.writesReadyTimeout = DefaultWritesReadyTimeout
	}
	h.routes()
	return h
}

// endpoint serves one route. It returns the value to encode as the JSON body
// (nil for an empty 200) or an error, which becomes a plain-text answer.
// Endpoints set their X-Nomad-* headers only after the RPC succeeded, so a
// failed RPC answers without them.
type endpoint func(w http.ResponseWriter, r *http.Request) (any, error)

// routes is the one table of paths. ServeMux answers unknown paths with 404
// and known paths with the wrong method with 405 and an Allow header.
func (h *handler) routes() {
	for pattern, fn := range map[string]endpoint{
		"GET /v1/volumes":                           h.volumeList,
		"PUT /v1/volume/csi/{id}":                   h.volumeRegister,
		"POST /v1/volume/csi/{id}":                  h.volumeRegister,
		"GET /v1/volume/csi/{id}":                   h.volumeGet,
		"DELETE /v1/volume/csi/{id}":                h.volumeDeregister,
		"PUT /v1/volume/csi/{id}/create":            h.volumeCreate,
		"POST /v1/volume/csi/{id}/create":           h.volumeCreate,
		"DELETE /v1/volume/csi/{id}/delete":         h.volumeDelete,
		"DELETE /v1/volume/csi/{id}/detach":         h.volumeDetach,
		"PUT /v1/volumes/snapshot":                  h.snapshotCreate,
		"POST /v1/volumes/snapshot":                 h.snapshotCreate,
		"GET /v1/volumes/snapshot":                  h.snapshotList,
		"DELETE /v1/volumes/snapshot":               h.snapshotDelete,
		"GET /v1/volumes/external":                  h.volumeListExternal,
		"PUT /v1/system/gc":                         h.systemGC,
		"GET /v1/plugins":                           h.pluginList,
		"GET /v1/plugin/csi/{id}":                   h.pluginGet,
		"GET /v1/nodes":                             h.nodeList,
		"GET /v1/node/{id}":                         h.nodeGet,
		"GET /v1/node/{id}/allocations":             h.nodeAllocations,
		"PUT /v1/node/{id}/drain":                   h.nodeDrain,
		"POST /v1/node/{id}/drain":                  h.nodeDrain,
		"PUT /v1/node/{id}/eligibility":             h.nodeEligibility,
		"POST /v1/node/{id}/eligibility":            h.nodeEligibility,
		"PUT /v1/jobs":                              h.jobRegister,
		"POST /v1/jobs":                             h.jobRegister,
		"GET /v1/jobs":                              h.jobList,
		"PUT /v1/job/{id}":                          h.jobRegister,
		"POST /v1/job/{id}":                         h.jobRegister,
		"GET /v1/job/{id}":                          h.jobGet,
		"DELETE /v1/job/{id}":                       h.jobDeregister,
		"GET /v1/job/{id}/allocations":              h.jobAllocations,
		"GET /v1/job/{id}/summary":                  h.jobSummary,
		"GET /v1/job/{id}/evaluations":              h.jobEvaluations,
		"GET /v1/job/{id}/deployment":               h.jobDeployment,
		"GET /v1/job/{id}/deployments":              h.jobDeployments,
		"PUT /v1/job/{id}/plan":                     h.jobPlan,
		"POST /v1/job/{id}/plan":                    h.jobPlan,
		"PUT /v1/validate/job":                      h.jobValidate,
		"POST /v1/validate/job":                     h.jobValidate,
		"GET /v1/evaluations":                       h.evalList,
		"GET /v1/evaluation/{id}":                   h.evalGet,
		"GET /v1/evaluation/{id}/allocations":       h.evalAllocations,
		"GET /v1/agent/self":                        h.agentSelf,
		"GET /v1/agent/members":                     h.agentMembers,
		"GET /v1/agent/health":                      h.agentHealth,
		"GET /v1/regions":                           h.regions,
		"GET /v1/operator/scheduler/configuration":  h.schedulerConfiguration,
		"GET /v1/allocations":                       h.allocList,
		"GET /v1/allocation/{id}":                   h.allocGet,
		"GET /v1/status/leader":                     h.statusLeader,
		"GET /v1/status/peers":                      h.statusPeers,
		"GET /v1/operator/raft/configuration":       h.raftConfiguration,
		"DELETE /v1/operator/raft/peer":             h.raftRemovePeer,
		"GET /v1/operator/security":                 h.security,
		"PUT /v1/operator/node-intro":               h.nodeIntroCreate,
		"POST /v1/operator/node-intro":              h.nodeIntroCreate,
		"GET /v1/operator/node-intro":               h.nodeIntroList,
		"DELETE /v1/operator/node-intro/{accessor}": h.nodeIntroDelete,
		"PUT /v1/operator/keyring/rotate":           h.keyringRotate,
		"POST /v1/operator/keyring/rotate":          h.keyringRotate,
		"GET /v1/operator/keyring/keys":             h.keyringList,
	} {
		h.handle(pattern, h.wrap(fn))
	}
	for pattern, fn := range h.aclRoutes() {
		h.handle(pattern, h.wrap(fn))
	}
	// Routes that write their own answer: a stream, and a foreign format.
	for pattern, fn := range map[string]http.HandlerFunc{
		"GET /v1/event/stream":           h.eventStream,
		"GET /v1/metrics":                h.metrics,
		"GET /v1/client/fs/logs/{alloc}": h.allocLogs,
		"GET /{$}":                       uiRedirect,
		"GET /ui/":                       uiHandler(ui.Bundle()).ServeHTTP,
	} {
		h.handle(pattern, fn)
	}
	for pattern, fn := range h.pprofRoutes() {
		h.handle(pattern, fn)
	}
	slices.Sort(h.patterns)
}

// handle registers one route and records its pattern.
func (h *handler) handle(pattern string, fn http.HandlerFunc) {
	h.mux.HandleFunc(pattern, fn)
	h.patterns = append(h.patterns, pattern)
}

// ServeHTTP logs every request at debug level: method, path, status and
// duration. Never the query string or the body, which may carry secrets.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.logger.Error("request handler panicked", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p))
			if !rec.wrote {
				writeText(rec, http.StatusInternalServerError, "internal error")
			}
		}
		h.logger.Debug("request", "method", r.Method, "path", r.URL.Path,
			"status", rec.code(), "duration", time.Since(start))
	}()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.waitWritesReady(r)
	}
	h.mux.ServeHTTP(rec, r)
}

// waitWritesReady holds a write until WritesReady is closed, the wait is
// over or the caller goes away (the write then fails on its own context).
func (h *handler) waitWritesReady(r *http.Request) {
	if h.writesReady == nil {
		return
	}
	select {
	case <-h.writesReady:
		return
	default:
	}
	t := time.NewTimer(h.writesReadyTimeout)
	defer t.Stop()
	select {
	case <-h.writesReady:
	case <-r.Context().Done():
	case <-h.shutdownCh:
	case <-t.C:
		h.logger.Warn("the agent is not ready for writes yet; serving the write anyway", "method", r.Method,
			"path", r.URL.Path, "waited", h.writesReadyTimeout)
	}
}

func (h *handler) wrap(fn endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := fn(w, r)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		if out == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		h.writeJSON(w, r, out)
	}
}

// orEmpty is s, or an empty slice for nil, so that a list is answered
// with [] rather than null, as Nomad's API does.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// rawJSON is a body an endpoint encoded itself (from a cache) in a pooled
// buffer, written as it is and then handed back to the pool.
type rawJSON []byte

// sharedJSON is a body an endpoint encoded itself that other requests
// share: written as it is, never changed or pooled.
type sharedJSON []byte

// writeJSON encodes out fully before writing anything, so an encoding
// failure still becomes a clean 500 instead of half a body. ?pretty indents,
// as Nomad's does. The body is compressed when the client accepts gzip and
// it is large enough (writeBody).
func (h *handler) writeJSON(w http.ResponseWriter, r *http.Request, out any) {
	_, pretty := r.URL.Query()["pretty"]
	var encoded []byte
	shared, pooled := false, false
	switch b := out.(type) {
	case sharedJSON:
		encoded, shared = b, true
	case rawJSON:
		encoded, pooled = b, true
	}
	if shared || pooled {
		if pooled {
			defer putBuffer(encoded)
		}
		if !pretty {
			h.writeBody(w, r, encoded, shared)
			return
		}
		out = json.RawMessage(encoded)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if pretty {
		enc.SetIndent("", "    ")
	}
	if err := enc.Encode(out); err != nil {
		h.writeError(w, r, structs.NewError(structs.ErrCodeInternal, "encoding response: %v", err))
		return
	}
	h.writeBody(w, r, buf.Bytes(), false)
}

// writeBody writes an encoded JSON body, gzipped when the client accepts
// it and the body is large enough. A shared body is one nobody changes
// (sharedJSON), which the gzip cache may keep as it is.
func (h *handler) writeBody(w http.ResponseWriter, r *http.Request, body []byte, shared bool) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("Vary", "Accept-Encoding")
	if len(body) >= gzipMinSize && acceptsGzip(r) {
		body = h.gz.compress(body, shared)
		w.Header().Set("Content-Encoding", "gzip")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// writeError answers with the status of err's code and its message as plain
// text. X-Nomad-* headers set by the endpoint stay: a single read that finds
// nothing still tells the caller the index to block on until it appears.
func (h *handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(structs.CodeOf(err))
	if status >= http.StatusInternalServerError {
		h.logger.Warn("request failed", "method", r.Method, "path", r.URL.Path,
			"status", status, "error", structs.MessageOf(err))
	}
	writeText(w, status, structs.MessageOf(err))
}

func writeText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(msg)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}

// statusOf is the one mapping from error codes to HTTP statuses.
func statusOf(code structs.ErrorCode) int {
	switch code {
	case structs.ErrCodeInvalid:
		return http.StatusBadRequest
	case structs.ErrCodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case structs.ErrCodeNotFound:
		return http.StatusNotFound
	case structs.ErrCodeConflict, structs.ErrCodeMaxClaims, structs.ErrCodeUnschedulable:
		return http.StatusConflict
	case structs.ErrCodePermissionDenied:
		return http.StatusForbidden
	case structs.ErrCodeNoLeader:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// statusRecorder remembers the status for the log line.
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wrote {
		s.status, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) code() int {
	if !s.wrote {
		return http.StatusOK
	}
	return s.status
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
