package rpc

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

// ErrMuxClosed is returned by Serve when the Mux was closed before it began.
var ErrMuxClosed = errors.New("rpc: mux closed")

// Handlers are told of each connection the Mux accepts, by protocol.
type Handlers struct {
	// RPC serves a plain RPC connection (after byte 0x01) or one yamux
	// stream, typically srv.ServeCodec(NewServerCodec(conn, max)), and
	// returns when done. The Mux closes conn when RPC returns.
	RPC func(conn net.Conn)

	// Raft takes a connection after byte 0x02, typically with
	// RaftLayer.Handoff. Once Raft returns, the connection belongs to it:
	// the Mux no longer closes it.
	Raft func(conn net.Conn)

	// Session, if set, is told of each yamux session (byte 0x03) before its
	// streams are served; later the server uses the session to call back
	// into the client that dialed it. Session must not block. The Mux
	// closes the session when its connection ends or on Close.
	Session func(sess *yamux.Session)
}

// MuxConfig configures a Mux.
type MuxConfig struct {
	Handlers         Handlers
	Logger           hclog.Logger
	HandshakeTimeout time.Duration // bound on waiting for the first byte (default 5s)
	YamuxConfig      *yamux.Config // optional; default yamux.DefaultConfig() with its log sent to Logger
}

// Mux accepts connections on a listener and hands each to the handler its
// first byte selects. Every connection is served in its own goroutine, which
// Close waits for.
type Mux struct {
	handlers  Handlers
	logger    hclog.Logger
	handshake time.Duration
	yamuxCfg  *yamux.Config

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
	return &Mux{
		handlers:  cfg.Handlers,
		logger:    logger,
		handshake: handshake,
		yamuxCfg:  yamuxConfig(cfg.YamuxConfig, logger),
		closeCh:   make(chan struct{}),
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
		sessions:  make(map[*yamux.Session]struct{}),
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
	remote := conn.RemoteAddr()

	// A peer that connects and says nothing must not hold a goroutine
	// forever.
	var first [1]byte
	if err := conn.SetReadDeadline(time.Now().Add(m.handshake)); err != nil {
		m.logger.Debug("cannot set handshake deadline", "remote", remote, "error", err)
		conn.Close()
		return
	}
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		m.logger.Debug("connection closed before its protocol byte", "remote", remote, "error", err)
		conn.Close()
		return
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		conn.Close()
		return
	}

	switch first[0] {
	case RPCMsgpack:
		if m.handlers.RPC == nil {
			m.logger.Warn("no handler for RPC connections", "remote", remote)
			conn.Close()
			return
		}
		m.handlers.RPC(conn)
		conn.Close()

	case RPCRaft:
		if m.handlers.Raft == nil {
			m.logger.Warn("no handler for Raft connections", "remote", remote)
			conn.Close()
			return
		}
		m.handlers.Raft(conn)

	case RPCMultiplex:
		m.serveSession(conn)

	default:
		m.logger.Warn("unknown protocol byte, closing connection", "remote", remote, "byte", first[0])
		conn.Close()
	}
}

// serveSession runs a yamux server session on conn and serves every stream
// the remote opens as an RPC connection.
func (m *Mux) serveSession(conn net.Conn) {
	remote := conn.RemoteAddr()
	sess, err := yamux.Server(conn, m.yamuxCfg)
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
		m.handlers.Session(sess)
	}
	for {
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
			continue
		}
		served := m.goTracked(func() {
			m.handlers.RPC(stream)
			stream.Close()
		})
		if !served {
			stream.Close()
			return
		}
	}
}

// Close stops every Serve, closes every live connection and session, and
// waits for all the Mux's goroutines. A connection whose Raft handler has
// returned is not closed: it belongs to the Raft layer. RPC handlers must return
// once their connection is closed; net/rpc's ServeCodec also waits for the
// endpoint calls in flight on that connection.
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
	m.wg.Wait()
	return nil
}
