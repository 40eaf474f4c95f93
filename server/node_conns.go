package server

import (
	"net"
	netrpc "net/rpc"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/volplane/volplane/rpc"
)

// sessionConn is what the endpoints know about the yamux session a request
// arrived on. A client agent keeps one session to one server; when it
// registers or heartbeats over it, this server records that it can reach the
// node through that session.
type sessionConn struct {
	session     *yamux.Session
	established time.Time
}

// nodeConns maps node IDs to the sessions their agents hold with this
// server, newest last.
type nodeConns struct {
	mu    sync.RWMutex
	conns map[string][]*sessionConn
}

func newNodeConns() *nodeConns {
	return &nodeConns{conns: map[string][]*sessionConn{}}
}

// add records that nodeID is reachable over c. Re-adding a known session
// only moves it to the end.
func (n *nodeConns) add(nodeID string, c *sessionConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	list := n.conns[nodeID]
	for i, old := range list {
		if old == c {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	n.conns[nodeID] = append(list, c)
}

// removeSession forgets a session that closed, for every node on it.
func (n *nodeConns) removeSession(c *sessionConn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for id, list := range n.conns {
		out := list[:0]
		for _, old := range list {
			if old != c {
				out = append(out, old)
			}
		}
		if len(out) == 0 {
			delete(n.conns, id)
		} else {
			n.conns[id] = out
		}
	}
}

// get returns the newest open session of a node.
func (n *nodeConns) get(nodeID string) (*sessionConn, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	list := n.conns[nodeID]
	for i := len(list) - 1; i >= 0; i-- {
		if !list[i].session.IsClosed() {
			return list[i], true
		}
	}
	return nil, false
}

// sessionServers holds one net/rpc server per yamux session, whose
// endpoints know the session, so Node.Register and Node.UpdateStatus can
// record which node is on it. Plain connections and in-process calls use
// the shared server, with no session.
type sessionServers struct {
	mu   sync.Mutex
	byID map[*yamux.Session]*netrpc.Server
}

// onSession prepares the per-session server and forgets the session's node
// connections when it closes.
func (s *Server) onSession(sess *yamux.Session, _ rpc.Peer) {
	conn := &sessionConn{session: sess, established: time.Now()}
	srv := netrpc.NewServer()
	s.registerEndpointsOn(srv, conn)
	s.sessions.mu.Lock()
	s.sessions.byID[sess] = srv
	s.sessions.mu.Unlock()
	s.goFunc(func() {
		select {
		case <-sess.CloseChan():
		case <-s.shutdownCtx.Done():
		}
		s.sessions.mu.Lock()
		delete(s.sessions.byID, sess)
		s.sessions.mu.Unlock()
		s.nodeConns.removeSession(conn)
	})
}

// serveConn serves one RPC connection: a plain one, or a stream of a yamux
// session, on that session's server. Each request is first checked against
// what the peer's certificate allows (authorizeRPC).
func (s *Server) serveConn(conn net.Conn, peer rpc.Peer) {
	srv := s.rpcServer
	if st, ok := conn.(*yamux.Stream); ok {
		s.sessions.mu.Lock()
		if ss, found := s.sessions.byID[st.Session()]; found {
			srv = ss
		}
		s.sessions.mu.Unlock()
	}
	// A call for a client agent forwarded here ends when the server that
	// forwarded it stops waiting (see clientrpc.Calls); every request is
	// first checked against what the peer's certificate allows.
	srv.ServeCodec(rpc.NewGuardedServerCodec(s.calls.ServerCodec(rpc.NewServerCodec(conn, s.config.MaxRequestBytes)), s.authorizeRPC(peer)))
}
