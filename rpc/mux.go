package rpc

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-connlimit"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

// ErrMuxClosed is returned by Serve when the Mux was closed before it began.
var ErrMuxClosed = errors.New("rpc: mux closed")

// Peer is what the Mux knows of the other end of a connection.
type Peer struct {
	Addr net.Addr
	// TLS is the connection's TLS state once the handshake verified the
	// peer's certificate; nil for a plaintext connection.
	TLS *tls.ConnectionState
}

// Handlers are told of each connection the Mux accepts, by protocol, with
// what is known of its peer.
type Handlers struct {
	// RPC serves a plain RPC connection (after byte 0x01) or one yamux
	// stream, typically srv.ServeCodec(NewServerCodec(conn, max)), and
	// returns when done. The Mux closes conn when RPC returns. A stream
	// carries the Peer of its session.
	RPC func(conn net.Conn, peer Peer)

	// Raft takes a connection after byte 0x02, typically with
	// RaftLayer.Handoff. Once Raft returns, the connection belongs to it:
	// the Mux no longer closes it.
	Raft func(conn net.Conn, peer Peer)

	// Session, if set, is told of each yamux session (byte 0x03) before its
	// streams are served; later the server uses the session to call back
	// into the client that dialed it. Session must not block. The Mux
	// closes the session when its connection ends or on Close.
	Session func(sess *yamux.Session, peer Peer)
}

// MuxConfig configures a Mux.
type MuxConfig struct {
	Handlers         Handlers
	Logger           hclog.Logger
	HandshakeTimeout time.Duration // bound on the first byte and, with TLS, the handshake and the inner byte (default 5s)
	YamuxConfig      *yamux.Config // optional; default yamux.DefaultConfig() with its log sent to Logger

	// TLS, when set, is the server side of the handshake after byte
	// RPCTLS; it should require and verify a client certificate. Without
	// it, a TLS connection is refused.
	TLS *tls.Config
	// RequireTLS refuses every connection that does not begin with RPCTLS.
	RequireTLS bool

	// MaxConnsPerClient bounds the connections open at once from one IP
	// address (0: no bound); more are closed at once and counted.
	MaxConnsPerClient int
	// MaxStreamsPerSession bounds the streams of one yamux session served
	// at once (default DefaultMaxStreamsPerSession).
	MaxStreamsPerSession int
	// CloseTimeout bounds Close's wait for the handlers still serving the
	// connections it closed (default DefaultMuxCloseTimeout).
	CloseTimeout time.Duration
	// Refused, if set, is told each time a connection is refused, with a
	// short reason ("conn_limit", "plaintext", "tls_handshake",
	// "protocol"), for metrics.
	Refused func(reason string)
}

// Mux accepts connections on a listener and hands each to the handler its
// first byte selects. Every connection is served in its own goroutine, which
// Close waits for.
type Mux struct {
	handlers   Handlers
	logger     hclog.Logger
	handshake  time.Duration
	yamuxCfg   *yamux.Config
	tlsConfig  *tls.Config
	requireTLS bool
	limiter    *connlimit.Limiter
	maxStreams int
	refused    func(string)
	closeWait  time.Duration

	mu        sync.Mutex
	closed    bool
	closeCh   chan struct{}
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	sessions  map[*yamux.Session]struct{}
	wg        sync.WaitGroup
}

// NewMux returns a Mux; call Serve to start it.
func NewMux(cfg MuxConfig) *Mux {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("rpc")
	handshake := cfg.HandshakeTimeout
	if handshake <= 0 {
		handshake = DefaultHandshakeTimeout
	}
	maxStreams := cfg.MaxStreamsPerSession
	if maxStreams <= 0 {
		maxStreams = DefaultMaxStreamsPerSession
	}
	refused := cfg.Refused
	if refused == nil {
		refused = func(string) {}
	}
	closeWait := cfg.CloseTimeout
	if closeWait <= 0 {
		closeWait = DefaultMuxCloseTimeout
	}
	return &Mux{
		closeWait:  closeWait,
		handlers:   cfg.Handlers,
		logger:     logger,
		handshake:  handshake,
		yamuxCfg:   yamuxConfig(cfg.YamuxConfig, logger),
		tlsConfig:  cfg.TLS,
		requireTLS: cfg.RequireTLS,
		limiter:    connlimit.NewLimiter(connlimit.Config{MaxConnsPerClientIP: cfg.MaxConnsPerClient}),
		maxStreams: maxStreams,
		refused:    refused,
		closeCh:    make(chan struct{}),
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[net.Conn]struct{}),
		sessions:   make(map[*yamux.Session]struct{}),
	}
}

// yamuxConfig copies cfg (or yamux's default) and sends yamux's log lines to
// logger when cfg names no destination of its own.
func yamuxConfig(cfg *yamux.Config, logger hclog.Logger) *yamux.Config {
	if cfg == nil {
		cfg = yamux.DefaultConfig()
		cfg.LogOutput = nil
	} else {
		cfg = cfg.Clone()
	}
	if cfg.LogOutput == nil && cfg.Logger == nil {
		cfg.Logger = logger.Named("yamux").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	}
	return cfg
}

// goTracked runs fn in a goroutine Close waits for, unless the Mux is
// closed, in which case it reports false and runs nothing. Adding under the
// lock that Close takes before waiting keeps Add from racing with Wait.
func (m *Mux) goTracked(fn func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
	return true
}

// Serve accepts connections on ln until Close, and returns nil then. It
// returns an error if ln fails for good. Serve may be called for several
// listeners; Close closes them all.
func (m *Mux) Serve(ln net.Listener) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		ln.Close()
		return ErrMuxClosed
	}
	m.listeners[ln] = struct{}{}
	m.wg.Add(1)
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.listeners, ln)
		m.mu.Unlock()
		m.wg.Done()
	}()

	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			select {
			case <-m.closeCh:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: back off instead of
			// spinning, and keep serving once it passes.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.logger.Error("failed to accept connection", "error", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-m.closeCh:
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		delay = 0
		free, err := m.limiter.Accept(conn)
		if err != nil {
			m.refused("conn_limit")
			m.logger.Warn("refusing connection: too many connections from this address",
				"remote", conn.RemoteAddr(), "error", err)
			conn.Close()
			continue
		}
		conn = &limitedConn{Conn: conn, free: free}
		if !m.trackConn(conn) {
			conn.Close()
			return nil
		}
		if !m.goTracked(func() { m.handleConn(conn) }) {
			m.untrackConn(conn)
			conn.Close()
			return nil
		}
	}
}

func (m *Mux) trackConn(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.conns[conn] = struct{}{}
	return true
}

func (m *Mux) untrackConn(conn net.Conn) {
	m.mu.Lock()
	delete(m.conns, conn)
	m.mu.Unlock()
}

// handleConn reads the protocol byte and dispatches the connection.
func (m *Mux) handleConn(conn net.Conn) {
	defer m.untrackConn(conn)
	peer := Peer{Addr: conn.RemoteAddr()}

	// A peer that connects and says nothing (or stalls its TLS handshake)
	// must not hold a goroutine forever: one deadline covers the first
	// byte, the handshake and the byte inside TLS.
	if err := conn.SetReadDeadline(time.Now().Add(m.handshake)); err != nil {
		m.logger.Debug("cannot set handshake deadline", "remote", peer.Addr, "error", err)
		conn.Close()
		return
	}
	proto, err := readByte(conn)
	if err != nil {
		m.logger.Debug("connection closed before its protocol byte", "remote", peer.Addr, "error", err)
		conn.Close()
		return
	}
	switch {
	case proto == RPCTLS:
		if conn, proto, err = m.serverTLS(conn, &peer); err != nil {
			conn.Close()
			return
		}
	case m.requireTLS:
		m.refused("plaintext")
		m.logger.Warn("refusing a plaintext connection: this server requires TLS (tls.rpc)",
			"remote", peer.Addr, "byte", proto)
		conn.Close()
		return
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return
	}

	switch proto {
	case RPCMsgpack:
		if m.handlers.RPC == nil {
			m.logger.Warn("no handler for RPC connections", "remote", peer.Addr)
			conn.Close()
			return
		}
		m.handlers.RPC(conn, peer)
		conn.Close()

	case RPCRaft:
		if m.handlers.Raft == nil {
			m.logger.Warn("no handler for Raft connections", "remote", peer.Addr)
			conn.Close()
			return
		}
		m.handlers.Raft(conn, peer)

	case RPCMultiplex:
		m.serveSession(conn, peer)

	default:
		m.refused("protocol")
		m.logger.Warn("unknown protocol byte, closing connection", "remote", peer.Addr, "byte", proto)
		conn.Close()
	}
}

// serverTLS runs the TLS handshake of a connection that began with
// RPCTLS and reads the protocol byte inside it. The caller's deadline
// bounds both.
func (m *Mux) serverTLS(conn net.Conn, peer *Peer) (net.Conn, byte, error) {
	if m.tlsConfig == nil {
		m.refused("tls_handshake")
		m.logger.Warn("refusing a TLS connection: TLS is not configured for RPC", "remote", peer.Addr)
		return conn, 0, errors.New("tls not configured")
	}
	tc := tls.Server(conn, m.tlsConfig)
	if err := tc.Handshake(); err != nil {
		m.refused("tls_handshake")
		m.logger.Warn("refusing connection: TLS handshake failed", "remote", peer.Addr, "error", err)
		return tc, 0, err
	}
	cs := tc.ConnectionState()
	peer.TLS = &cs
	// The acknowledgment tells the dialer its certificate was accepted:
	// with TLS 1.3 its handshake ends before the server has checked it,
	// and a refusal would otherwise reach it only as a dead session.
	if _, err := tc.Write([]byte{RPCTLS}); err != nil {
		return tc, 0, err
	}
	proto, err := readByte(tc)
	if err != nil {
		m.logger.Debug("TLS connection closed before its protocol byte", "remote", peer.Addr, "error", err)
		return tc, 0, err
	}
	if proto == RPCTLS {
		m.refused("protocol")
		m.logger.Warn("refusing TLS nested in TLS", "remote", peer.Addr)
		return tc, 0, errors.New("nested tls")
	}
	return tc, proto, nil
}

func readByte(conn net.Conn) (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(conn, b[:])
	return b[0], err
}

// limitedConn frees its place in the per-address limit when it is closed,
// whoever closes it (the Mux, or Raft for a connection handed to it).
type limitedConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// serveSession runs a yamux server session on conn and serves every stream
// the remote opens as an RPC connection.
func (m *Mux) serveSession(conn net.Conn, peer Peer) {
	remote := peer.Addr
	sess, err := yamux.Server(newFrameConn(conn), m.yamuxCfg)
	if err != nil {
		m.logger.Error("cannot start yamux session", "remote", remote, "error", err)
		conn.Close()
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		sess.Close()
		return
	}
	m.sessions[sess] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.sessions, sess)
		m.mu.Unlock()
		sess.Close()
	}()

	if m.handlers.Session != nil {
		m.handlers.Session(sess, peer)
	}
	// A slot is taken before each Accept: a session with maxStreams
	// streams in service waits, its next streams queue in yamux's accept
	// backlog, and yamux resets those beyond it.
	slots := make(chan struct{}, m.maxStreams)
	for {
		select {
		case slots <- struct{}{}:
		case <-sess.CloseChan():
			return
		}
		stream, err := sess.Accept()
		if err != nil {
			if !sess.IsClosed() {
				m.logger.Debug("yamux accept failed", "remote", remote, "error", err)
			}
			return
		}
		if m.handlers.RPC == nil {
			m.logger.Warn("no handler for RPC streams", "remote", remote)
			stream.Close()
			<-slots
			continue
		}
		served := m.goTracked(func() {
			defer func() { <-slots }()
			m.handlers.RPC(stream, peer)
			stream.Close()
		})
		if !served {
			stream.Close()
			return
		}
	}
}

// Close stops every Serve, closes every live connection and session, and
// waits for all the Mux's goroutines, CloseTimeout at most: then it logs
// that some still run and returns an error, leaving them. A connection whose
// Raft handler has returned is not closed: it belongs to the Raft layer. RPC
// handlers must return once their connection is closed; net/rpc's
// ServeCodec also waits for the endpoint calls in flight on that
// connection.
func (m *Mux) Close() error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		close(m.closeCh)
	}
	var closers []io.Closer
	for ln := range m.listeners {
		closers = append(closers, ln)
	}
	for s := range m.sessions {
		closers = append(closers, s)
	}
	for c := range m.conns {
		closers = append(closers, c)
	}
	m.mu.Unlock()

	for _, c := range closers {
		c.Close()
	}
	// A handler ends once its connection is closed, or once its call
	// returns (net/rpc waits for the calls in flight): a call that never
	// returns must not hold the process's shutdown forever.
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(m.closeWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		m.logger.Warn("closed without waiting for handlers still running", "waited", m.closeWait)
		return fmt.Errorf("rpc: connection handlers still running %s after close", m.closeWait)
	}
}
