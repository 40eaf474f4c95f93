package rpc

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	netrpc "net/rpc"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

type EchoArgs struct {
	Msg  string
	Blob []byte
}

type EchoReply struct {
	Msg string
	N   int
}

// testEndpoint is registered as "Test" on every test server.
type testEndpoint struct {
	block chan struct{} // Block waits until it is closed

	mu         sync.Mutex
	inBlock    int // Block calls waiting now
	maxInBlock int // the most ever waiting at once
}

// blocked is the number of Block calls waiting now.
func (e *testEndpoint) blocked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inBlock
}

func (e *testEndpoint) Echo(args *EchoArgs, reply *EchoReply) error {
	reply.Msg = args.Msg
	reply.N = len(args.Blob)
	return nil
}

// Overwrite changes its arguments, as an endpoint must not: InmemCall's
// copy keeps the caller's from changing with them.
func (e *testEndpoint) Overwrite(args *EchoArgs, reply *EchoReply) error {
	args.Msg = "overwritten"
	reply.Msg = args.Msg
	return nil
}

func (e *testEndpoint) ByValue(args EchoArgs, reply *EchoReply) error {
	reply.Msg = "value:" + args.Msg
	return nil
}

func (e *testEndpoint) NotFound(args *EchoArgs, reply *EchoReply) error {
	return structs.ErrNotFound("volume %q not found", args.Msg)
}

func (e *testEndpoint) Plain(args *EchoArgs, reply *EchoReply) error {
	return errors.New("plain failure")
}

func (e *testEndpoint) Block(args *EchoArgs, reply *EchoReply) error {
	e.mu.Lock()
	e.inBlock++
	e.maxInBlock = max(e.maxInBlock, e.inBlock)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.inBlock--
		e.mu.Unlock()
	}()
	<-e.block
	reply.Msg = args.Msg
	return nil
}

func newTestRPCServer(t testing.TB) (*netrpc.Server, *testEndpoint) {
	ep := &testEndpoint{block: make(chan struct{})}
	srv := netrpc.NewServer()
	must.NoError(t, srv.RegisterName("Test", ep))
	return srv, ep
}

// syncBuffer is a log destination tests can read while servers write.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type serverOpts struct {
	addr       string // "" for a fresh port
	maxRequest int64
	handshake  time.Duration
	tls        *tls.Config
	requireTLS bool
	maxConns   int
	maxStreams int
	closeWait  time.Duration
}

// testServer is one mux on a loopback port with the Test endpoint, a Raft
// layer and a channel of the yamux sessions it accepted.
type testServer struct {
	addr     string
	mux      *Mux
	srv      *netrpc.Server
	ep       *testEndpoint
	raft     *RaftLayer
	sessions chan *yamux.Session
	peers    chan Peer // the peer of each RPC connection or stream and Raft connection, while there is room
	refused  chan string
	logs     *syncBuffer

	stopOnce sync.Once
	served   chan error
	release  sync.Once
}

func startServer(t testing.TB, opts serverOpts) *testServer {
	t.Helper()
	addr := opts.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	must.NoError(t, err)

	srv, ep := newTestRPCServer(t)
	ts := &testServer{
		addr:     ln.Addr().String(),
		srv:      srv,
		ep:       ep,
		raft:     NewRaftLayer(ln.Addr(), nil),
		sessions: make(chan *yamux.Session, 16),
		peers:    make(chan Peer, 64),
		refused:  make(chan string, 1024),
		logs:     &syncBuffer{},
		served:   make(chan error, 1),
	}
	ts.mux = NewMux(MuxConfig{
		Handlers: Handlers{
			RPC: func(conn net.Conn, p Peer) {
				ts.notePeer(p)
				srv.ServeCodec(NewServerCodec(conn, opts.maxRequest))
			},
			Raft: func(conn net.Conn, p Peer) {
				ts.notePeer(p)
				_ = ts.raft.Handoff(conn)
			},
			Session: func(sess *yamux.Session, _ Peer) {
				select {
				case ts.sessions <- sess:
				default:
				}
			},
		},
		Logger:               hclog.New(&hclog.LoggerOptions{Output: ts.logs, Level: hclog.Debug}),
		HandshakeTimeout:     opts.handshake,
		TLS:                  opts.tls,
		RequireTLS:           opts.requireTLS,
		MaxConnsPerClient:    opts.maxConns,
		MaxStreamsPerSession: opts.maxStreams,
		CloseTimeout:         opts.closeWait,
		Refused: func(reason string) {
			select {
			case ts.refused <- reason:
			default:
			}
		},
	})
	go func() { ts.served <- ts.mux.Serve(ln) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testServer) notePeer(p Peer) {
	select {
	case ts.peers <- p:
	default:
	}
}

// unblock lets every Block call return.
func (ts *testServer) unblock() { ts.release.Do(func() { close(ts.ep.block) }) }

// stop closes the mux and checks Serve returned nil.
func (ts *testServer) stop(t testing.TB) {
	ts.stopOnce.Do(func() {
		// Endpoint calls in flight are waited for by net/rpc, so blocked
		// ones must be let go first.
		ts.unblock()
		must.NoError(t, ts.mux.Close())
		ts.raft.Close()
		select {
		case err := <-ts.served:
			must.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("Serve did not return after Close")
		}
	})
}

// dialRaw opens a TCP connection to the server and writes first.
func dialRaw(t testing.TB, addr string, first ...byte) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	must.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	if len(first) > 0 {
		_, err = conn.Write(first)
		must.NoError(t, err)
	}
	return conn
}

// expectClosed reads conn until it fails, and fails the test if that is a
// timeout rather than the server closing the connection.
func expectClosed(t testing.TB, conn net.Conn) {
	t.Helper()
	must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 4096)
	for {
		_, err := conn.Read(buf)
		if err == nil {
			continue
		}
		must.False(t, isTimeout(err), must.Sprintf("connection not closed by the server: %v", err))
		return
	}
}

// waitFor polls cond with testutil.WaitForResult until it holds or timeout
// passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.WaitForResult(t, timeout, func() (bool, error) {
		return cond(), fmt.Errorf("still waiting for %s", what)
	})
}

// plainCall makes one call on a fresh plain (0x01) connection.
func plainCall(t testing.TB, addr, method string, args, reply any) error {
	t.Helper()
	conn := dialRaw(t, addr, RPCMsgpack)
	cc := NewClientCodec(conn)
	defer cc.Close()
	must.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	return Call(cc, method, args, reply)
}

// rwc adapts a reader and a writer to an io.ReadWriteCloser for codec
// tests that need no connection.
type rwc struct {
	io.Reader
	io.Writer
}

func (rwc) Close() error { return nil }

func newTestPool(t testing.TB, cfg PoolConfig) *ConnPool {
	p := NewPool(cfg)
	t.Cleanup(func() { must.NoError(t, p.Close()) })
	return p
}

// sessionCount is the number of yamux sessions the mux is serving.
func (m *Mux) connCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.conns)
}

func (m *Mux) sessionCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// session returns the pool's current session for addr, or nil.
func (p *ConnPool) session(addr string) *yamux.Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.conns[addr]
	if c == nil {
		return nil
	}
	select {
	case <-c.ready:
		return c.sess
	default:
		return nil
	}
}
