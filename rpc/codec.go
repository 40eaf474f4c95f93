package rpc

import (
	"errors"
	"fmt"
	"io"
	"net"
	netrpc "net/rpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	msgpackrpc "github.com/hashicorp/net-rpc-msgpackrpc/v2"
	"github.com/hashicorp/yamux"
	"github.com/volplane/volplane/structs"
)

// maxResponseBytes bounds one response a client codec reads. Responses come
// from servers (or, for CallOnSession, from client agents); the bound only
// keeps a broken peer from growing a buffer without end.
const maxResponseBytes int64 = 1 << 30

// maxKeptHeaderBuf is the largest header buffer a codec keeps for reuse.
const maxKeptHeaderBuf = 1024

// maxKeptBodyBuf is the largest body buffer a codec keeps for reuse: every
// write request and its response fit, and one rare large body does not pin
// its memory for the connection's life.
const maxKeptBodyBuf = 64 << 10

// msgCodec is both halves of a msgpack RPC connection. Writes go through
// net-rpc-msgpackrpc's codec (so the wire form is exactly that library's);
// reads go through a frameReader and are decoded from bytes (see frameReader
// for why).
//
// What it holds for its connection (buffers, a decoder, the library's
// writer) is a codecState, taken from a pool when the codec is made and
// put back when it is closed after a clean conversation: most codecs serve
// one stream for one call (an agent call, each stream a server accepts),
// and their buffers were most of what such a call allocated.
type msgCodec struct {
	// mu is read-held by every read and write and held by Close while it
	// takes the state back, so a state goes back to the pool only when no
	// read or write of this codec can still reach it: Close closes the
	// connection first, which ends any read or write in flight.
	mu      sync.RWMutex
	s       *codecState // nil once closed
	closing atomic.Bool
}

// codecState is a codec's state for one connection, reused across
// connections (see msgCodec).
type codecState struct {
	conn   streamConn
	frames frameReader
	dec    *codec.Decoder
	w      *msgpackrpc.MsgpackCodec
	hdr    []byte // reused buffer for header frames, which decode into strings and ints only
	// body is the reused buffer for body frames. Reuse is safe because
	// nothing decoded keeps a reference into it: with MsgpackHandle
	// (RawToString, no extensions registered, no type with its own binary
	// or text unmarshalling) the decoder copies every string and []byte out
	// of its input (TestCodec_BodyBufferReuse).
	body []byte

	// err is the first read error. It is sticky: once a frame could not be
	// read or decoded, the stream may be misaligned, so every later read
	// fails and net/rpc closes the connection.
	err error
	// dirty is set by a failed write: the library's writer may hold part of
	// a message, or have closed itself, so the state is not reused.
	dirty bool
}

// streamConn is the connection a codecState reads and writes through; it
// is pointed at each connection the state serves.
type streamConn struct {
	c     io.ReadWriteCloser
	state *codecState
}

func (sc *streamConn) Read(p []byte) (int, error) { return sc.c.Read(p) }

func (sc *streamConn) Write(p []byte) (int, error) {
	n, err := sc.c.Write(p)
	if err != nil {
		sc.state.dirty = true
	}
	return n, err
}

func (sc *streamConn) Close() error {
	// The library closes its connection after a failed write.
	sc.state.dirty = true
	return sc.c.Close()
}

var codecStates = sync.Pool{New: func() any {
	s := &codecState{frames: *newFrameReader(nil, 0, ""), dec: codec.NewDecoderBytes(nil, structs.MsgpackHandle)}
	s.conn.state = s
	// Unbuffered reads: the library's decoder over conn is never used.
	s.w = msgpackrpc.NewCodecFromHandle(false, true, &s.conn, structs.MsgpackHandle)
	return s
}}

// putCodecState takes back the state of a codec closed cleanly (a variable
// for tests).
var putCodecState = func(s *codecState) { codecStates.Put(s) }

func newMsgCodec(conn io.ReadWriteCloser, limit int64, what string) *msgCodec {
	return bindCodec(codecStates.Get().(*codecState), conn, limit, what)
}

// bindCodec makes a codec for conn out of a state no other codec holds.
func bindCodec(s *codecState, conn io.ReadWriteCloser, limit int64, what string) *msgCodec {
	s.conn.c = conn
	s.frames.reset(&s.conn, limit, what)
	s.err, s.dirty = nil, false
	return &msgCodec{s: s}
}

// NewServerCodec returns the codec to serve one connection (or one yamux
// stream) with: srv.ServeCodec(NewServerCodec(conn, max)).
//
// A request, counted from the first byte of its header to the last byte of
// its body, may be at most maxRequestBytes long (DefaultMaxRequestBytes when
// maxRequestBytes <= 0). A longer one fails with a structs.ErrCodeTooLarge
// error, which net/rpc sends back as the call's error; the limit is then
// sticky, so the connection is closed right after that response instead of
// reading the rest of the oversized body as if it were the next request. Any
// other unreadable or undecodable request closes the connection the same way.
func NewServerCodec(conn io.ReadWriteCloser, maxRequestBytes int64) netrpc.ServerCodec {
	if maxRequestBytes <= 0 {
		maxRequestBytes = DefaultMaxRequestBytes
	}
	return &serverCodec{newMsgCodec(conn, maxRequestBytes, "request")}
}

// NewClientCodec returns the codec to make calls on one connection or stream.
// Use Call with it: Call translates errors.
func NewClientCodec(conn io.ReadWriteCloser) netrpc.ClientCodec {
	return &clientCodec{newMsgCodec(conn, maxResponseBytes, "response")}
}

// readFrame reads one frame and decodes it into v; a nil v skips the frame.
func (c *msgCodec) readFrame(v any, header bool) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s := c.s
	if s == nil {
		return net.ErrClosed
	}
	if s.err != nil {
		return s.err
	}
	buf := s.body[:0]
	if header {
		s.frames.startMessage()
		buf = s.hdr[:0]
	}
	buf, err := s.frames.next(buf)
	switch {
	case header && cap(buf) <= maxKeptHeaderBuf:
		// A rare huge header is not worth keeping for the connection's life.
		s.hdr = buf
	case !header && cap(buf) <= maxKeptBodyBuf:
		s.body = buf
	}
	if err == nil && v != nil {
		structs.ZeroForDecode(v)
		s.dec.ResetBytes(buf)
		err = s.dec.Decode(v)
	}
	s.err = err
	return err
}

// write writes one message (a request or a response) with the library's
// codec.
func (c *msgCodec) write(fn func(w *msgpackrpc.MsgpackCodec) error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s := c.s
	if s == nil {
		return net.ErrClosed
	}
	err := fn(s.w)
	if err != nil {
		s.dirty = true
	}
	return err
}

// Close closes the connection and, when the conversation on it ended
// cleanly, puts the codec's state back for another connection. Later calls
// on the codec fail with net.ErrClosed.
func (c *msgCodec) Close() error {
	if c.closing.Swap(true) {
		return nil
	}
	c.mu.RLock()
	s := c.s
	c.mu.RUnlock()
	// Closing the connection, and a deadline for a yamux stream (whose
	// Close only half-closes it), ends any read or write still waiting.
	err := s.conn.c.Close()
	if d, ok := s.conn.c.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Now())
	}
	c.mu.Lock()
	c.s = nil
	c.mu.Unlock()
	s.conn.c = nil
	if !s.dirty {
		s.dec.ResetBytes(nil)
		putCodecState(s)
	}
	return err
}

type serverCodec struct{ *msgCodec }

func (c *serverCodec) ReadRequestHeader(r *netrpc.Request) error {
	return c.readFrame(r, true)
}

func (c *serverCodec) ReadRequestBody(body any) error {
	err := c.readFrame(body, false)
	var typed *structs.Error
	if err != nil && !errors.As(err, &typed) && !isTransport(err) {
		// A well-framed body that does not fit the method's argument type
		// is the caller's mistake: say so with a code. The error stays
		// sticky (c.err keeps the original).
		return structs.NewError(structs.ErrCodeInvalid, "cannot decode request body: %v", err)
	}
	return err
}

func (c *serverCodec) WriteResponse(r *netrpc.Response, body any) error {
	return c.write(func(w *msgpackrpc.MsgpackCodec) error { return w.WriteResponse(r, body) })
}

type clientCodec struct{ *msgCodec }

func (c *clientCodec) WriteRequest(r *netrpc.Request, body any) error {
	return c.write(func(w *msgpackrpc.MsgpackCodec) error { return w.WriteRequest(r, body) })
}

func (c *clientCodec) ReadResponseHeader(r *netrpc.Response) error {
	return c.readFrame(r, true)
}

func (c *clientCodec) ReadResponseBody(body any) error {
	return c.readFrame(body, false)
}

// callSeq numbers requests. One sequence for the process is enough: Call
// waits for its own response before the codec is used again.
var callSeq atomic.Uint64

// Call makes one call on a client codec and waits for its response.
//
// An error the endpoint returned comes back as a *structs.Error rebuilt with
// structs.ParseError, so callers switch on structs.CodeOf. A transport
// failure (EOF, reset, closed, deadline, an unreadable response header) comes
// back wrapped so that IsConnError is true: the call may or may not have run.
// A reply that cannot be decoded, or arguments that cannot be encoded, are
// plain (internal) errors.
func Call(cc netrpc.ClientCodec, method string, args, reply any) error {
	req := netrpc.Request{ServiceMethod: method, Seq: callSeq.Add(1)}
	if err := writeRequest(cc, &req, args); err != nil {
		return err
	}
	return readResponse(cc, &req, reply)
}

func writeRequest(cc netrpc.ClientCodec, req *netrpc.Request, args any) error {
	if err := cc.WriteRequest(req, args); err != nil {
		if isTransport(err) {
			return connErr(err)
		}
		return fmt.Errorf("rpc %s: encode arguments: %w", req.ServiceMethod, err)
	}
	return nil
}

// readResponse reads the response to req and translates its error.
func readResponse(cc netrpc.ClientCodec, req *netrpc.Request, reply any) error {
	var resp netrpc.Response
	if err := cc.ReadResponseHeader(&resp); err != nil {
		// Whatever the cause, the conversation on this codec is over.
		return connErr(err)
	}
	if resp.Seq != req.Seq {
		return connErr(fmt.Errorf("response %d to request %d", resp.Seq, req.Seq))
	}
	if resp.Error != "" {
		// The body of an error response is a placeholder; the endpoint's
		// answer is the error itself, whatever happens to the body.
		_ = cc.ReadResponseBody(nil)
		return structs.ParseError(resp.Error)
	}
	if err := cc.ReadResponseBody(reply); err != nil {
		if isTransport(err) {
			return connErr(err)
		}
		return fmt.Errorf("rpc %s: decode reply: %w", req.ServiceMethod, err)
	}
	return nil
}

// connError marks a transport failure.
type connError struct{ err error }

func (e *connError) Error() string { return "rpc connection error: " + e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// unsentError marks a call that failed before any of its request was
// written: the other side ran nothing.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// NotSent reports whether err comes from a call that failed before any of
// its request was written (a cancelled context, a closed pool, a failed
// dial, handshake or stream open), so that it cannot have run.
func NotSent(err error) bool {
	var u unsentError
	return errors.As(err, &u)
}

func connErr(err error) error {
	var ce *connError
	if errors.As(err, &ce) {
		return err
	}
	return &connError{err: err}
}

// IsConnError reports whether err is a transport failure returned by Call,
// ConnPool.RPC or CallOnSession (dial failures and a closed pool included):
// the call may or may not have run on the other side. Reads can be retried on another connection; writes only
// if the caller knows nothing can have been committed.
func IsConnError(err error) bool {
	var ce *connError
	return errors.As(err, &ce)
}

// isTimeout reports whether err is a deadline expiry.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isTransport reports whether err came from the connection rather than from
// encoding or decoding. The msgpack codec wraps I/O errors it meets
// mid-value in an error that has Cause but no Unwrap, so both are followed.
func isTransport(err error) bool {
	for err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) ||
			errors.Is(err, yamux.ErrSessionShutdown) || errors.Is(err, yamux.ErrStreamClosed) ||
			errors.Is(err, yamux.ErrConnectionReset) || errors.Is(err, yamux.ErrConnectionWriteTimeout) ||
			errors.Is(err, yamux.ErrKeepAliveTimeout) || errors.Is(err, yamux.ErrRemoteGoAway) ||
			errors.Is(err, yamux.ErrStreamsExhausted) {
			return true
		}
		// *net.OpError, syscall.Errno, yamux.ErrTimeout and deadline errors
		// all implement net.Error.
		var ne net.Error
		if errors.As(err, &ne) {
			return true
		}
		c, ok := err.(interface{ Cause() error })
		if !ok {
			return false
		}
		err = c.Cause()
	}
	return false
}

// NewGuardedServerCodec wraps a server codec so that every request is
// checked before net/rpc calls its endpoint: check gets the method and the
// decoded arguments, and a non-nil error from it is sent back as the call's
// answer instead (the connection stays up). Requests for unknown methods
// are left to net/rpc, which answers them itself.
func NewGuardedServerCodec(inner netrpc.ServerCodec, check func(method string, args any) error) netrpc.ServerCodec {
	return &guardedCodec{ServerCodec: inner, check: check}
}

type guardedCodec struct {
	netrpc.ServerCodec
	check  func(string, any) error
	method string
}

func (g *guardedCodec) ReadRequestHeader(r *netrpc.Request) error {
	err := g.ServerCodec.ReadRequestHeader(r)
	g.method = r.ServiceMethod
	return err
}

// ReadRequestBody decodes the body, then checks it: net/rpc answers an
// error from here with that error and goes on reading the next request.
func (g *guardedCodec) ReadRequestBody(body any) error {
	if err := g.ServerCodec.ReadRequestBody(body); err != nil || body == nil {
		return err
	}
	return g.check(g.method, body)
}
