package rpc

import (
	"crypto/tls"

	"context"
	"errors"
	"fmt"
	"net"
	netrpc "net/rpc"
	"reflect"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/volplane/volplane/structs"
)

// ErrPoolClosed is returned (wrapped as a connection error) by a closed pool.
var ErrPoolClosed = errors.New("rpc: connection pool closed")

// PoolConfig configures a ConnPool.
type PoolConfig struct {
	Logger      hclog.Logger
	DialTimeout time.Duration // default 10s

	// CallTimeout is the deadline of one call; 0 means none. A blocking
	// query (arguments embedding structs.QueryOptions with MinQueryIndex
	// set) gets its wait time added on top, see callTimeout.
	CallTimeout time.Duration

	// MaxIdle: a session with no call in flight and none for this long is
	// closed by a reaper. Default 2m.
	MaxIdle time.Duration

	// AcceptStreams, if set, makes every session the pool creates also
	// accept the streams the remote opens, each handed to this func in its
	// own goroutine and closed when it returns. Client agents serve
	// server->client RPCs this way. Serving a stream counts as use of the
	// session for MaxIdle.
	AcceptStreams func(stream net.Conn)

	YamuxConfig *yamux.Config // optional; default yamux.DefaultConfig() with its log sent to Logger

	// TLS, when set, gives the config of each dial's TLS handshake; a nil
	// config from it means plaintext. It is called per dial, so reloaded
	// certificates apply to the next session.
	TLS func() *tls.Config
}

// ConnPool keeps one yamux client session per remote address and makes
// calls on its streams, keeping up to maxIdleStreams open between calls.
type ConnPool struct {
	logger      hclog.Logger
	dialTimeout time.Duration
	callTimeout time.Duration
	maxIdle     time.Duration
	accept      func(net.Conn)
	yamuxCfg    *yamux.Config
	tls         func() *tls.Config

	mu      sync.Mutex
	closed  bool
	conns   map[string]*poolConn
	closeCh chan struct{}
	wg      sync.WaitGroup
}

// poolConn is one address's session. ready is closed once the dial is over;
// sess and err are set before that and never change after.
type poolConn struct {
	addr  string
	ready chan struct{}
	sess  *yamux.Session
	err   error

	// Guarded by ConnPool.mu.
	active   int       // calls and served streams in flight
	lastUsed time.Time // when active last dropped to zero, or the dial
	idle     []*openStream
}

// NewPool returns a pool and starts its idle reaper.
func NewPool(cfg PoolConfig) *ConnPool {
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named("rpc-pool")
	p := &ConnPool{
		logger:      logger,
		dialTimeout: cfg.DialTimeout,
		callTimeout: cfg.CallTimeout,
		maxIdle:     cfg.MaxIdle,
		accept:      cfg.AcceptStreams,
		yamuxCfg:    yamuxConfig(cfg.YamuxConfig, logger),
		tls:         cfg.TLS,
		conns:       make(map[string]*poolConn),
		closeCh:     make(chan struct{}),
	}
	if p.dialTimeout <= 0 {
		p.dialTimeout = DefaultDialTimeout
	}
	if p.maxIdle <= 0 {
		p.maxIdle = DefaultMaxIdle
	}
	p.goTracked(p.reap)
	return p
}

// goTrackedLocked runs fn in a goroutine Close waits for, unless the pool
// is closed, and reports whether it did. The caller must hold p.mu.
func (p *ConnPool) goTrackedLocked(fn func()) bool {
	if p.closed {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn()
	}()
	return true
}

func (p *ConnPool) goTracked(fn func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.goTrackedLocked(fn)
}

// RPC makes one call to addr: it reuses addr's session or dials one (writing
// RPCMultiplex, then running a yamux client), opens a stream, and makes the
// call with Call, so errors are translated the same way. When the session
// turns out to be dead, it is dropped so the next call redials. A failure
// confined to one stream (a deadline, a reset) leaves the session to the
// other calls on it; yamux's keepalive closes a session whose peer went
// silent.
func (p *ConnPool) RPC(addr string, method string, args, reply any) error {
	return p.RPCContext(context.Background(), addr, method, args, reply)
}

// RPCContext is RPC that also ends when ctx is cancelled: the call's stream
// is closed at once (the server may still have read the request), and the
// error is a connection error whose chain holds ctx's error. A failure
// before the request was written is also NotSent. A forwarding
// server uses it to give up on a leader that stopped answering once
// another leader is known.
func (p *ConnPool) RPCContext(ctx context.Context, addr string, method string, args, reply any) error {
	if err := ctx.Err(); err != nil {
		return unsentError{connErr(err)}
	}
	c, err := p.acquire(addr)
	if err != nil {
		return unsentError{err}
	}
	defer p.release(c)

	st := p.takeStream(c)
	if st == nil {
		stream, err := c.sess.Open()
		if err != nil {
			p.drop(c)
			return unsentError{connErr(err)}
		}
		st = &openStream{stream: stream, cc: NewClientCodec(stream)}
	}
	var stop func() bool
	if ctx.Done() != nil {
		stream := st.stream
		stop = context.AfterFunc(ctx, func() {
			stream.Close()
			_ = stream.SetDeadline(time.Now())
		})
	}
	reusable, err := callOnCodec(st.stream, st.cc, method, args, reply, callTimeout(p.callTimeout, args))
	if stop != nil && !stop() {
		// Cancelled: the stream was closed under the call.
		reusable = false
		if err != nil {
			err = connErr(fmt.Errorf("%w: %v", ctx.Err(), err))
		}
	}
	if reusable {
		// The stream answered in order: keep it for the next call, which
		// then costs neither a stream open and close nor new buffers.
		p.putStream(c, st)
	} else {
		st.cc.Close()
	}
	if IsConnError(err) && (c.sess.IsClosed() || !isTimeout(err) && !streamScoped(err)) {
		p.drop(c)
	}
	return err
}

// maxIdleStreams bounds the open streams a session keeps between calls.
const maxIdleStreams = 64

// openStream is a stream kept open between calls, with its codec.
type openStream struct {
	stream net.Conn
	cc     netrpc.ClientCodec
}

// takeStream returns an idle stream of c, or nil.
func (p *ConnPool) takeStream(c *poolConn) *openStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(c.idle)
	if n == 0 {
		return nil
	}
	st := c.idle[n-1]
	c.idle = c.idle[:n-1]
	return st
}

// putStream keeps a stream that just completed a call for a later one.
func (p *ConnPool) putStream(c *poolConn, st *openStream) {
	if err := st.stream.SetDeadline(time.Time{}); err != nil {
		st.cc.Close()
		return
	}
	p.mu.Lock()
	if len(c.idle) < maxIdleStreams && !p.closed && !c.sess.IsClosed() {
		c.idle = append(c.idle, st)
		st = nil
	}
	p.mu.Unlock()
	if st != nil {
		st.cc.Close()
	}
}

func streamScoped(err error) bool {
	return errors.Is(err, yamux.ErrConnectionReset) || errors.Is(err, yamux.ErrStreamClosed)
}

// CallOnSession opens a stream on an existing session and makes one call on
// it, within timeout when it is positive. A server uses it to call a client
// agent over the session the client dialed (see Handlers.Session). Errors
// are translated like Call's.
func CallOnSession(sess *yamux.Session, method string, args, reply any, timeout time.Duration) error {
	stream, err := sess.Open()
	if err != nil {
		return connErr(err)
	}
	return callOnStream(stream, method, args, reply, timeout)
}

// CallOnSessionContext is CallOnSession bounded by ctx: the call ends at
// ctx's deadline, and when ctx is cancelled the stream is closed at once,
// which the agent serving it sees (clientrpc cancels the call there too).
// A call that ends because of ctx returns a connection error whose chain
// holds ctx's error, so errors.Is(err, context.DeadlineExceeded) works.
func CallOnSessionContext(ctx context.Context, sess *yamux.Session, method string, args, reply any) error {
	if err := ctx.Err(); err != nil {
		return connErr(err)
	}
	stream, err := sess.Open()
	if err != nil {
		return connErr(err)
	}
	var timeout time.Duration
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		if timeout = time.Until(deadline); timeout <= 0 {
			stream.Close()
			return connErr(context.DeadlineExceeded)
		}
	}
	// Closing sends the agent the end of the stream; the deadline wakes
	// this side's reader, which a half-closed yamux stream would not.
	stop := context.AfterFunc(ctx, func() {
		stream.Close()
		_ = stream.SetDeadline(time.Now())
	})
	defer stop()
	err = callOnStream(stream, method, args, reply, timeout)
	if err == nil || !IsConnError(err) {
		return err
	}
	cause := ctx.Err()
	if cause == nil && hasDeadline && !time.Now().Before(deadline) {
		// The stream's deadline, set from ctx's, fired before ctx's timer.
		cause = context.DeadlineExceeded
	}
	if cause != nil {
		return connErr(fmt.Errorf("%w: %v", cause, err))
	}
	return err
}

// callOnStream makes one call on a fresh stream and closes it.
//
// The request is written by a goroutine of its own while this one reads the
// response. A server refuses an oversized request as soon as it passes the
// limit and stops reading, and a yamux writer then waits for window that
// never comes: reading concurrently lets the caller get the too-large answer
// and close the stream, which releases the writer.
func callOnStream(stream net.Conn, method string, args, reply any, timeout time.Duration) error {
	cc := NewClientCodec(stream)
	defer cc.Close()
	_, err := callOnCodec(stream, cc, method, args, reply, timeout)
	return err
}

// callOnCodec makes one call on a stream's codec. It reports whether the
// stream can carry another call: only when the request went out whole and
// the answer came back in order. Otherwise the stream is closed.
func callOnCodec(stream net.Conn, cc netrpc.ClientCodec, method string, args, reply any, timeout time.Duration) (bool, error) {
	if timeout > 0 {
		if err := stream.SetDeadline(time.Now().Add(timeout)); err != nil {
			stream.Close()
			return false, connErr(err)
		}
	}
	req := netrpc.Request{ServiceMethod: method, Seq: callSeq.Add(1)}
	wrote := make(chan error, 1)
	go func() {
		err := writeRequest(cc, &req, args)
		if err != nil {
			// Nothing will answer a request that was not sent whole:
			// unblock the reader.
			stream.Close()
		}
		wrote <- err
	}()
	err := readResponse(cc, &req, reply)
	if err != nil && (IsConnError(err) || structs.CodeOf(err) == structs.ErrCodeTooLarge) {
		// The stream (not the codec, whose Close is not safe against a
		// concurrent write) is closed to release a writer still waiting:
		// a server refuses an oversized request before reading it all.
		stream.Close()
	}
	werr := <-wrote
	switch {
	case err != nil && !IsConnError(err):
		// The server answered (too large, say) before reading all of
		// the request; the writer then failed on the closed stream.
		return werr == nil && structs.CodeOf(err) != structs.ErrCodeTooLarge, err
	case werr != nil:
		// The write's failure is the cause of the reader's.
		return false, werr
	}
	return err == nil, err
}

var queryOptionsType = reflect.TypeFor[structs.QueryOptions]()

// callTimeout is the deadline of one call: base, plus for a blocking query
// the time the server may hold it (its MaxQueryTime, default and cap as the
// server applies them, and the server's jitter), so a long poll is not cut
// off by a deadline meant for ordinary calls.
func callTimeout(base time.Duration, args any) time.Duration {
	if base <= 0 {
		return 0
	}
	v := reflect.ValueOf(args)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return base
	}
	sf, ok := v.Type().FieldByName("QueryOptions")
	if !ok || sf.Type != queryOptionsType {
		return base
	}
	// FieldByIndexErr, not FieldByName: the field may sit behind a nil
	// embedded pointer, which would panic.
	f, err := v.FieldByIndexErr(sf.Index)
	if err != nil {
		return base
	}
	q := f.Interface().(structs.QueryOptions)
	if q.MinQueryIndex == 0 {
		return base
	}
	wait := q.MaxQueryTime
	if wait <= 0 {
		wait = structs.DefaultBlockingQueryTime
	}
	wait = min(wait, structs.MaxBlockingQueryTime)
	return base + wait + wait/structs.BlockingQueryJitterFrac
}

// acquire returns addr's live session, dialing it if needed, and counts the
// caller as active on it. Concurrent callers for one address share a dial.
func (p *ConnPool) acquire(addr string) (*poolConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, connErr(ErrPoolClosed)
		}
		c := p.conns[addr]
		if c == nil {
			c = &poolConn{addr: addr, ready: make(chan struct{})}
			p.conns[addr] = c
			p.mu.Unlock()
			return p.dial(c)
		}
		select {
		case <-c.ready:
			if c.err == nil && !c.sess.IsClosed() {
				c.active++
				p.mu.Unlock()
				return c, nil
			}
			// Died since it was dialed (the server went away): forget it
			// and dial again.
			if p.conns[addr] == c {
				delete(p.conns, addr)
			}
			p.mu.Unlock()
			if c.sess != nil {
				c.sess.Close()
			}
		default:
			p.mu.Unlock()
			<-c.ready
			if c.err != nil {
				// Share the failure of the dial we waited for rather than
				// piling more dials onto an address that just refused one.
				return nil, c.err
			}
		}
	}
}

// dial connects c.addr and publishes the result; the caller that dials is
// counted active on success.
func (p *ConnPool) dial(c *poolConn) (*poolConn, error) {
	sess, err := p.dialSession(c.addr)
	p.mu.Lock()
	if err == nil && p.closed {
		sess.Close()
		err = connErr(ErrPoolClosed)
	}
	if err != nil {
		c.err = err
		if p.conns[c.addr] == c {
			delete(p.conns, c.addr)
		}
		close(c.ready)
		p.mu.Unlock()
		return nil, err
	}
	c.sess = sess
	c.active = 1
	c.lastUsed = time.Now()
	if p.accept != nil && !p.goTrackedLocked(func() { p.acceptStreams(c) }) {
		// Unreachable: p.closed was checked under this lock.
		sess.Close()
	}
	close(c.ready)
	p.mu.Unlock()
	return c, nil
}

func (p *ConnPool) dialSession(addr string) (*yamux.Session, error) {
	conn, err := dialProtocol(addr, RPCMultiplex, p.dialTimeout, tlsConfigOf(p.tls))
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			// Kept as a dial error: callers know nothing was sent.
			return nil, connErr(err)
		}
		return nil, connErr(fmt.Errorf("handshake with %s: %w", addr, err))
	}
	sess, err := yamux.Client(newFrameConn(conn), p.yamuxCfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("yamux client for %s: %w", addr, err)
	}
	return sess, nil
}

// acceptStreams serves the streams the remote opens on c's session until
// the session closes.
func (p *ConnPool) acceptStreams(c *poolConn) {
	for {
		stream, err := c.sess.Accept()
		if err != nil {
			if !c.sess.IsClosed() {
				p.logger.Debug("accepting streams failed", "addr", c.addr, "error", err)
			}
			return
		}
		p.mu.Lock()
		c.active++
		ok := p.goTrackedLocked(func() {
			defer p.release(c)
			defer stream.Close()
			p.accept(stream)
		})
		if !ok {
			c.active--
		}
		p.mu.Unlock()
		if !ok {
			stream.Close()
			return
		}
	}
}

func (p *ConnPool) release(c *poolConn) {
	p.mu.Lock()
	c.active--
	c.lastUsed = time.Now()
	p.mu.Unlock()
}

// drop forgets c's session, if it is still the current one for its address,
// and closes it.
func (p *ConnPool) drop(c *poolConn) {
	p.mu.Lock()
	if p.conns[c.addr] == c {
		delete(p.conns, c.addr)
	}
	p.mu.Unlock()
	p.logger.Debug("dropping session", "addr", c.addr)
	c.sess.Close()
}

// reap closes sessions idle for longer than maxIdle, until Close.
func (p *ConnPool) reap() {
	interval := max(p.maxIdle/2, 10*time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.closeCh:
			return
		case <-t.C:
		}
		var idle []*yamux.Session
		now := time.Now()
		p.mu.Lock()
		for addr, c := range p.conns {
			select {
			case <-c.ready:
			default:
				continue // still dialing
			}
			if c.active == 0 && now.Sub(c.lastUsed) > p.maxIdle {
				delete(p.conns, addr)
				idle = append(idle, c.sess)
			}
		}
		p.mu.Unlock()
		for _, s := range idle {
			s.Close()
		}
	}
}

// ActiveCalls is the number of calls (and served streams) in flight on the
// pool's sessions.
func (p *ConnPool) ActiveCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		n += c.active
	}
	return n
}

// Close closes every session (failing the calls in flight on them) and
// waits for the pool's goroutines: the reaper, the stream acceptors and the
// AcceptStreams handlers, which must return once their stream is closed.
func (p *ConnPool) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.closeCh)
	}
	var sessions []*yamux.Session
	for addr, c := range p.conns {
		select {
		case <-c.ready:
			if c.sess != nil {
				sessions = append(sessions, c.sess)
			}
		default:
			// A dial in progress closes its own session when it sees
			// p.closed.
		}
		delete(p.conns, addr)
	}
	p.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	p.wg.Wait()
	return nil
}
