package rpc

import (
	"bytes"
	"io"
	"net"
	netrpc "net/rpc"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"
	"github.com/volplane/volplane/structs"
)

func TestMux_PlainRPC(t *testing.T) {
	ts := startServer(t, serverOpts{})

	var reply EchoReply
	must.NoError(t, plainCall(t, ts.addr, "Test.Echo", &EchoArgs{Msg: "hi", Blob: []byte{1, 2}}, &reply))
	must.Eq(t, EchoReply{Msg: "hi", N: 2}, reply)

	// Several calls on one plain connection.
	conn := dialRaw(t, ts.addr, RPCMsgpack)
	cc := NewClientCodec(conn)
	for i := range 3 {
		reply = EchoReply{}
		must.NoError(t, Call(cc, "Test.Echo", &EchoArgs{Msg: strings.Repeat("x", i)}, &reply))
		must.Eq(t, strings.Repeat("x", i), reply.Msg)
	}
	err := Call(cc, "Test.NotFound", &EchoArgs{Msg: "x"}, &reply)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	must.Eq(t, `volume "x" not found`, structs.MessageOf(err))
}

func TestMux_Multiplex(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{})

	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "over yamux"}, &reply))
	must.Eq(t, "over yamux", reply.Msg)

	select {
	case sess := <-ts.sessions:
		must.False(t, sess.IsClosed())
	case <-time.After(5 * time.Second):
		t.Fatal("Session handler was not told of the session")
	}
	must.Eq(t, 1, ts.mux.sessionCount())
}

func TestMux_Raft(t *testing.T) {
	ts := startServer(t, serverOpts{})
	dialer := NewRaftLayer(&net.TCPAddr{}, nil)

	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		conn, err := ts.raft.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- conn
	}()

	conn, err := dialer.Dial(raftAddr(ts.addr), 5*time.Second)
	must.NoError(t, err)
	defer conn.Close()

	var server net.Conn
	select {
	case server = <-accepted:
	case err := <-acceptErr:
		t.Fatalf("accept: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the raft layer did not accept the connection")
	}
	defer server.Close()

	must.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	must.NoError(t, server.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Write([]byte("ping"))
	must.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(server, buf)
	must.NoError(t, err)
	must.Eq(t, "ping", string(buf))
	_, err = server.Write([]byte("pong"))
	must.NoError(t, err)
	_, err = io.ReadFull(conn, buf)
	must.NoError(t, err)
	must.Eq(t, "pong", string(buf))
}

func TestMux_GarbageFirstByte(t *testing.T) {
	ts := startServer(t, serverOpts{})

	conn := dialRaw(t, ts.addr, 0xff, 'G', 'E', 'T')
	expectClosed(t, conn)
	waitFor(t, 5*time.Second, "the garbage byte to be logged", func() bool {
		return strings.Contains(ts.logs.String(), "unknown protocol byte")
	})

	var reply EchoReply
	must.NoError(t, plainCall(t, ts.addr, "Test.Echo", &EchoArgs{Msg: "still up"}, &reply))
	must.Eq(t, "still up", reply.Msg)
}

func TestMux_HandshakeTimeout(t *testing.T) {
	ts := startServer(t, serverOpts{handshake: 50 * time.Millisecond})
	conn := dialRaw(t, ts.addr) // says nothing
	expectClosed(t, conn)
}

func TestMux_MalformedHeader(t *testing.T) {
	ts := startServer(t, serverOpts{})

	conn := dialRaw(t, ts.addr, RPCMsgpack, 0xc1, 0x00, 0x00)
	expectClosed(t, conn)

	var reply EchoReply
	must.NoError(t, plainCall(t, ts.addr, "Test.Echo", &EchoArgs{Msg: "ok"}, &reply))
}

// A header that decodes, followed by a malformed body: net/rpc answers the
// call with the error, then the connection is closed, because the bytes
// after a bad frame cannot be trusted to start a request.
func TestMux_MalformedBody(t *testing.T) {
	ts := startServer(t, serverOpts{})

	conn := dialRaw(t, ts.addr, RPCMsgpack)
	var wire bytes.Buffer
	wire.Write(encodeMsgpack(t, &netrpc.Request{ServiceMethod: "Test.Echo", Seq: 7}))
	wire.Write([]byte{0x82, 0xa3, 'M', 's', 'g', 0xc1})
	// A well-formed request after it must not be served.
	wire.Write(encodeMsgpack(t, &netrpc.Request{ServiceMethod: "Test.Echo", Seq: 8}, &EchoArgs{Msg: "x"}))
	_, err := conn.Write(wire.Bytes())
	must.NoError(t, err)

	must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	cc := NewClientCodec(conn)
	var resp netrpc.Response
	must.NoError(t, cc.ReadResponseHeader(&resp))
	must.Eq(t, uint64(7), resp.Seq)
	must.Eq(t, structs.ErrCodeInvalid, structs.ParseError(resp.Error).Code)
	must.NoError(t, cc.ReadResponseBody(nil))
	must.ErrorIs(t, cc.ReadResponseHeader(&resp), io.EOF)

	var reply EchoReply
	must.NoError(t, plainCall(t, ts.addr, "Test.Echo", &EchoArgs{Msg: "ok"}, &reply))
}

// Over a plain TCP connection the oversized request gets the too-large code
// back, unless the close (with unread data, so a reset) overtakes the
// response; either way the connection ends and others are unaffected.
func TestMux_SizeLimitPlain(t *testing.T) {
	ts := startServer(t, serverOpts{maxRequest: 1024})

	conn := dialRaw(t, ts.addr, RPCMsgpack)
	must.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	cc := NewClientCodec(conn)
	var reply EchoReply
	err := Call(cc, "Test.Echo", &EchoArgs{Msg: "big", Blob: make([]byte, 4096)}, &reply)
	if !IsConnError(err) {
		must.Eq(t, structs.ErrCodeTooLarge, structs.CodeOf(err), must.Sprintf("%v", err))
		must.Eq(t, "request exceeds 1024 bytes", structs.MessageOf(err))
	}
	expectClosed(t, conn)

	must.NoError(t, plainCall(t, ts.addr, "Test.Echo", &EchoArgs{Msg: "small", Blob: make([]byte, 100)}, &reply))
	must.Eq(t, EchoReply{Msg: "small", N: 100}, reply)
}

func TestMux_CloseWaitsAndEndsConnections(t *testing.T) {
	ts := startServer(t, serverOpts{})

	idlePlain := dialRaw(t, ts.addr, RPCMsgpack)
	silent := dialRaw(t, ts.addr) // still in the handshake
	p := newTestPool(t, PoolConfig{})
	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &reply))
	sess := p.session(ts.addr)
	must.NotNil(t, sess)

	// A call in flight on a plain connection is answered before Close
	// returns (net/rpc waits for it), once the endpoint is let go.
	inflight := dialRaw(t, ts.addr, RPCMsgpack)
	callDone := make(chan error, 1)
	go func() {
		cc := NewClientCodec(inflight)
		var r EchoReply
		callDone <- Call(cc, "Test.Block", &EchoArgs{Msg: "late"}, &r)
	}()
	waitFor(t, 5*time.Second, "all four connections to be accepted", func() bool {
		ts.mux.mu.Lock()
		defer ts.mux.mu.Unlock()
		return len(ts.mux.conns) >= 4
	})

	ts.unblock()
	closed := make(chan struct{})
	go func() {
		ts.mux.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	ts.stop(t) // checks that Serve returned nil

	expectClosed(t, idlePlain)
	expectClosed(t, silent)
	select {
	case <-sess.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("the client session was not closed by the server")
	}
	select {
	case err := <-callDone:
		// Let go before the close, so it may have completed; otherwise it
		// failed on the closed connection.
		if err != nil {
			must.True(t, IsConnError(err), must.Sprintf("%v", err))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the in-flight call never returned")
	}

	// A closed mux refuses to serve again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	must.ErrorIs(t, ts.mux.Serve(ln), ErrMuxClosed)
}

// An endpoint call that never returns holds its connection's ServeCodec,
// which Close waits for: the wait is bounded, logged and returned as an
// error, so a stuck handler cannot hold a server's shutdown forever.
func TestMux_CloseDoesNotWaitForeverForAHandler(t *testing.T) {
	ts := startServer(t, serverOpts{closeWait: 200 * time.Millisecond})
	stuck := dialRaw(t, ts.addr, RPCMsgpack)
	go func() {
		var r EchoReply
		_ = Call(NewClientCodec(stuck), "Test.Block", &EchoArgs{Msg: "never answered"}, &r)
	}()
	waitFor(t, 5*time.Second, "the blocked call to be running", func() bool {
		return ts.ep.blocked() > 0
	})

	start := time.Now()
	err := ts.mux.Close()
	took := time.Since(start)
	must.ErrorContains(t, err, "connection handlers still running 200ms after close")
	must.Less(t, 5*time.Second, took, must.Sprint("Close waited past its bound"))
	must.StrContains(t, ts.logs.String(), "closed without waiting for handlers still running")

	// Let go, the handler ends, and a later Close waits for it.
	ts.unblock()
	waitFor(t, 10*time.Second, "a Close that found every handler ended", func() bool {
		return ts.mux.Close() == nil
	})
}

func TestMux_NoHandlers(t *testing.T) {
	m := NewMux(MuxConfig{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- m.Serve(ln) }()
	defer func() {
		must.NoError(t, m.Close())
		must.NoError(t, <-served)
	}()

	for _, b := range []byte{RPCMsgpack, RPCRaft} {
		expectClosed(t, dialRaw(t, ln.Addr().String(), b))
	}
	// A session with no RPC handler: streams are refused, the session
	// stays up.
	conn := dialRaw(t, ln.Addr().String(), RPCMultiplex)
	sess, err := yamux.Client(conn, yamuxConfig(nil, hclog.NewNullLogger()))
	must.NoError(t, err)
	defer sess.Close()
	err = CallOnSession(sess, "Test.Echo", &EchoArgs{}, &EchoReply{}, 5*time.Second)
	must.True(t, IsConnError(err), must.Sprintf("%v", err))
}

// Garbage inside a yamux session ends that session (yamux logs why, through
// hclog) and nothing else.
func TestMux_GarbageInsideSession(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{})
	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &reply))

	conn := dialRaw(t, ts.addr, RPCMultiplex, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9)
	expectClosed(t, conn)
	waitFor(t, 5*time.Second, "yamux's complaint in the server log", func() bool {
		return strings.Contains(ts.logs.String(), "yamux: Invalid protocol version")
	})

	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "unaffected"}, &reply))
	must.Eq(t, "unaffected", reply.Msg)
}
