package rpc

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// handoffTimeout bounds how long Handoff waits for Accept. raft's transport
// accepts in a loop, so this is reached only when nobody is accepting; it
// keeps such a connection from pinning a Mux goroutine (Mux.Close gives up
// on those after its own CloseTimeout).
const handoffTimeout = 10 * time.Second

// RaftLayer is a raft.StreamLayer on the shared RPC port: the Mux hands it
// connections that began with RPCRaft, and Dial writes that byte first.
type RaftLayer struct {
	addr      net.Addr
	tls       func() *tls.Config
	connCh    chan net.Conn
	closeCh   chan struct{}
	closeOnce sync.Once

	// served are the connections Accept handed out whose handler has not
	// closed them yet (see Drain).
	mu     sync.Mutex
	served map[*servedConn]struct{}
}

var _ raft.StreamLayer = (*RaftLayer)(nil)

// NewRaftLayer returns a layer that reports addr, the address other servers
// dial, as its own. tlsConfig, when not nil, gives the config of each dial's
// TLS handshake (nil from it means plaintext).
func NewRaftLayer(addr net.Addr, tlsConfig func() *tls.Config) *RaftLayer {
	return &RaftLayer{
		addr:    addr,
		tls:     tlsConfig,
		connCh:  make(chan net.Conn),
		closeCh: make(chan struct{}),
		served:  map[*servedConn]struct{}{},
	}
}

// Handoff gives an accepted connection (its protocol byte already read) to
// Accept. If the layer is closed, or nobody accepts within a bound, it
// closes conn and returns an error.
func (l *RaftLayer) Handoff(conn net.Conn) error {
	// Checked first so a closed layer never takes a connection, whatever
	// order select would pick.
	select {
	case <-l.closeCh:
		conn.Close()
		return fmt.Errorf("raft layer closed: %w", net.ErrClosed)
	default:
	}
	t := time.NewTimer(handoffTimeout)
	defer t.Stop()
	select {
	case l.connCh <- conn:
		return nil
	case <-l.closeCh:
		conn.Close()
		return fmt.Errorf("raft layer closed: %w", net.ErrClosed)
	case <-t.C:
		conn.Close()
		return fmt.Errorf("raft layer: no Accept within %s", handoffTimeout)
	}
}

// Accept waits for the next connection given to Handoff.
func (l *RaftLayer) Accept() (net.Conn, error) {
	select {
	case <-l.closeCh:
		return nil, fmt.Errorf("raft layer closed: %w", net.ErrClosed)
	default:
	}
	select {
	case conn := <-l.connCh:
		c := &servedConn{Conn: conn, layer: l, closed: make(chan struct{})}
		l.mu.Lock()
		l.served[c] = struct{}{}
		l.mu.Unlock()
		return c, nil
	case <-l.closeCh:
		return nil, fmt.Errorf("raft layer closed: %w", net.ErrClosed)
	}
}

// servedConn is a connection Accept handed to Raft's transport, which
// serves it in a goroutine of its own that nothing waits for; that
// goroutine closes it when it ends, whatever the reason.
type servedConn struct {
	net.Conn
	layer  *RaftLayer
	once   sync.Once
	closed chan struct{}
	// drained is set when Drain closes the connection: its goroutine's
	// next read then ends as the peer's close would, with io.EOF, which
	// the transport does not log as an error.
	drained atomic.Bool
}

func (c *servedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.drained.Load() {
		err = io.EOF
	}
	return n, err
}

func (c *servedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.served, c)
		c.layer.mu.Unlock()
		close(c.closed)
	})
	return err
}

// Drain closes every connection Accept handed out and waits, until
// timeout at most, for the transport's goroutines that serve them to end,
// and reports whether they all did. Call it after Raft and its transport
// shut down and before the Raft stores close: the transport answers a
// heartbeat in the serving goroutine itself, and one that began before
// Raft shut down may still write the current term to the store.
func (l *RaftLayer) Drain(timeout time.Duration) bool {
	l.mu.Lock()
	served := make([]*servedConn, 0, len(l.served))
	for c := range l.served {
		served = append(served, c)
	}
	l.mu.Unlock()
	// The underlying connections: a goroutine reading its next command
	// fails now, and one answering a command fails at its answer.
	for _, c := range served {
		c.drained.Store(true)
		c.Conn.Close()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, c := range served {
		select {
		case <-c.closed:
		case <-t.C:
			return false
		}
	}
	return true
}

// Close makes Accept and Handoff fail from now on. It does not touch the
// shared listener, which the Mux owns. Safe to call more than once.
func (l *RaftLayer) Close() error {
	l.closeOnce.Do(func() { close(l.closeCh) })
	return nil
}

// Addr is the advertised address.
func (l *RaftLayer) Addr() net.Addr { return l.addr }

// Dial connects to another server's RPC port and selects Raft.
func (l *RaftLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return dialProtocol(string(address), RPCRaft, timeout, tlsConfigOf(l.tls))
}

func tlsConfigOf(f func() *tls.Config) *tls.Config {
	if f == nil {
		return nil
	}
	return f()
}

// dialProtocol connects to addr's RPC port and selects proto. With a TLS
// config it first selects RPCTLS, runs the handshake, and selects proto
// inside TLS; timeout bounds the dial and, separately, the handshake.
func dialProtocol(addr string, proto byte, timeout time.Duration, tlsCfg *tls.Config) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		if err := writeProtocolByte(conn, proto, timeout); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	if err := writeProtocolByte(conn, RPCTLS, timeout); err != nil {
		conn.Close()
		return nil, err
	}
	tc := tls.Client(conn, tlsCfg)
	if timeout > 0 {
		if err := tc.SetDeadline(time.Now().Add(timeout)); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	// The server acknowledges once it has verified our certificate; its
	// refusal (an expired certificate, say) arrives here as a TLS alert.
	var ack [1]byte
	if _, err := io.ReadFull(tc, ack[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	if ack[0] != RPCTLS {
		conn.Close()
		return nil, fmt.Errorf("TLS handshake with %s: unexpected acknowledgment %#x", addr, ack[0])
	}
	if _, err := tc.Write([]byte{proto}); err != nil {
		tc.Close()
		return nil, err
	}
	if err := tc.SetDeadline(time.Time{}); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// writeProtocolByte writes the first byte of a connection, within timeout
// when it is positive.
func writeProtocolByte(conn net.Conn, b byte, timeout time.Duration) error {
	if timeout > 0 {
		if err := conn.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
			return err
		}
	}
	if _, err := conn.Write([]byte{b}); err != nil {
		return err
	}
	return conn.SetWriteDeadline(time.Time{})
}
