package rpc

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/testutil"
	"github.com/volplane/volplane/tlsutil"
)

// tlsServer starts a test server that requires TLS with the fixture's
// server certificate.
func tlsServer(t *testing.T, files *testutil.TLSFiles, opts serverOpts) *testServer {
	t.Helper()
	opts.tls = files.Configurator(t, files.Server).IncomingRPC()
	opts.requireTLS = true
	return startServer(t, opts)
}

func tlsPool(t *testing.T, c *tlsutil.Configurator) *ConnPool {
	return newTestPool(t, PoolConfig{DialTimeout: 5 * time.Second, CallTimeout: 5 * time.Second, TLS: c.OutgoingRPC})
}

func expectRefused(t *testing.T, ts *testServer, reason, logged string) {
	t.Helper()
	select {
	case got := <-ts.refused:
		must.Eq(t, reason, got)
	case <-time.After(5 * time.Second):
		t.Fatalf("no refusal (%s) counted", reason)
	}
	waitFor(t, 5*time.Second, "the refusal to be logged", func() bool {
		return strings.Contains(ts.logs.String(), logged)
	})
}

func TestTLS_MutualCallCarriesPeerRole(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	ts := tlsServer(t, files, serverOpts{})

	p := tlsPool(t, files.Configurator(t, files.Client))
	var reply EchoReply
	must.NoError(t, p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "over tls"}, &reply))
	must.Eq(t, "over tls", reply.Msg)

	peer := <-ts.peers
	must.NotNil(t, peer.TLS)
	must.Eq(t, tlsutil.RoleClient, tlsutil.PeerRole(*peer.TLS, "global"))
}

func TestTLS_PlaintextRefused(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	ts := tlsServer(t, files, serverOpts{})

	for _, b := range []byte{RPCMsgpack, RPCRaft, RPCMultiplex} {
		conn := dialRaw(t, ts.addr, b)
		expectClosed(t, conn)
		expectRefused(t, ts, "plaintext", "refusing a plaintext connection")
	}
	p := newTestPool(t, PoolConfig{DialTimeout: 2 * time.Second, CallTimeout: 2 * time.Second})
	err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "x"}, &EchoReply{})
	must.Error(t, err)
	must.True(t, IsConnError(err))
}

func TestTLS_BadCertificatesRefusedOnBothEnds(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	other := testutil.NewTLSFiles(t) // another CA
	ts := tlsServer(t, files, serverOpts{})

	cases := map[string]*tlsutil.Configurator{
		"wrong CA": other.Configurator(t, other.Client),
		"expired":  files.Configurator(t, files.IssueExpired(t, "expired", tlsutil.RoleClient)),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := tlsPool(t, c)
			err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "x"}, &EchoReply{})
			must.Error(t, err)
			must.StrContains(t, err.Error(), "TLS handshake")
			expectRefused(t, ts, "tls_handshake", "TLS handshake failed")
		})
	}
	// The server is still up for a good peer.
	var reply EchoReply
	must.NoError(t, tlsPool(t, files.Configurator(t, files.Client)).RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "ok"}, &reply))
}

func TestTLS_GarbageAfterTLSByte(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	ts := tlsServer(t, files, serverOpts{})
	conn := dialRaw(t, ts.addr, RPCTLS, 'G', 'E', 'T', ' ', '/', '\r', '\n', '\r', '\n')
	expectClosed(t, conn)
	expectRefused(t, ts, "tls_handshake", "TLS handshake failed")
	// The log line says who was refused and why.
	waitFor(t, 5*time.Second, "the refusal to name the peer and the reason", func() bool {
		for _, line := range strings.Split(ts.logs.String(), "\n") {
			if strings.Contains(line, "TLS handshake failed") && strings.Contains(line, "remote="+conn.LocalAddr().String()) &&
				strings.Contains(line, "does not look like a TLS handshake") {
				return true
			}
		}
		return false
	})

	var reply EchoReply
	must.NoError(t, tlsPool(t, files.Configurator(t, files.Client)).RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "up"}, &reply))
}

func TestTLS_StalledHandshakeTimesOut(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	ts := tlsServer(t, files, serverOpts{handshake: 100 * time.Millisecond})
	conn := dialRaw(t, ts.addr, RPCTLS) // then nothing
	expectClosed(t, conn)
}

func TestTLS_VerifyServerHostname(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	// A "server" presenting a client certificate.
	impostor := startServer(t, serverOpts{tls: files.Configurator(t, files.Client).IncomingRPC(), requireTLS: true})

	p := tlsPool(t, files.Configurator(t, files.Client))
	err := p.RPC(impostor.addr, "Test.Echo", &EchoArgs{Msg: "x"}, &EchoReply{})
	must.Error(t, err)
	must.StrContains(t, err.Error(), "server.global.volplane")

	// Without the name check the chain alone is verified.
	cfg := files.Config(files.Client)
	cfg.VerifyServerHostname = false
	loose, err := tlsutil.NewConfigurator(cfg)
	must.NoError(t, err)
	var reply EchoReply
	must.NoError(t, tlsPool(t, loose).RPC(impostor.addr, "Test.Echo", &EchoArgs{Msg: "chain only"}, &reply))
}

func TestTLS_RaftLayer(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	ts := tlsServer(t, files, serverOpts{})
	dialer := NewRaftLayer(&net.TCPAddr{}, files.Configurator(t, files.Server).OutgoingRPC)

	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ts.raft.Accept(); err == nil {
			accepted <- conn
		}
	}()
	conn, err := dialer.Dial(raftAddr(ts.addr), 5*time.Second)
	must.NoError(t, err)
	defer conn.Close()
	var server net.Conn
	select {
	case server = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the raft layer did not accept the connection")
	}
	defer server.Close()
	peer := <-ts.peers
	must.Eq(t, tlsutil.RoleServer, tlsutil.PeerRole(*peer.TLS, "global"))

	must.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	must.NoError(t, server.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = conn.Write([]byte("ping"))
	must.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(server, buf)
	must.NoError(t, err)
	must.Eq(t, "ping", string(buf))
}

func TestMux_ConnLimitPerClient(t *testing.T) {
	ts := startServer(t, serverOpts{maxConns: 3})
	var conns []net.Conn
	for range 3 {
		conns = append(conns, dialRaw(t, ts.addr, RPCMsgpack))
	}
	// Wait for the three to be tracked before the fourth.
	waitFor(t, 5*time.Second, "three connections", func() bool { return ts.mux.connCount() == 3 })
	extra := dialRaw(t, ts.addr, RPCMsgpack)
	expectClosed(t, extra)
	expectRefused(t, ts, "conn_limit", "too many connections from this address")

	// Closing one frees its place.
	conns[0].Close()
	waitFor(t, 5*time.Second, "the closed connection to be freed", func() bool { return ts.mux.connCount() == 2 })
	var reply EchoReply
	must.NoError(t, plainCall(t, ts.addr, "Test.Echo", &EchoArgs{Msg: "room again"}, &reply))
}

func TestMux_StreamsPerSessionBounded(t *testing.T) {
	ts := startServer(t, serverOpts{maxStreams: 2})
	conn := dialRaw(t, ts.addr, RPCMultiplex)
	client, err := yamux.Client(conn, nil)
	must.NoError(t, err)
	defer client.Close()

	var wg sync.WaitGroup
	done := make(chan string, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reply EchoReply
			// One stream per call, closed after it.
			if err := CallOnSession(client, "Test.Block", &EchoArgs{Msg: string(rune('a' + i))}, &reply, 10*time.Second); err == nil {
				done <- reply.Msg
			}
		}()
	}
	// Two are served and block; the third's stream is open on the server
	// but waits for a slot.
	sess := <-ts.sessions
	waitFor(t, 5*time.Second, "two blocked calls and three streams", func() bool {
		return ts.ep.blocked() == 2 && sess.NumStreams() == 3
	})
	ts.unblock()
	wg.Wait()
	must.Eq(t, 3, len(done))
	ts.ep.mu.Lock()
	defer ts.ep.mu.Unlock()
	must.Eq(t, 2, ts.ep.maxInBlock)
}
