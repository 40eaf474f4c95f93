// Package serverconn is the client's connection to the servers: the list
// of servers it may talk to (configured, and learned from replies), the
// one yamux session it holds with one of them at a time, over which it
// calls the servers and serves the calls they make back, and the failover
// from a server that cannot answer to the next.
package serverconn

import (
	"crypto/tls"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// List is the servers the client may talk to: the configured ones and
// those the servers named in their replies, without duplicates, and which
// one is in use. The client talks to one server at a time and moves to the
// next one only when that one fails.
type List struct {
	mu         sync.Mutex
	configured []string
	learned    []string
	addrs      []string
	current    string
}

// NewList returns the list of the configured servers, shuffled.
func NewList(configured []string) *List {
	l := &List{}
	// Shuffled, so that a fleet of clients configured alike spreads over
	// the servers.
	for _, i := range rand.Perm(len(configured)) {
		l.configured = append(l.configured, configured[i])
	}
	l.merge()
	l.current = l.addrs[0]
	return l
}

func (l *List) merge() {
	var out []string
	for _, a := range append(slices.Clone(l.configured), l.learned...) {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	l.addrs = out
}

// Get returns the server in use.
func (l *List) Get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// All returns the servers, in the order they are tried.
func (l *List) All() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.addrs)
}

// Failed moves on from addr to the next server, unless another caller
// already moved on.
func (l *List) Failed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current != addr {
		return
	}
	i := slices.Index(l.addrs, addr)
	l.current = l.addrs[(i+1)%len(l.addrs)]
}

// Learn replaces the servers learned from replies. A reply that names none
// (a server that does not know its peers yet) changes nothing.
func (l *List) Learn(addrs []string) {
	if len(addrs) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.learned = slices.Clone(addrs)
	l.merge()
	if !slices.Contains(l.addrs, l.current) {
		// Not possible while configured servers stay in the list, but keep
		// current pointing into it whatever happens.
		l.current = l.addrs[0]
	}
}

// keepSessionFor is the pool's idle limit: in effect, never.
const keepSessionFor = 365 * 24 * time.Hour

// Config is what a Conn needs.
type Config struct {
	Servers *List
	// TLS, when set, gives the configuration of every connection.
	TLS func() *tls.Config
	// Timeout bounds a dial and a call.
	Timeout time.Duration
	Logger  hclog.Logger
	// Accept serves one stream a server opened on the session.
	Accept func(stream net.Conn)
	// GoFunc runs a goroutine its owner waits for; false once it stopped.
	GoFunc func(func()) bool
	// Done ends the failover of a call (the client is shutting down).
	Done <-chan struct{}
}

// Conn is the client's session with the server in use.
type Conn struct {
	cfg Config

	mu  sync.Mutex
	cur *session
}

// session is the pool holding the client's one session, to one server.
type session struct {
	addr string
	pool *rpc.ConnPool
}

// New returns a Conn; it dials on the first call.
func New(cfg Config) *Conn { return &Conn{cfg: cfg} }

// session returns the pool for the server in use, replacing the pool of the
// server the client left: the client holds a session with one server at a
// time, so servers agree on where the node can be reached. The old pool is
// closed in the background, since closing waits for the server calls being
// served on it.
func (c *Conn) session() *session {
	addr := c.cfg.Servers.Get()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil && c.cur.addr == addr {
		return c.cur
	}
	if old := c.cur; old != nil && !c.cfg.GoFunc(func() { old.pool.Close() }) {
		old.pool.Close() // shutting down
	}
	c.cur = &session{addr: addr, pool: c.newPool()}
	c.cfg.Logger.Info("using server", "server", addr)
	return c.cur
}

// newPool returns a pool whose sessions serve the calls servers make on
// this client.
func (c *Conn) newPool() *rpc.ConnPool {
	return rpc.NewPool(rpc.PoolConfig{
		TLS:         c.cfg.TLS,
		Logger:      c.cfg.Logger,
		DialTimeout: c.cfg.Timeout,
		CallTimeout: c.cfg.Timeout,
		// The session must stay open while the client is idle: it is how
		// the servers reach the client. Heartbeats keep it busy anyway.
		MaxIdle:       keepSessionFor,
		AcceptStreams: c.cfg.Accept,
	})
}

// Close closes the session in use, on shutdown.
func (c *Conn) Close() {
	c.mu.Lock()
	cur := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cur != nil {
		cur.pool.Close()
	}
}

// shouldFailover reports whether a failed call says nothing about the
// request and everything about the server: it could not be reached, timed
// out, or has no leader to forward to. The calls the client makes
// (register, heartbeat) may be repeated on another server.
func shouldFailover(err error) bool {
	return rpc.IsConnError(err) || structs.CodeOf(err) == structs.ErrCodeNoLeader
}

// RPC makes a call to the servers: to the one in use, then, while they fail
// in a way that says nothing about the request, to each other one in turn.
func (c *Conn) RPC(method string, args, reply any) error {
	var err error
	for range max(len(c.cfg.Servers.All()), 1) {
		sc := c.session()
		err = sc.pool.RPC(sc.addr, method, args, reply)
		if err == nil || !shouldFailover(err) {
			return err
		}
		select {
		case <-c.cfg.Done:
			return err
		default:
		}
		c.cfg.Logger.Warn("server call failed; moving to the next server", "server", sc.addr, "method", method, "error", err)
		c.cfg.Servers.Failed(sc.addr)
	}
	return err
}
