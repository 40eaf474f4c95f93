package rpc

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"
)

func raftAddr(addr string) raft.ServerAddress { return raft.ServerAddress(addr) }

func TestRaftLayer_Closed(t *testing.T) {
	// Only the address reported; nothing binds it.
	l := NewRaftLayer(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0}, nil)
	must.Eq(t, "127.0.0.1:0", l.Addr().String())
	must.NoError(t, l.Close())
	must.NoError(t, l.Close())

	_, err := l.Accept()
	must.ErrorIs(t, err, net.ErrClosed)

	a, b := net.Pipe()
	defer b.Close()
	must.ErrorIs(t, l.Handoff(a), net.ErrClosed)
	// Handoff closed the connection it could not place.
	_, err = a.Write([]byte{1})
	must.ErrorIs(t, err, io.ErrClosedPipe)
}

// Two raft network transports talk through their servers' muxes: the
// append-entries request and its response cross the shared port.
func TestRaftLayer_NetworkTransport(t *testing.T) {
	ts1 := startServer(t, serverOpts{})
	ts2 := startServer(t, serverOpts{})

	t1 := raft.NewNetworkTransport(ts1.raft, 2, 5*time.Second, io.Discard)
	defer t1.Close()
	t2 := raft.NewNetworkTransport(ts2.raft, 2, 5*time.Second, io.Discard)
	defer t2.Close()

	served := make(chan struct{})
	go func() {
		defer close(served)
		select {
		case rpc := <-t2.Consumer():
			req := rpc.Command.(*raft.AppendEntriesRequest)
			rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, Success: true}, nil)
		case <-time.After(10 * time.Second):
		}
	}()

	args := raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("s1"), Addr: []byte(ts1.addr)},
		Term:      7,
		Entries:   []*raft.Log{{Index: 1, Term: 7, Data: []byte("entry")}},
	}
	var resp raft.AppendEntriesResponse
	must.NoError(t, t1.AppendEntries("s2", raftAddr(ts2.addr), &args, &resp))
	must.True(t, resp.Success)
	must.Eq(t, uint64(7), resp.Term)
	<-served
}

// Drain closes the connections Accept handed out and waits for the
// goroutine serving each to close it: one in the middle of a command (as
// a heartbeat writing the term to the store) is waited for; a connection
// whose goroutine never ends makes Drain give up at its timeout.
func TestRaftLayer_DrainWaitsForServingGoroutines(t *testing.T) {
	l := NewRaftLayer(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
	accept := func() (net.Conn, net.Conn) {
		a, b := net.Pipe()
		go func() { _ = l.Handoff(a) }()
		conn, err := l.Accept()
		must.NoError(t, err)
		return conn, b
	}
	conn, peer := accept()
	defer peer.Close()
	processing, release, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		// The transport's goroutine: it reads a command, works on it,
		// answers, and closes the connection when it ends.
		defer close(ended)
		defer conn.Close()
		var cmd [1]byte
		if _, err := io.ReadFull(conn, cmd[:]); err != nil {
			return
		}
		close(processing)
		<-release
		_, _ = conn.Write(cmd[:])
	}()
	_, err := peer.Write([]byte{7})
	must.NoError(t, err)
	<-processing

	drained := make(chan bool, 1)
	go func() { drained <- l.Drain(time.Minute) }()
	// Drain closed the connection underneath (the peer sees it), and still
	// waits for the command in progress.
	_, err = peer.Read(make([]byte, 1))
	must.Error(t, err)
	select {
	case <-drained:
		t.Fatal("Drain returned while a command was being served")
	default:
	}
	close(release)
	must.True(t, <-drained)
	<-ended
	// What the serving goroutine reads after the drain is the end of the
	// stream, as a peer's close, not an error the transport would log.
	_, err = conn.Read(make([]byte, 1))
	must.ErrorIs(t, err, io.EOF)

	// A connection whose serving goroutine never closes it.
	_, peer2 := accept()
	defer peer2.Close()
	must.False(t, l.Drain(10*time.Millisecond))
}
