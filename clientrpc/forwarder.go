// Package clientrpc carries calls from servers to client agents. A client
// agent holds one yamux session with one server; the Forwarder finds the
// session of the node a call is for, on this server or on another one, and
// makes the call over it with a deadline.
package clientrpc

import (
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"

	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// Servers is what the Forwarder needs of the server it runs in.
type Servers interface {
	// LocalNodeSession returns this server's newest session with the node.
	LocalNodeSession(nodeID string) (*yamux.Session, bool)
	// OtherServers returns the RPC addresses of the other servers.
	OtherServers() []string
	// ServerRPC makes a call on another server.
	ServerRPC(addr, method string, args, reply any) error
}

// Forwarder routes calls to client agents.
type Forwarder struct {
	servers Servers
	timeout time.Duration
	logger  hclog.Logger
}

// New returns a Forwarder whose calls to a client end after timeout.
func New(servers Servers, timeout time.Duration, logger hclog.Logger) *Forwarder {
	return &Forwarder{servers: servers, timeout: timeout, logger: logger}
}

// ErrNoPath is the error of a call for a node no server reaches.
func ErrNoPath(nodeID string) error {
	return structs.NewError(structs.ErrCodeNoNodeConn, "no path to node %q: no server holds a connection with its agent", nodeID)
}

// CallNode calls method on the agent of nodeID. When this server holds the
// node's session the call goes over it; otherwise, unless localOnly, the
// server that holds it is found with Status.HasNodeConn and the call (args
// marked forwarded) is sent there under the same method name, for that
// server to make over its session. A server that received a forwarded call
// passes localOnly so a call never travels further than one hop.
func (f *Forwarder) CallNode(nodeID, method string, args, reply any, localOnly bool) (err error) {
	defer metrics.ObserveClientRPC(method, time.Now(), &err)
	if sess, ok := f.servers.LocalNodeSession(nodeID); ok {
		err := rpc.CallOnSession(sess, method, args, reply, f.timeout)
		if rpc.IsConnError(err) {
			// The session broke mid-call or the agent did not answer in
			// time: the caller may try another node.
			return structs.NewError(structs.ErrCodeNoNodeConn, "calling %s on node %q: %v", method, nodeID, err)
		}
		return err
	}
	if localOnly {
		return ErrNoPath(nodeID)
	}
	addr, err := f.findServer(nodeID)
	if err != nil {
		return err
	}
	if info, ok := args.(structs.RPCInfo); ok {
		info.SetForwarded()
	}
	f.logger.Trace("forwarding client call", "method", method, "node_id", nodeID, "server", addr)
	err = f.servers.ServerRPC(addr, method, args, reply)
	if rpc.IsConnError(err) {
		return structs.NewError(structs.ErrCodeNoNodeConn, "forwarding %s for node %q to server %s: %v", method, nodeID, addr, err)
	}
	return err
}

// findServer asks every other server whether it holds the node's session and
// returns the one with the newest session.
func (f *Forwarder) findServer(nodeID string) (string, error) {
	others := f.servers.OtherServers()
	type answer struct {
		addr string
		resp structs.NodeConnQueryResponse
		err  error
	}
	answers := make([]answer, len(others))
	var wg sync.WaitGroup
	for i, addr := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].addr = addr
			req := &structs.NodeSpecificRequest{NodeID: nodeID}
			answers[i].err = f.servers.ServerRPC(addr, "Status.HasNodeConn", req, &answers[i].resp)
		}()
	}
	wg.Wait()
	sort.SliceStable(answers, func(i, j int) bool {
		return answers[i].resp.Established.After(answers[j].resp.Established)
	})
	var firstErr error
	for _, a := range answers {
		if a.err == nil && a.resp.Connected {
			return a.addr, nil
		}
		if a.err != nil && firstErr == nil {
			firstErr = a.err
		}
	}
	if firstErr != nil {
		return "", structs.NewError(structs.ErrCodeNoNodeConn, "no path to node %q: no server reported a connection (asking the servers failed: %v)", nodeID, firstErr)
	}
	return "", ErrNoPath(nodeID)
}
