package rpc

import (
	"net"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// BenchmarkPoolRPC measures round trips of a small call over one pooled
// yamux session on loopback: one caller at a time, and 64 at once.
func BenchmarkPoolRPC(b *testing.B) {
	ts := startServer(b, serverOpts{})
	p := newTestPool(b, PoolConfig{CallTimeout: 30 * time.Second})
	args := &EchoArgs{Msg: "benchmark"}
	if err := p.RPC(ts.addr, "Test.Echo", args, &EchoReply{}); err != nil {
		b.Fatal(err)
	}

	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var reply EchoReply
			if err := p.RPC(ts.addr, "Test.Echo", args, &reply); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	})

	b.Run("concurrent64", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup
		b.ResetTimer()
		for range 64 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					var reply EchoReply
					if err := p.RPC(ts.addr, "Test.Echo", args, &reply); err != nil {
						failed.Store(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	})
}

// BenchmarkCallOnSession measures calls from a server to a client agent
// over the session the agent dialed, each on a stream of its own, as the
// volume watcher's detach calls are made.
func BenchmarkCallOnSession(b *testing.B) {
	ts := startServer(b, serverOpts{})
	clientSrv := netrpc.NewServer()
	if err := clientSrv.RegisterName("ClientCSI", clientEndpoint{}); err != nil {
		b.Fatal(err)
	}
	p := newTestPool(b, PoolConfig{
		AcceptStreams: func(stream net.Conn) { clientSrv.ServeCodec(NewServerCodec(stream, 0)) },
	})
	if err := p.RPC(ts.addr, "Test.Echo", &EchoArgs{Msg: "register"}, &EchoReply{}); err != nil {
		b.Fatal(err)
	}
	var sess *yamux.Session
	select {
	case sess = <-ts.sessions:
	case <-time.After(5 * time.Second):
		b.Fatal("the server was not told of the client's session")
	}
	args := &EchoArgs{Msg: "vol"}
	b.ReportAllocs()
	for b.Loop() {
		var reply EchoReply
		if err := CallOnSession(sess, "ClientCSI.NodeDetach", args, &reply, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}
