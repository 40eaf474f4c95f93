package server

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// connGate freezes a server's connections as SIGSTOP freezes a process,
// for in-process tests of a leader that stops answering without closing
// anything (Config.pausable): while it is shut, bytes that arrive or that
// the server writes are held, not lost, and go through when it opens. It
// holds every connection accepted on the RPC port (RPC, sessions, Raft)
// and every Raft connection the server dials, so a paused leader neither
// answers nor sends heartbeats.
type connGate struct {
	mu   sync.Mutex
	open chan struct{} // closed while the gate is open
}

func newConnGate() *connGate {
	g := &connGate{open: make(chan struct{})}
	close(g.open)
	return g
}

// wait returns once the gate is open.
func (g *connGate) wait() {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	<-ch
}

func (g *connGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
}

func (g *connGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// gatedConn holds its reads and writes while its gate is shut. A read
// already waiting when the gate shuts still returns its bytes only once
// the gate opens, as a stopped process reads nothing.
type gatedConn struct {
	net.Conn
	g *connGate
}

func (c gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.g.wait()
	return n, err
}

func (c gatedConn) Write(p []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(p)
}

type gatedListener struct {
	net.Listener
	g *connGate
}

func (l gatedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return gatedConn{Conn: conn, g: l.g}, nil
}

// gatedStream is a Raft stream layer whose dialed connections are gated.
type gatedStream struct {
	raft.StreamLayer
	g *connGate
}

func (s gatedStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := s.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	return gatedConn{Conn: conn, g: s.g}, nil
}

// pause freezes the server's connections (see connGate); resume thaws
// them. Only a server made with Config.pausable can pause.
func (s *Server) pause() {
	if s.gate != nil {
		s.gate.shut()
	}
}

func (s *Server) resume() {
	if s.gate != nil {
		s.gate.reopen()
	}
}
