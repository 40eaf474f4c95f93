package rpc

import (
	"context"
	"fmt"
	"net"
	netrpc "net/rpc"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"
	"github.com/volplane/volplane/structs"
)

func TestPool_TypedErrorsSurviveTheWire(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{CallTimeout: 10 * time.Second})

	var reply EchoReply
	err := p.RPC(ts.addr, "Test.NotFound", &EchoArgs{Msg: "x"}, &reply)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	must.Eq(t, `volume "x" not found`, structs.MessageOf(err))
	must.False(t, IsConnError(err))

	err = p.RPC(ts.addr, "Test.Plain", &EchoArgs{}, &reply)
	must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(err))
	must.Eq(t, "plain failure", structs.MessageOf(err))

	err = p.RPC(ts.addr, "Test.NoSuchMethod", &EchoArgs{}, &reply)
	must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(err))
	must.False(t, IsConnError(err))

	// None of these cost the session.
	sess := p.session(ts.addr)
	must.NotNil(t, sess)
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "y"}, &reply))
	must.True(t, sess == p.session(ts.addr), must.Sprint("the session was replaced"))
}

func TestPool_ConcurrentCallsShareOneSession(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{CallTimeout: 30 * time.Second})

	const workers, calls = 64, 50
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				msg := fmt.Sprintf("%d/%d", w, i)
				var reply EchoReply
				if err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: msg}, &reply); err != nil {
					errs <- err
					return
				}
				if reply.Msg != msg {
					errs <- fmt.Errorf("got reply %q to %q", reply.Msg, msg)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p.mu.Lock()
	must.MapLen(t, 1, p.conns)
	p.mu.Unlock()
	must.Eq(t, 1, ts.mux.sessionCount())
}

func TestPool_RedialsAfterServerRestart(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{CallTimeout: 10 * time.Second})

	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "before"}, &reply))
	old := p.session(ts.addr)

	ts.stop(t)
	err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &reply)
	must.True(t, IsConnError(err), must.Sprintf("with the server down: %v", err))

	ts2 := startServer(t, serverOpts{addr: ts.addr})
	must.Eq(t, ts.addr, ts2.addr)

	// The old session may not have noticed its peer is gone yet: at most
	// one call fails, at connection level, and the next redials.
	err = p.RPC(ts2.addr, "Test.Echo", &EchoArgs{Msg: "after"}, &reply)
	if err != nil {
		must.True(t, IsConnError(err), must.Sprintf("%v", err))
		must.NoError(t, p.RPC(ts2.addr, "Test.Echo", &EchoArgs{Msg: "after"}, &reply))
	}
	must.Eq(t, "after", reply.Msg)
	must.True(t, old != p.session(ts2.addr), must.Sprint("the old session is still in use"))
}

func TestPool_DialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	addr := ln.Addr().String()
	must.NoError(t, ln.Close())

	p := newTestPool(t, PoolConfig{DialTimeout: 2 * time.Second})
	err = p.RPC(addr, "Test.Echo", &EchoArgs{}, &EchoReply{})
	must.True(t, IsConnError(err), must.Sprintf("%v", err))
	must.True(t, NotSent(err), must.Sprint("a failed dial sent nothing"))
	must.Nil(t, p.session(addr))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = p.RPCContext(ctx, addr, "Test.Echo", &EchoArgs{}, &EchoReply{})
	must.True(t, IsConnError(err) && NotSent(err), must.Sprintf("a call cancelled before it started: %v", err))
}

func TestPool_ReapsIdleSessions(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{MaxIdle: 50 * time.Millisecond})

	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &reply))
	sess := p.session(ts.addr)
	must.NotNil(t, sess)

	waitFor(t, 5*time.Second, "the idle session to be reaped", func() bool {
		return p.session(ts.addr) == nil && sess.IsClosed()
	})
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "again"}, &reply))
	must.Eq(t, "again", reply.Msg)
}

// A call that outlives its deadline fails as a connection error, but the
// session under it stays for the other calls.
func TestPool_CallTimeoutKeepsSession(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{CallTimeout: 100 * time.Millisecond})

	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &reply))
	sess := p.session(ts.addr)

	err := p.RPC(ts.addr, "Test.Block", &EchoArgs{}, &reply)
	must.True(t, IsConnError(err), must.Sprintf("%v", err))
	must.True(t, isTimeout(err))
	must.False(t, NotSent(err), must.Sprint("the request was sent: the server may have run it"))

	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "next"}, &reply))
	must.True(t, sess == p.session(ts.addr), must.Sprint("the session was replaced"))
}

// Over a yamux stream the oversized request reliably gets its typed error
// back, and the session carries on.
func TestPool_SizeLimit(t *testing.T) {
	ts := startServer(t, serverOpts{maxRequest: 1024})
	p := newTestPool(t, PoolConfig{CallTimeout: 10 * time.Second})

	var reply EchoReply
	err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{Blob: make([]byte, 64<<10)}, &reply)
	must.Eq(t, structs.ErrCodeTooLarge, structs.CodeOf(err), must.Sprintf("%v", err))
	must.Eq(t, "request exceeds 1024 bytes", structs.MessageOf(err))

	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "fits", Blob: make([]byte, 512)}, &reply))
	must.Eq(t, EchoReply{Msg: "fits", N: 512}, reply)
}

func TestPool_Closed(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := NewPool(PoolConfig{})
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &EchoReply{}))
	sess := p.session(ts.addr)
	must.NoError(t, p.Close())
	must.True(t, sess.IsClosed())

	err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &EchoReply{})
	must.True(t, IsConnError(err))
	must.True(t, NotSent(err))
	must.ErrorIs(t, err, ErrPoolClosed)
	must.NoError(t, p.Close())
}

// clientEndpoint stands in for the RPCs a client agent serves to servers.
type clientEndpoint struct{}

func (clientEndpoint) NodeDetach(args *EchoArgs, reply *EchoReply) error {
	reply.Msg = "detached " + args.Msg
	return nil
}

func (clientEndpoint) Missing(args *EchoArgs, reply *EchoReply) error {
	return structs.ErrNotFound("volume %q is not staged here", args.Msg)
}

// clientSession starts a server and a client pool that serves clientEndpoint
// as ClientCSI on the streams the server opens, makes the client's first
// call, which dials the session, and returns the server's end of it.
func clientSession(t testing.TB) (*testServer, *ConnPool, *yamux.Session) {
	t.Helper()
	ts := startServer(t, serverOpts{})
	clientSrv := netrpc.NewServer()
	must.NoError(t, clientSrv.RegisterName("ClientCSI", clientEndpoint{}))
	p := newTestPool(t, PoolConfig{
		AcceptStreams: func(stream net.Conn) { clientSrv.ServeCodec(NewServerCodec(stream, 0)) },
	})
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "register"}, &EchoReply{}))
	select {
	case sess := <-ts.sessions:
		return ts, p, sess
	case <-time.After(5 * time.Second):
		t.Fatal("the server was not told of the client's session")
		return nil, nil, nil
	}
}

// The server calls back into a client over the session the client dialed.
func TestCallOnSession_ServerToClient(t *testing.T) {
	ts, p, sess := clientSession(t)

	var reply EchoReply
	must.NoError(t, CallOnSession(sess, "ClientCSI.NodeDetach", &EchoArgs{Msg: "vol1"}, &reply, 5*time.Second))
	must.Eq(t, "detached vol1", reply.Msg)

	err := CallOnSession(sess, "ClientCSI.Missing", &EchoArgs{Msg: "vol2"}, &reply, 5*time.Second)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	must.Eq(t, `volume "vol2" is not staged here`, structs.MessageOf(err))

	// Many callbacks at once, while the client keeps calling the server.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 32 {
		wg.Go(func() {
			var r EchoReply
			if err := CallOnSession(sess, "ClientCSI.NodeDetach", &EchoArgs{Msg: fmt.Sprint(i)}, &r, 5*time.Second); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			if err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &EchoReply{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Once the client's pool is closed, the server's calls fail as
	// connection errors.
	must.NoError(t, p.Close())
	waitFor(t, 5*time.Second, "the server to see the session close", sess.IsClosed)
	err = CallOnSession(sess, "ClientCSI.NodeDetach", &EchoArgs{}, &reply, time.Second)
	must.True(t, IsConnError(err), must.Sprintf("%v", err))
}

// A request far beyond the limit (and beyond a stream's window) still gets
// its answer promptly, with no call deadline to fall back on.
func TestPool_FarOversizedRequestDoesNotHang(t *testing.T) {
	ts := startServer(t, serverOpts{maxRequest: 1024})
	p := newTestPool(t, PoolConfig{})

	done := make(chan error, 1)
	go func() {
		done <- p.RPC(ts.addr, "Test.Echo", &EchoArgs{Blob: make([]byte, 4<<20)}, &EchoReply{})
	}()
	select {
	case err := <-done:
		must.Eq(t, structs.ErrCodeTooLarge, structs.CodeOf(err), must.Sprintf("%v", err))
	case <-time.After(10 * time.Second):
		t.Fatal("the oversized call hung")
	}
	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "fits"}, &reply))
	must.Eq(t, "fits", reply.Msg)
}

// Arguments that cannot be encoded fail as what they are, not as a broken
// connection, and cost nothing but their stream.
func TestPool_UnencodableArgs(t *testing.T) {
	ts := startServer(t, serverOpts{})
	p := newTestPool(t, PoolConfig{CallTimeout: 10 * time.Second})

	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{}, &reply))
	sess := p.session(ts.addr)

	err := p.RPC(ts.addr, "Test.Echo", map[string]any{"ch": make(chan<- int)}, &reply)
	must.Error(t, err)
	must.False(t, IsConnError(err), must.Sprintf("%v", err))
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "ok"}, &reply))
	must.True(t, sess == p.session(ts.addr), must.Sprint("the session was replaced"))
}

// Sequential calls reuse one stream; a call that fails with a typed error
// keeps it, a too-large one does not.
func TestPool_ReusesStreams(t *testing.T) {
	ts := startServer(t, serverOpts{maxRequest: 1024})
	pool := NewPool(PoolConfig{Logger: hclog.NewNullLogger()})
	t.Cleanup(func() { pool.Close() })

	for i := 0; i < 5; i++ {
		var reply EchoReply
		must.NoError(t, pool.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "hi"}, &reply))
	}
	err := pool.RPC(ts.addr, "Test.NotFound", &EchoArgs{Msg: "x"}, &EchoReply{})
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	must.NoError(t, pool.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "again"}, &EchoReply{}))

	sess := <-ts.sessions
	must.Eq(t, 1, sess.NumStreams(), must.Sprint("one stream carried every call"))

	err = pool.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: strings.Repeat("x", 4096)}, &EchoReply{})
	must.Eq(t, structs.ErrCodeTooLarge, structs.CodeOf(err))
	var reply EchoReply
	must.NoError(t, pool.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "after"}, &reply))
	must.Eq(t, "after", reply.Msg)
}
