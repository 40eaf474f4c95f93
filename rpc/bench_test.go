package rpc

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	_, _, sess := clientSession(b)
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
