// Package clientrpc carries calls from servers to client agents. A client
// agent holds one yamux session with one server; the Forwarder finds the
// session of the node a call is for, on this server or on another one, and
// makes the call over it within its context's deadline. Client is the
// servers' typed client for the ClientCSI calls on top of it; Calls is the
// agent's side, which ends a plugin call when the server that asked for it
// goes away. Method names are strings only on the wire.
package clientrpc

import (
	"context"
	"errors"
	"sort"
	"strings"
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

	// routes remembers, per node, the other server that last held the
	// node's session, so that a run of calls for a node (a release of
	// hundreds of its volumes) asks the other servers once, not before
	// every call. A stale route costs one refused call (the server holds
	// no session, so nothing reached the agent) and then a fresh search.
	mu     sync.Mutex
	routes map[string]string
}

// New returns a Forwarder whose calls to a client end after timeout when
// their context has no earlier deadline.
func New(servers Servers, timeout time.Duration, logger hclog.Logger) *Forwarder {
	return &Forwarder{servers: servers, timeout: timeout, logger: logger, routes: map[string]string{}}
}

// noPathPrefix starts the message of ErrNoPath.
const noPathPrefix = "no path to node "

// ErrNoPath is the error of a call for a node no server reaches.
func ErrNoPath(nodeID string) error {
	return structs.NewError(structs.ErrCodeNoNodeConn, noPathPrefix+"%q: no server holds a connection with its agent", nodeID)
}

// isNoPath reports whether err is a server's ErrNoPath: it held no
// session with the node, so the call reached no agent.
func isNoPath(err error) bool {
	return structs.CodeOf(err) == structs.ErrCodeNoNodeConn && strings.HasPrefix(structs.MessageOf(err), noPathPrefix)
}

func (f *Forwarder) route(nodeID string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	addr, ok := f.routes[nodeID]
	return addr, ok
}

func (f *Forwarder) setRoute(nodeID, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[nodeID] = addr
}

// forgetRoute drops the node's route if it is still addr.
func (f *Forwarder) forgetRoute(nodeID, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.routes[nodeID] == addr {
		delete(f.routes, nodeID)
	}
}

// timedCall is a request that carries how long its caller waits
// (structs.ClientCSITarget).
type timedCall interface {
	SetCallTimeout(time.Duration)
}

// answerMargin is the part of a call's time kept for the answer's way back:
// the agent is told to give up that much before the caller does, so that
// the caller hears why (a plugin's DeadlineExceeded) instead of timing out.
func answerMargin(left time.Duration) time.Duration {
	return min(left/10, 2*time.Second)
}

// CallNode calls method on the agent of nodeID within ctx (and the
// Forwarder's timeout). When this server holds the node's session the call
// goes over it; otherwise, unless localOnly, the server that holds it is
// found with Status.HasNodeConn and the call (args marked forwarded) is
// sent there under the same method name, for that server to make over its
// session. A server that received a forwarded call passes localOnly so a
// call never travels further than one hop. The request carries the time
// left (see structs.ClientCSITarget.Timeout), so the agent, and a server
// the call is forwarded to, give up when the caller does.
//
// Errors are typed: a session that broke, or an agent that did not answer,
// is ErrCodeNoNodeConn; a call cut short by ctx is ErrCodeRetryable with
// ctx's error as its cause; the agent's own errors keep their code.
func (f *Forwarder) CallNode(ctx context.Context, nodeID, method string, args, reply any, localOnly bool) (err error) {
	defer metrics.ObserveClientRPC(method, time.Now(), &err)
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if ctx.Err() != nil {
		return callFailed(ctx, ctx.Err(), "calling %s on node %q", method, nodeID)
	}
	deadline, _ := ctx.Deadline()
	left := time.Until(deadline)
	if t, ok := args.(timedCall); ok {
		t.SetCallTimeout(left - answerMargin(left))
	}
	if sess, ok := f.servers.LocalNodeSession(nodeID); ok {
		err := rpc.CallOnSessionContext(ctx, sess, method, args, reply)
		if rpc.IsConnError(err) {
			return callFailed(ctx, err, "calling %s on node %q", method, nodeID)
		}
		return err
	}
	if localOnly {
		return ErrNoPath(nodeID)
	}
	if info, ok := args.(structs.RPCInfo); ok {
		info.SetForwarded()
	}
	if addr, ok := f.route(nodeID); ok {
		err := f.forward(ctx, addr, nodeID, method, args, reply)
		if !isNoPath(err) {
			return err
		}
		// The agent moved: the server answered that it holds no
		// session, so the call reached no agent and is sent again
		// where the search finds the node.
		f.forgetRoute(nodeID, addr)
		if ctx.Err() != nil {
			return callFailed(ctx, ctx.Err(), "calling %s on node %q", method, nodeID)
		}
		left := time.Until(deadline)
		if t, ok := args.(timedCall); ok {
			t.SetCallTimeout(left - answerMargin(left))
		}
	}
	addr, err := f.findServer(nodeID)
	if err != nil {
		return err
	}
	f.setRoute(nodeID, addr)
	return f.forward(ctx, addr, nodeID, method, args, reply)
}

// forward sends a call marked forwarded to the server at addr, which makes
// it over its own session with the node. A server that cannot be reached
// loses its routes.
func (f *Forwarder) forward(ctx context.Context, addr, nodeID, method string, args, reply any) error {
	f.logger.Trace("forwarding client call", "method", method, "node_id", nodeID, "server", addr)
	// The server the call goes to is bounded by the timeout the request
	// carries, so this waits no longer than that (and the pool's deadline).
	err := f.servers.ServerRPC(addr, method, args, reply)
	if rpc.IsConnError(err) {
		f.forgetRoute(nodeID, addr)
		return callFailed(ctx, err, "forwarding %s for node %q to server %s", method, nodeID, addr)
	}
	return err
}

// Reachable says whether a call for nodeID has a path: nil when this
// server or another one holds a session with the node's agent, otherwise
// the ErrCodeNoNodeConn error a call would fail with. It asks the other
// servers as CallNode does (Status.HasNodeConn) but calls nothing on the
// agent: a cheap check before many calls to a node that may be gone.
func (f *Forwarder) Reachable(ctx context.Context, nodeID string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, ok := f.servers.LocalNodeSession(nodeID); ok {
		return nil
	}
	addr, err := f.findServer(nodeID)
	if err == nil {
		f.setRoute(nodeID, addr)
	}
	return err
}

// callFailed types a call's transport failure: ErrCodeRetryable when ctx
// cut it short (its error stays the cause), ErrCodeNoNodeConn otherwise
// (the caller may try another node).
func callFailed(ctx context.Context, err error, format string, args ...any) error {
	what := structs.NewError(structs.ErrCodeNoNodeConn, format, args...)
	if cause := ctx.Err(); cause != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		why := "the call was cancelled"
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(cause, context.DeadlineExceeded) {
			why = "no answer before the call's deadline"
		}
		return &structs.Error{Code: structs.ErrCodeRetryable, Message: what.Message + ": " + why, Cause: err}
	}
	return &structs.Error{Code: structs.ErrCodeNoNodeConn, Message: what.Message + ": " + err.Error(), Cause: err}
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
