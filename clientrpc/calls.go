package clientrpc

import (
	"context"
	netrpc "net/rpc"
	"sync"
	"time"
)

// Calls is the agent's side of the calls servers make on it: it gives each
// call the context its plugin call runs in. That context ends when the
// agent shuts down, when the time the request carries is up (see
// structs.ClientCSITarget.Timeout), and as soon as the server's stream
// ends: the server closes it when its caller gave up or timed out, and it
// breaks when the server dies. A plugin call that hangs then does not hold
// the volume (and the agent's lock on it) for the plugin client's own,
// much longer, deadline.
//
// net/rpc gives a method no context, so the stream's codec (ServerCodec)
// records, by the request's decoded arguments, the context of the stream
// they came on; the method finds it with Context.
type Calls struct {
	base context.Context

	mu sync.Mutex
	// byArgs maps a request's arguments (the pointer net/rpc decodes them
	// into and hands the method) to the context of its stream.
	byArgs map[any]context.Context
}

// NewCalls returns the registry of an agent whose calls end with base.
func NewCalls(base context.Context) *Calls {
	return &Calls{base: base, byArgs: map[any]context.Context{}}
}

// ServerCodec wraps the codec of one stream a server opened.
func (c *Calls) ServerCodec(inner netrpc.ServerCodec) netrpc.ServerCodec {
	ctx, cancel := context.WithCancel(c.base)
	return &callCodec{ServerCodec: inner, calls: c, ctx: ctx, cancel: cancel, pending: map[uint64]any{}}
}

// Context returns the context to serve the call whose arguments are args
// in, and its cancel, which the caller defers. A request that carries a
// timeout (a CallTimeout method, as structs.ClientCSITarget has) gets it as
// a deadline; only such requests are tracked by ServerCodec. Arguments that
// did not come through ServerCodec (a call made in-process) get the base
// context.
func (c *Calls) Context(args any) (context.Context, context.CancelFunc) {
	c.mu.Lock()
	ctx, ok := c.byArgs[args]
	c.mu.Unlock()
	if !ok {
		ctx = c.base
	}
	if t, ok := args.(timedArgs); ok && t.CallTimeout() > 0 {
		return context.WithTimeout(ctx, t.CallTimeout())
	}
	return context.WithCancel(ctx)
}

// timedArgs are the arguments of a call for an agent, which say how long
// their caller waits (structs.ClientCSITarget).
type timedArgs interface {
	CallTimeout() time.Duration
}

func (c *Calls) put(args any, ctx context.Context) {
	c.mu.Lock()
	c.byArgs[args] = ctx
	c.mu.Unlock()
}

func (c *Calls) forget(args any) {
	c.mu.Lock()
	delete(c.byArgs, args)
	c.mu.Unlock()
}

// callCodec is a stream's server codec that cancels the stream's context
// once no more requests can come (net/rpc then waits for the calls in
// flight, which see their context end, before it closes the codec).
type callCodec struct {
	netrpc.ServerCodec
	calls  *Calls
	ctx    context.Context
	cancel context.CancelFunc

	// seq is the sequence number of the request whose body comes next;
	// net/rpc reads headers and bodies from one goroutine.
	seq uint64
	mu  sync.Mutex
	// pending maps the sequence numbers of the calls in flight to their
	// arguments, to forget them once answered.
	pending map[uint64]any
}

func (cc *callCodec) ReadRequestHeader(r *netrpc.Request) error {
	err := cc.ServerCodec.ReadRequestHeader(r)
	if err != nil {
		// The server closed the stream, or the session broke: whoever
		// waits for the calls in flight is gone.
		cc.cancel()
		return err
	}
	cc.seq = r.Seq
	return nil
}

func (cc *callCodec) ReadRequestBody(body any) error {
	if err := cc.ServerCodec.ReadRequestBody(body); err != nil || body == nil {
		return err
	}
	if _, ok := body.(timedArgs); !ok {
		// Not a call for an agent (a server serves many other calls on
		// its connections): nothing will ask for its context.
		return nil
	}
	cc.mu.Lock()
	cc.pending[cc.seq] = body
	cc.mu.Unlock()
	cc.calls.put(body, cc.ctx)
	return nil
}

func (cc *callCodec) WriteResponse(r *netrpc.Response, body any) error {
	cc.mu.Lock()
	args, ok := cc.pending[r.Seq]
	delete(cc.pending, r.Seq)
	cc.mu.Unlock()
	if ok {
		cc.calls.forget(args)
	}
	return cc.ServerCodec.WriteResponse(r, body)
}

func (cc *callCodec) Close() error {
	cc.cancel()
	cc.mu.Lock()
	for seq, args := range cc.pending {
		cc.calls.forget(args)
		delete(cc.pending, seq)
	}
	cc.mu.Unlock()
	return cc.ServerCodec.Close()
}
