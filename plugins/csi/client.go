// Package csi is the CSI gRPC client the client agent uses to drive the
// storage plugins on its node: identity and fingerprinting, controller
// attach and detach, node stage and publish.
//
// Every call has a deadline, is retried with backoff only when the gRPC code
// says the outcome may change (see ClassOf), and fails with an *Error that
// names the method, the volume and the code. Requests are checked before they
// are sent. Secrets, mount flags and publish context values never appear in
// a log line or in an error.
package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Defaults of the options.
const (
	// DefaultTimeout bounds a call that changes something (publish, stage,
	// create...) when its context has no deadline. Attaching a cloud disk
	// can take a while.
	DefaultTimeout = 2 * time.Minute
	// DefaultQueryTimeout bounds identity, probe, capability and info calls,
	// which a healthy plugin answers at once; fingerprinting must not hang
	// on a stuck one.
	DefaultQueryTimeout = 10 * time.Second
	// DefaultAttempts and DefaultBackoff: a retryable failure is tried
	// again twice, after 100 ms and then 200 ms.
	DefaultAttempts = 3
	DefaultBackoff  = 100 * time.Millisecond

	maxBackoff = 10 * time.Second
	// maxSocketPath is the longest path a unix socket address can hold on
	// Linux (sun_path is 108 bytes with the terminating NUL).
	maxSocketPath = 107
)

// Option configures a Client.
type Option func(*options)

type options struct {
	timeout      time.Duration
	queryTimeout time.Duration
	attempts     int
	backoff      time.Duration
}

// WithTimeout sets the deadline of a call whose context has none (default
// DefaultTimeout); it covers the retries too. Identity, probe, capability
// and info calls use the shorter of d and their own default
// (DefaultQueryTimeout, or WithQueryTimeout's). A context's own deadline
// always wins.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout = d }
}

// WithQueryTimeout sets the default deadline of identity, probe, capability
// and info calls.
func WithQueryTimeout(d time.Duration) Option {
	return func(o *options) { o.queryTimeout = d }
}

// WithRetries sets how many times in all a call is attempted when it fails
// with a retryable code (1: never retried), and the wait before the first
// retry, which doubles at each one.
func WithRetries(attempts int, initialBackoff time.Duration) Option {
	return func(o *options) {
		o.attempts = attempts
		o.backoff = initialBackoff
	}
}

// Client talks to one CSI plugin over its unix socket. It is safe for
// concurrent use. The connection is made lazily and remade after the plugin
// restarts; a call made while the socket does not exist fails at once.
type Client struct {
	socket     string
	conn       *grpc.ClientConn
	identity   csipb.IdentityClient
	controller csipb.ControllerClient
	node       csipb.NodeClient
	logger     hclog.Logger
	opts       options

	closeOnce sync.Once
	closeErr  error
}

// NewClient returns a client of the plugin listening at endpoint:
// "unix:///abs/path.sock" (the form of CSI_ENDPOINT) or a bare absolute
// path. Nothing is dialled until the first call.
func NewClient(endpoint string, logger hclog.Logger, opts ...Option) (*Client, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	o := options{timeout: DefaultTimeout, queryTimeout: DefaultQueryTimeout, attempts: DefaultAttempts, backoff: DefaultBackoff}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 || o.queryTimeout <= 0 {
		return nil, fmt.Errorf("csi client: timeouts must be positive")
	}
	if o.attempts < 1 {
		o.attempts = 1
	}
	if o.backoff <= 0 {
		o.backoff = DefaultBackoff
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}

	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	conn, err := grpc.NewClient("passthrough:///csi-plugin",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial),
		grpc.WithAuthority("localhost"),
		// The plugin is a local process: reconnect quickly once it is back
		// instead of backing off for up to two minutes as gRPC would for a
		// remote server.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("csi client for %s: %w", path, err)
	}
	return &Client{
		socket:     path,
		conn:       conn,
		identity:   csipb.NewIdentityClient(conn),
		controller: csipb.NewControllerClient(conn),
		node:       csipb.NewNodeClient(conn),
		logger:     logger.Named("csi").With("socket", path),
		opts:       o,
	}, nil
}

// socketPath turns an endpoint into an absolute socket path.
func socketPath(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if rest, ok := strings.CutPrefix(endpoint, "unix:"); ok {
		path = rest
	}
	switch {
	case path == "":
		return "", fmt.Errorf("csi endpoint %q: missing socket path", endpoint)
	case !filepath.IsAbs(path):
		return "", fmt.Errorf("csi endpoint %q: want unix:///absolute/path.sock or an absolute path", endpoint)
	}
	path = filepath.Clean(path)
	if len(path) > maxSocketPath {
		return "", fmt.Errorf("csi endpoint %q: socket path is longer than %d bytes", endpoint, maxSocketPath)
	}
	return path, nil
}

// Socket returns the path of the plugin's socket.
func (c *Client) Socket() string { return c.socket }

// Close closes the connection; calls made afterwards fail. Closing twice is
// harmless.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.conn.Close() })
	return c.closeErr
}

// checkSocket explains a socket that cannot be dialled before gRPC does so
// less clearly: a missing file, or a file that is not a socket.
func (c *Client) checkSocket() error {
	fi, err := os.Stat(c.socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("plugin socket %s: no such file", c.socket)
	case err != nil:
		return fmt.Errorf("plugin socket %s: %w", c.socket, errors.Unwrap(err))
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("plugin socket %s: not a unix socket", c.socket)
	}
	return nil
}

// call describes one RPC for invoke.
type call struct {
	method string
	// volume is the storage provider's volume ID, "" when there is none.
	volume string
	// query marks identity, probe, capability and info calls, which get the
	// shorter default deadline.
	query bool
	req   proto.Message
}

func (c *Client) defaultTimeout(query bool) time.Duration {
	if query {
		return min(c.opts.queryTimeout, c.opts.timeout)
	}
	return c.opts.timeout
}

// invoke runs fn, the gRPC call, under a deadline, retrying retryable
// failures with exponential backoff while the deadline allows, and returns
// its response or an *Error.
func invoke[R proto.Message](ctx context.Context, c *Client, cl call, fn func(context.Context) (R, error)) (R, error) {
	var zero R
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.defaultTimeout(cl.query))
		defer cancel()
	}
	log := c.logger.With("method", cl.method)
	if cl.volume != "" {
		log = log.With("volume_id", cl.volume)
	}
	if err := c.checkSocket(); err != nil {
		// Unavailable: the plugin may be starting and create it soon.
		return zero, wrapError(cl.method, cl.volume, status.Error(codes.Unavailable, err.Error()), nil)
	}
	log.Trace("calling plugin", "request", forLog(cl.req))

	wait := c.opts.backoff
	for attempt := 1; ; attempt++ {
		start := time.Now()
		resp, err := fn(ctx)
		if err == nil {
			log.Trace("plugin call succeeded", "attempt", attempt, "duration", time.Since(start), "response", forLog(resp))
			return resp, nil
		}
		wrapped := wrapError(cl.method, cl.volume, err, sensitiveValues(cl.req))
		if ClassOf(cl.method, err) != ClassRetryable || attempt >= c.opts.attempts || ctx.Err() != nil {
			log.Debug("plugin call failed", "attempt", attempt, "duration", time.Since(start), "error", wrapped)
			return zero, wrapped
		}
		// Not an error yet: busy plugins answer ABORTED or UNAVAILABLE as a
		// matter of course, and the caller logs what finally fails.
		log.Debug("plugin call failed, retrying", "attempt", attempt, "backoff", wait, "error", wrapped)
		if status.Code(err) == codes.Unavailable {
			// The plugin may have restarted: dial again now rather than
			// after gRPC's reconnect backoff.
			c.conn.ResetConnectBackoff()
		}
		if !sleep(ctx, wait) {
			return zero, wrapped
		}
		wait = min(wait*2, maxBackoff)
	}
}

// sleep waits for d or until ctx is done, and reports whether it waited the
// whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
