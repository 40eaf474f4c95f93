package client

import (
	"crypto/tls"
	"math/rand/v2"
	"net"
	netrpc "net/rpc"
	"slices"
	"sync"
	"time"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// serverList is the servers the client may talk to: the configured ones and
// those the servers named in their replies, without duplicates, and which
// one is in use. The client talks to one server at a time and moves to the
// next one only when that one fails.
type serverList struct {
	mu         sync.Mutex
	configured []string
	learned    []string
	addrs      []string
	current    string
}

func newServerList(configured []string) *serverList {
	l := &serverList{}
	// Shuffled, so that a fleet of clients configured alike spreads over
	// the servers.
	for _, i := range rand.Perm(len(configured)) {
		l.configured = append(l.configured, configured[i])
	}
	l.merge()
	l.current = l.addrs[0]
	return l
}

func (l *serverList) merge() {
	var out []string
	for _, a := range append(slices.Clone(l.configured), l.learned...) {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	l.addrs = out
}

// get returns the server in use.
func (l *serverList) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.current
}

// all returns the servers, in the order they are tried.
func (l *serverList) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.addrs)
}

// failed moves on from addr to the next server, unless another caller
// already moved on.
func (l *serverList) failed(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.current != addr {
		return
	}
	i := slices.Index(l.addrs, addr)
	l.current = l.addrs[(i+1)%len(l.addrs)]
}

// learn replaces the servers learned from replies. A reply that names none
// (a server that does not know its peers yet) changes nothing.
func (l *serverList) learn(addrs []string) {
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

// serverConn is the pool holding the client's one session, to one server.
type serverConn struct {
	addr string
	pool *rpc.ConnPool
}

// conn returns the pool for the server in use, replacing the pool of the
// server the client left: the client holds a session with one server at a
// time, so servers agree on where the node can be reached. The old pool is
// closed in the background, since closing waits for the server calls being
// served on it.
func (c *Client) conn() *serverConn {
	addr := c.servers.get()
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.cur != nil && c.cur.addr == addr {
		return c.cur
	}
	if old := c.cur; old != nil && !c.goFunc(func() { old.pool.Close() }) {
		old.pool.Close() // shutting down
	}
	c.cur = &serverConn{addr: addr, pool: c.newPool()}
	c.logger.Info("using server", "server", addr)
	return c.cur
}

// newPool returns a pool whose sessions serve the calls servers make on
// this client.
func (c *Client) newPool() *rpc.ConnPool {
	var tlsConfig func() *tls.Config
	if c.config.TLS != nil {
		tlsConfig = c.config.TLS.OutgoingRPC
	}
	return rpc.NewPool(rpc.PoolConfig{
		TLS:         tlsConfig,
		Logger:      c.logger,
		DialTimeout: c.config.RPCTimeout,
		CallTimeout: c.config.RPCTimeout,
		// The session must stay open while the client is idle: it is how
		// the servers reach the client. Heartbeats keep it busy anyway.
		MaxIdle: keepSessionFor,
		AcceptStreams: func(stream net.Conn) {
			c.rpcServer.ServeCodec(c.calls.ServerCodec(rpc.NewServerCodec(stream, 0)))
		},
	})
}

// closeConn closes the session in use, on shutdown.
func (c *Client) closeConn() {
	c.connMu.Lock()
	cur := c.cur
	c.cur = nil
	c.connMu.Unlock()
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

// rpc makes a call to the servers: to the one in use, then, while they fail
// in a way that says nothing about the request, to each other one in turn.
func (c *Client) rpc(method string, args, reply any) error {
	var err error
	for range max(len(c.servers.all()), 1) {
		sc := c.conn()
		err = sc.pool.RPC(sc.addr, method, args, reply)
		if err == nil || !shouldFailover(err) || c.ctx.Err() != nil {
			return err
		}
		c.logger.Warn("server call failed; moving to the next server", "server", sc.addr, "method", method, "error", err)
		c.servers.failed(sc.addr)
	}
	return err
}

// newRPCServer returns the server of the calls servers make to this client.
func (c *Client) newRPCServer() (*netrpc.Server, error) {
	srv := netrpc.NewServer()
	if err := srv.RegisterName("ClientCSI", &ClientCSI{c: c}); err != nil {
		return nil, err
	}
	if err := srv.RegisterName("FileSystem", &FileSystem{c: c}); err != nil {
		return nil, err
	}
	return srv, nil
}
