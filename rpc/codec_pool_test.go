package rpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	netrpc "net/rpc"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/yamux"

	"github.com/shoenig/test/must"
)

// keptStates records the codec states Close gives back, instead of pooling
// them, for the test's life.
func keptStates(t *testing.T) *[]*codecState {
	var kept []*codecState
	prev := putCodecState
	putCodecState = func(s *codecState) { kept = append(kept, s) }
	t.Cleanup(func() { putCodecState = prev })
	return &kept
}

// closeCounter is a connection that counts its closes.
type closeCounter struct {
	io.Reader
	io.Writer
	closes int
}

func (c *closeCounter) Close() error { c.closes++; return nil }

// TestCodec_StateReusedOnlyAfterACleanConversation: a codec closed after
// its call gives its state back, and a new codec made from that state
// reads only its own connection, none of the bytes the previous one had
// buffered; a codec whose write failed, or whose reply could not be
// encoded, keeps its state out of the pool.
func TestCodec_StateReusedOnlyAfterACleanConversation(t *testing.T) {
	kept := keptStates(t)

	// The first connection carries a request and, behind it, another one
	// that its codec reads into its buffer but never decodes.
	first := encodeMsgpack(t,
		&netrpc.Request{ServiceMethod: "Test.Echo", Seq: 1}, &EchoArgs{Msg: "one"},
		&netrpc.Request{ServiceMethod: "Test.Leftover", Seq: 2}, &EchoArgs{Msg: "leftover"})
	var out1 bytes.Buffer
	conn1 := &closeCounter{Reader: bytes.NewReader(first), Writer: &out1}
	c1 := NewServerCodec(conn1, 0)
	var hdr netrpc.Request
	var args EchoArgs
	must.NoError(t, c1.ReadRequestHeader(&hdr))
	must.NoError(t, c1.ReadRequestBody(&args))
	must.Eq(t, "one", args.Msg)
	must.NoError(t, c1.WriteResponse(&netrpc.Response{ServiceMethod: hdr.ServiceMethod, Seq: hdr.Seq}, &EchoReply{Msg: "one"}))
	must.NoError(t, c1.Close())
	must.Eq(t, 1, conn1.closes)
	must.Len(t, 1, *kept)

	// Calls on the closed codec fail and reach nothing.
	written := out1.Len()
	must.ErrorIs(t, c1.WriteResponse(&netrpc.Response{Seq: 9}, &EchoReply{}), net.ErrClosed)
	must.ErrorIs(t, c1.ReadRequestHeader(&hdr), net.ErrClosed)
	must.NoError(t, c1.Close())
	must.Eq(t, 1, conn1.closes)
	must.Eq(t, written, out1.Len())

	// The state serves a second connection: it reads that connection's
	// request, not the leftover of the first, and writes only to it.
	second := encodeMsgpack(t, &netrpc.Request{ServiceMethod: "Test.Echo", Seq: 7}, &EchoArgs{Msg: "two"})
	var out2 bytes.Buffer
	c2 := &serverCodec{bindCodec((*kept)[0], &closeCounter{Reader: bytes.NewReader(second), Writer: &out2}, 0, "request")}
	must.NoError(t, c2.ReadRequestHeader(&hdr))
	must.Eq(t, "Test.Echo", hdr.ServiceMethod)
	must.Eq(t, uint64(7), hdr.Seq)
	must.NoError(t, c2.ReadRequestBody(&args))
	must.Eq(t, "two", args.Msg)
	must.NoError(t, c2.WriteResponse(&netrpc.Response{ServiceMethod: hdr.ServiceMethod, Seq: hdr.Seq}, &EchoReply{Msg: "two"}))
	must.Eq(t, written, out1.Len())
	var resp netrpc.Response
	var reply EchoReply
	cc := NewClientCodec(rwc{&out2, io.Discard})
	must.NoError(t, cc.ReadResponseHeader(&resp))
	must.NoError(t, cc.ReadResponseBody(&reply))
	must.Eq(t, uint64(7), resp.Seq)
	must.Eq(t, "two", reply.Msg)
	must.ErrorIs(t, c2.ReadRequestHeader(&hdr), io.EOF)
	must.NoError(t, c2.Close())
	must.Len(t, 2, *kept)

	// A write that fails keeps the state out of the pool.
	broken := NewClientCodec(rwc{bytes.NewReader(nil), failingWriter{}})
	must.Error(t, broken.WriteRequest(&netrpc.Request{ServiceMethod: "Test.Echo", Seq: 1}, &EchoArgs{Msg: "x"}))
	must.NoError(t, broken.Close())
	must.Len(t, 2, *kept)

	// So does a reply the library cannot encode (it closes the connection).
	conn3 := &closeCounter{Reader: bytes.NewReader(nil), Writer: io.Discard}
	badReply := NewServerCodec(conn3, 0)
	must.Error(t, badReply.WriteResponse(&netrpc.Response{Seq: 1}, unencodable{}))
	must.NoError(t, badReply.Close())
	must.Len(t, 2, *kept)
}

// unencodable is a reply whose encoding fails.
type unencodable struct{}

func (unencodable) CodecEncodeSelf(*codec.Encoder)  { panic(errors.New("cannot encode")) }
func (*unencodable) CodecDecodeSelf(*codec.Decoder) {}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestCodec_CloseWakesABlockedRead: closing a codec while a read waits on a
// yamux stream (whose Close only half-closes it) ends that read and
// returns, instead of waiting for the peer to close its side.
func TestCodec_CloseWakesABlockedRead(t *testing.T) {
	a, b := net.Pipe()
	client, err := yamux.Client(a, nil)
	must.NoError(t, err)
	server, err := yamux.Server(b, nil)
	must.NoError(t, err)
	t.Cleanup(func() { client.Close(); server.Close() })
	stream, err := client.Open()
	must.NoError(t, err)
	peer, err := server.Accept()
	must.NoError(t, err)
	defer peer.Close()

	reading := &readSignal{Conn: stream, entered: make(chan struct{})}
	cc := NewClientCodec(reading)
	read := make(chan error, 1)
	go func() {
		var resp netrpc.Response
		read <- cc.ReadResponseHeader(&resp)
	}()
	<-reading.entered
	closed := make(chan error, 1)
	go func() { closed <- cc.Close() }()
	select {
	case err := <-closed:
		must.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a read the peer never answers")
	}
	must.Error(t, <-read)
}

// readSignal closes entered when a read first reaches the connection.
type readSignal struct {
	net.Conn
	once    sync.Once
	entered chan struct{}
}

func (r *readSignal) Read(p []byte) (int, error) {
	r.once.Do(func() { close(r.entered) })
	return r.Conn.Read(p)
}
