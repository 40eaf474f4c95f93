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

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"

	"github.com/volplane/volplane/structs"
)

// The fuzz targets of the transport: what a peer that is not one of ours
// can send before anything is authenticated. Their seed corpora run in
// every `go test`; `go test -run '^$' -fuzz FuzzX ./rpc` searches further.

// frameSeeds are well-formed and malformed msgpack frames: every type the
// scanner knows, collections whose declared counts exceed what follows, and
// the unused byte 0xc1.
func frameSeeds(t testing.TB) [][]byte {
	seeds := [][]byte{
		encodeMsgpack(t, EchoArgs{Msg: "hello", Blob: []byte{1, 2, 3}}),
		encodeMsgpack(t, netrpc.Request{ServiceMethod: "Test.Echo", Seq: 7}, EchoArgs{Msg: "x"}),
		encodeMsgpack(t, map[string]any{"a": []any{1, "b", nil, true, 2.5}}),
		encodeMsgpack(t, &structs.CSIVolumeClaimRequest{VolumeID: "v", Claim: &structs.CSIVolumeClaim{AllocationID: "a"}}),
		{0xd4, 1, 0xaa},
		{0xc7, 3, 1, 1, 2, 3},
		{0xc9, 0xff, 0xff, 0xff, 0xff, 1},
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01},
		{0xdb, 0xff, 0xff, 0xff, 0xf0, 'a'},
		{0x92, 0x01, 0xc1},
		{0x91, 0x91, 0x91, 0x91, 0x90},
		{},
	}
	return seeds
}

// FuzzFrameReader checks the scanner that frames requests before they are
// decoded: whatever arrives, it never panics, every frame it returns is
// exactly the next bytes of the input, a frame is never longer than the
// byte budget, and the memory it holds grows with the bytes that arrived,
// not with the lengths they declare.
func FuzzFrameReader(f *testing.F) {
	for _, s := range frameSeeds(f) {
		f.Add(s, uint16(0))
		f.Add(s, uint16(16))
	}
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		fr := newFrameReader(bytes.NewReader(data), int64(limit), "request")
		rest := data
		for {
			fr.startMessage()
			frame, err := fr.next(nil)
			// A declared payload is allocated a chunk ahead of its arrival;
			// the allocator may round that up, but never to the declared size.
			if cap(frame) > 2*(len(data)+payloadChunk) {
				t.Fatalf("a frame of %d bytes holds %d bytes of memory for %d bytes of input", len(frame), cap(frame), len(data))
			}
			if !bytes.HasPrefix(rest, frame) {
				t.Fatalf("frame %x is not the next bytes of the input %x", frame, rest)
			}
			if err != nil {
				checkFrameError(t, err, limit)
				return
			}
			if len(frame) == 0 {
				t.Fatal("an empty frame without an error")
			}
			if limit > 0 && len(frame) > int(limit) {
				t.Fatalf("a frame of %d bytes passed the limit of %d", len(frame), limit)
			}
			rest = rest[len(frame):]
		}
	})
}

// checkFrameError checks that a scan ended the ways it may: the input ran
// out (between or inside objects), or the frame was malformed or too large,
// each with its code.
func checkFrameError(t *testing.T, err error, limit uint16) {
	t.Helper()
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return
	}
	switch structs.CodeOf(err) {
	case structs.ErrCodeInvalid:
	case structs.ErrCodeTooLarge:
		if limit == 0 {
			t.Fatalf("too large without a limit: %v", err)
		}
	default:
		t.Fatalf("unexpected scan error: %v", err)
	}
}

// fuzzEndpoint is registered as "Fuzz" on the mux of FuzzMux: its methods
// take real request types, so request bodies are decoded into what the
// servers decode them into, and none of them blocks.
type fuzzEndpoint struct{}

func (fuzzEndpoint) Echo(args *EchoArgs, reply *EchoReply) error {
	reply.Msg, reply.N = args.Msg, len(args.Blob)
	return nil
}

func (fuzzEndpoint) Claim(args *structs.CSIVolumeClaimRequest, reply *structs.CSIVolumeClaimResponse) error {
	if args.Claim == nil {
		return structs.ErrInvalid("missing claim")
	}
	return args.Claim.ValidateRequest()
}

func (fuzzEndpoint) Register(args *structs.JobRegisterRequest, reply *structs.JobRegisterResponse) error {
	if args.Job == nil {
		return structs.ErrInvalid("missing job")
	}
	job := args.Job.Copy()
	job.Canonicalize()
	return job.Validate()
}

// chanListener is a net.Listener whose connections are handed to it.
type chanListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// muxSeeds are connections as a peer might open them: each protocol byte
// with a valid conversation, with garbage, and truncated.
func muxSeeds(t testing.TB) [][]byte {
	call := encodeMsgpack(t, netrpc.Request{ServiceMethod: "Fuzz.Echo", Seq: 1}, EchoArgs{Msg: "hi", Blob: []byte{1}})
	claim := encodeMsgpack(t, netrpc.Request{ServiceMethod: "Fuzz.Claim", Seq: 2},
		&structs.CSIVolumeClaimRequest{VolumeID: "v", Claim: &structs.CSIVolumeClaim{AllocationID: "a", NodeID: "n"}})
	job := encodeMsgpack(t, netrpc.Request{ServiceMethod: "Fuzz.Register", Seq: 3},
		&structs.JobRegisterRequest{Job: &structs.Job{ID: "j", Type: structs.JobTypeService,
			TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Tasks: []*structs.Task{{Name: "t", Driver: "exec"}}}}}})
	// A yamux session with one stream carrying the Echo call: a window
	// update opening stream 1, then a data frame with the call.
	session := yamuxFrame(1, 1, 1, nil) // type window update, SYN, stream 1
	session = append(session, yamuxFrame(0, 0, 1, call)...)
	return [][]byte{
		append([]byte{RPCMsgpack}, call...),
		append([]byte{RPCMsgpack}, append(claim, job...)...),
		append([]byte{RPCMsgpack}, call[:len(call)/2]...),
		{RPCMsgpack, 0xc1},
		append([]byte{RPCMultiplex}, session...),
		append([]byte{RPCMultiplex}, session[:7]...),
		{RPCRaft, 1, 2, 3},
		{0xff, 'G', 'E', 'T', ' ', '/'},
		{},
	}
}

// yamuxFrame builds one yamux frame: version 0, type, flags, stream ID,
// and the length (or window delta) followed by the payload.
func yamuxFrame(typ byte, flags uint16, stream uint32, payload []byte) []byte {
	n := uint32(len(payload))
	if typ == 1 {
		n = 256 << 10 // a window update's delta
	}
	hdr := []byte{0, typ, byte(flags >> 8), byte(flags),
		byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream),
		byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	return append(hdr, payload...)
}

// FuzzMux sends arbitrary bytes as one connection to a Mux serving msgpack
// RPC (with real request types), Raft and yamux sessions: the mux must
// neither panic nor leave anything running once the peer hangs up.
func FuzzMux(f *testing.F) {
	for _, s := range muxSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		srv := netrpc.NewServer()
		if err := srv.RegisterName("Fuzz", fuzzEndpoint{}); err != nil {
			t.Fatal(err)
		}
		ycfg := yamux.DefaultConfig()
		ycfg.LogOutput = io.Discard
		ycfg.EnableKeepAlive = false
		m := NewMux(MuxConfig{
			Handlers: Handlers{
				RPC: func(conn net.Conn, _ Peer) { srv.ServeCodec(NewServerCodec(conn, 64<<10)) },
				Raft: func(conn net.Conn, _ Peer) {
					_, _ = io.Copy(io.Discard, conn)
					conn.Close()
				},
				Session: func(*yamux.Session, Peer) {},
			},
			Logger:           hclog.NewNullLogger(),
			HandshakeTimeout: 20 * time.Millisecond,
			YamuxConfig:      ycfg,
		})
		ln := newChanListener()
		served := make(chan error, 1)
		go func() { served <- m.Serve(ln) }()

		client, server := net.Pipe()
		ln.conns <- server
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			_, _ = io.Copy(io.Discard, client)
		}()
		_ = client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = client.Write(data)
		client.Close()
		<-drained

		closed := make(chan struct{})
		go func() {
			m.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("the mux did not close within 10s after the peer hung up (input %x)", data)
		}
		if err := <-served; err != nil {
			t.Fatalf("Serve: %v", err)
		}
	})
}
