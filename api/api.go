// Package api is a small typed client for volplane's HTTP API. The request
// and response bodies are the structs package's types, so the client and the
// server cannot drift apart on a field name.
package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// EnvAddress and EnvToken name the environment variables the client and
	// the CLI read their defaults from; Nomad's names (NOMAD_ADDR, ...) are
	// read when volplane's are unset.
	EnvAddress = "VOLPLANE_ADDR"
	EnvToken   = "VOLPLANE_TOKEN"

	// The TLS settings' environment variables, as Nomad's.
	EnvCACert        = "VOLPLANE_CACERT"
	EnvClientCert    = "VOLPLANE_CLIENT_CERT"
	EnvClientKey     = "VOLPLANE_CLIENT_KEY"
	EnvTLSServerName = "VOLPLANE_TLS_SERVER_NAME"
	EnvSkipVerify    = "VOLPLANE_SKIP_VERIFY"

	// LocalAddress is where a local agent's HTTP API listens by default.
	LocalAddress = "http://127.0.0.1:4646"

	// maxErrorBody bounds how much of an error response is read, so a
	// misbehaving server cannot make the client buffer without limit.
	maxErrorBody = 64 << 10
)

// DefaultAddress is $VOLPLANE_ADDR (or $NOMAD_ADDR), or the local agent's
// address when unset.
func DefaultAddress() string {
	if a := Getenv(EnvAddress); a != "" {
		return a
	}
	return LocalAddress
}

// Getenv reads a VOLPLANE_* environment variable and, when it is unset,
// its NOMAD_* counterpart, so Nomad users' environments carry over.
func Getenv(name string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	if rest, ok := strings.CutPrefix(name, "VOLPLANE_"); ok {
		return os.Getenv("NOMAD_" + rest)
	}
	return ""
}

// TLSConfig is how the client reaches an HTTPS agent.
type TLSConfig struct {
	// CACert is a PEM file of the CA that signed the agent's certificate;
	// empty means the system's roots.
	CACert string
	// ClientCert and ClientKey are the client's certificate and key (the
	// agent may require one: tls.verify_https_client).
	ClientCert string
	ClientKey  string
	// TLSServerName is the name checked on the agent's certificate instead
	// of the address's host.
	TLSServerName string
	// Insecure skips the check of the agent's certificate.
	Insecure bool
}

// DefaultTLSConfig reads the TLS settings from the environment.
func DefaultTLSConfig() TLSConfig {
	skip, _ := strconv.ParseBool(Getenv(EnvSkipVerify))
	return TLSConfig{
		CACert:        Getenv(EnvCACert),
		ClientCert:    Getenv(EnvClientCert),
		ClientKey:     Getenv(EnvClientKey),
		TLSServerName: Getenv(EnvTLSServerName),
		Insecure:      skip,
	}
}

func (t TLSConfig) empty() bool { return t == TLSConfig{} }

// build loads the files into a tls.Config.
func (t TLSConfig) build() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: t.TLSServerName, InsecureSkipVerify: t.Insecure, MinVersion: tls.VersionTLS12}
	if t.CACert != "" {
		pem, err := os.ReadFile(t.CACert)
		if err != nil {
			return nil, fmt.Errorf("reading the CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the CA file %s holds no PEM certificate", t.CACert)
		}
		cfg.RootCAs = pool
	}
	if (t.ClientCert == "") != (t.ClientKey == "") {
		return nil, errors.New("a client certificate needs both -client-cert and -client-key")
	}
	if t.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("loading the client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Config configures a Client. The zero value talks to DefaultAddress()
// without a token.
type Config struct {
	// Address is the agent's HTTP address, "http://host:port"; a bare
	// "host:port" means http.
	Address string
	// Token is sent as X-Nomad-Token with every request.
	Token string
	// HTTPClient is used for every request; nil means a client of its own
	// with no overall timeout, since blocking queries may wait for minutes.
	HTTPClient *http.Client
	// TLS configures HTTPS; it is ignored when HTTPClient is given.
	TLS TLSConfig
}

// Client talks to one volplane agent.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// NewClient checks the address and returns a client. It does not connect.
func NewClient(cfg Config) (*Client, error) {
	addr := strings.TrimSpace(cfg.Address)
	if addr == "" {
		addr = DefaultAddress()
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("invalid address %q: %v", cfg.Address, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid address %q: scheme must be http or https", cfg.Address)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid address %q: missing host", cfg.Address)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if !cfg.TLS.empty() {
			tc, err := cfg.TLS.build()
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
		}
		hc = &http.Client{Transport: tr}
	}
	return &Client{base: u, token: cfg.Token, http: hc}, nil
}

// Address is the agent address the client sends requests to.
func (c *Client) Address() string { return c.base.String() }

// QueryOptions tune a read. Fields a given endpoint does not use are ignored.
type QueryOptions struct {
	// Namespace of the objects read; empty means the server's default.
	Namespace string
	// Prefix filters list results by ID prefix.
	Prefix string
	// PluginID and NodeID filter volume lists.
	PluginID string
	NodeID   string
	// PerPage and NextToken page through long lists; QueryMeta.NextToken
	// is the token of the next page.
	PerPage   int32
	NextToken string
	// WaitIndex makes a blocking query: the server answers once the result's
	// index is above WaitIndex, or when WaitTime has passed.
	WaitIndex uint64
	WaitTime  time.Duration
	// AllowStale lets any server answer from its own state.
	AllowStale bool
	// AuthToken overrides the client's token for this request.
	AuthToken string
	// Context cancels the request; nil means context.Background().
	Context context.Context
}

// WriteOptions tune a write.
type WriteOptions struct {
	Namespace string
	AuthToken string
	Context   context.Context
}

// QueryMeta is what the server said about a read, from its X-Nomad-*
// response headers.
type QueryMeta struct {
	// LastIndex is the Raft index the result reflects; pass it back as
	// WaitIndex to block until something changes.
	LastIndex   uint64
	LastContact time.Duration
	KnownLeader bool
	NextToken   string
	RequestTime time.Duration
}

// WriteMeta is what the server said about a write.
type WriteMeta struct {
	LastIndex   uint64
	RequestTime time.Duration
}

// StatusError is a non-2xx answer. Error() is the server's message alone, so
// a CLI can print it as is.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

// ConnectError says that the agent at Address could not be reached at all.
type ConnectError struct {
	Address string
	Err     error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("could not reach a volplane agent at %s: %s", e.Address, describeNetErr(e.Err))
}

func (e *ConnectError) Unwrap() error { return e.Err }

// describeNetErr keeps the part of a dial error that tells the operator what
// happened, without the Go call chain that net/http wraps around it.
func describeNetErr(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve host " + dnsErr.Name
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	return err.Error()
}

// request is one call: method, path, query and an optional JSON body.
type request struct {
	method string
	path   string
	params url.Values
	body   any
	token  string
	// header holds extra request headers, e.g. X-Nomad-CSI-Secrets.
	header http.Header
	ctx    context.Context
}

func (c *Client) newQuery(method, path string, q *QueryOptions) *request {
	r := &request{method: method, path: path, params: url.Values{}, token: c.token}
	if q == nil {
		return r
	}
	setIf := func(k, v string) {
		if v != "" {
			r.params.Set(k, v)
		}
	}
	setIf("namespace", q.Namespace)
	setIf("prefix", q.Prefix)
	setIf("plugin_id", q.PluginID)
	setIf("node_id", q.NodeID)
	setIf("next_token", q.NextToken)
	if q.PerPage > 0 {
		r.params.Set("per_page", strconv.Itoa(int(q.PerPage)))
	}
	if q.WaitIndex > 0 {
		r.params.Set("index", strconv.FormatUint(q.WaitIndex, 10))
	}
	if q.WaitTime > 0 {
		r.params.Set("wait", strconv.FormatInt(q.WaitTime.Milliseconds(), 10)+"ms")
	}
	if q.AllowStale {
		r.params.Set("stale", "true")
	}
	if q.AuthToken != "" {
		r.token = q.AuthToken
	}
	r.ctx = q.Context
	return r
}

func (c *Client) newWrite(method, path string, w *WriteOptions) *request {
	r := &request{method: method, path: path, params: url.Values{}, token: c.token}
	if w == nil {
		return r
	}
	if w.Namespace != "" {
		r.params.Set("namespace", w.Namespace)
	}
	if w.AuthToken != "" {
		r.token = w.AuthToken
	}
	r.ctx = w.Context
	return r
}

// do sends r and decodes a 2xx JSON answer into out (when out is not nil and
// the body is not empty), or copies it as it is into out when out is a
// *[]byte. It returns the response headers for the metadata.
func (c *Client) do(r *request, out any) (http.Header, time.Duration, error) {
	// r.path has its variable segments escaped already (see escape), so it
	// is appended as is rather than through url.URL.Path, which would
	// escape them again.
	target := c.base.String() + r.path
	if len(r.params) > 0 {
		target += "?" + r.params.Encode()
	}
	var body io.Reader
	if r.body != nil {
		buf, err := json.Marshal(r.body)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding request: %v", err)
		}
		body = bytes.NewReader(buf)
	}
	ctx := r.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, body)
	if err != nil {
		return nil, 0, err
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("X-Nomad-Token", r.token)
	}
	for k, vs := range r.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, &ConnectError{Address: c.Address(), Err: err}
	}
	defer resp.Body.Close()
	rtt := time.Since(start)

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		text := strings.TrimSpace(string(msg))
		if text == "" {
			text = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		return resp.Header, rtt, &StatusError{Code: resp.StatusCode, Message: text}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header, rtt, nil
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.Header, rtt, fmt.Errorf("reading response from %s: %v", c.Address(), err)
	}
	if raw, ok := out.(*[]byte); ok {
		// The answer as the server sent it, whatever its format.
		*raw = data
		return resp.Header, rtt, nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return resp.Header, rtt, nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp.Header, rtt, fmt.Errorf("decoding response of %s %s: %v", r.method, r.path, err)
	}
	return resp.Header, rtt, nil
}

// query runs a read and parses its metadata.
func (c *Client) query(path string, q *QueryOptions, out any) (*QueryMeta, error) {
	h, rtt, err := c.do(c.newQuery(http.MethodGet, path, q), out)
	if err != nil {
		return nil, err
	}
	return parseQueryMeta(h, rtt), nil
}

// get reads one object of type T from path.
func get[T any](c *Client, path string, q *QueryOptions) (*T, *QueryMeta, error) {
	var out T
	qm, err := c.query(path, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, qm, nil
}

// list reads a list of T from path.
func list[T any](c *Client, path string, q *QueryOptions) ([]T, *QueryMeta, error) {
	var out []T
	qm, err := c.query(path, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return out, qm, nil
}

// write runs a PUT, POST or DELETE and parses its metadata.
func (c *Client) write(r *request, out any) (*WriteMeta, error) {
	h, rtt, err := c.do(r, out)
	if err != nil {
		return nil, err
	}
	wm := &WriteMeta{RequestTime: rtt}
	wm.LastIndex, _ = strconv.ParseUint(h.Get("X-Nomad-Index"), 10, 64)
	return wm, nil
}

// parseQueryMeta reads the X-Nomad-* headers. A header that is missing or
// malformed leaves its field at the zero value: the metadata is advisory and
// must not turn a good answer into an error.
func parseQueryMeta(h http.Header, rtt time.Duration) *QueryMeta {
	qm := &QueryMeta{RequestTime: rtt, NextToken: h.Get("X-Nomad-NextToken")}
	qm.LastIndex, _ = strconv.ParseUint(h.Get("X-Nomad-Index"), 10, 64)
	if ms, err := strconv.ParseUint(h.Get("X-Nomad-LastContact"), 10, 64); err == nil {
		qm.LastContact = time.Duration(ms) * time.Millisecond
	}
	qm.KnownLeader = h.Get("X-Nomad-KnownLeader") == "true"
	return qm
}

// escape makes an ID safe as one path segment.
func escape(id string) string { return url.PathEscape(id) }
