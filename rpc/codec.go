package rpc

import (
	"errors"
	"fmt"
	"io"
	"net"
	netrpc "net/rpc"
	"sync/atomic"

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
type msgCodec struct {
	frames *frameReader
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
}

func newMsgCodec(conn io.ReadWriteCloser, limit int64, what string) *msgCodec {
	return &msgCodec{
		frames: newFrameReader(conn, limit, what),
		dec:    codec.NewDecoderBytes(nil, structs.MsgpackHandle),
		// Unbuffered reads: the library's decoder over conn is never used.
		w: msgpackrpc.NewCodecFromHandle(false, true, conn, structs.MsgpackHandle),
	}
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
	if c.err != nil {
		return c.err
	}
	buf := c.body[:0]
	if header {
		c.frames.startMessage()
		buf = c.hdr[:0]
	}
	buf, err := c.frames.next(buf)
	switch {
	case header && cap(buf) <= maxKeptHeaderBuf:
		// A rare huge header is not worth keeping for the connection's life.
		c.hdr = buf
	case !header && cap(buf) <= maxKeptBodyBuf:
		c.body = buf
	}
	if err == nil && v != nil {
		c.dec.ResetBytes(buf)
		err = c.dec.Decode(v)
	}
	c.err = err
	return err
}

func (c *msgCodec) Close() error { return c.w.Close() }

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
	return c.w.WriteResponse(r, body)
}

type clientCodec struct{ *msgCodec }

func (c *clientCodec) WriteRequest(r *netrpc.Request, body any) error {
	return c.w.WriteRequest(r, body)
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
