package clientrpc

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// otherServers are the servers other than the Forwarder's own: each holds
// the sessions of some nodes, answers Status.HasNodeConn, and makes a
// forwarded call over its session, or refuses it with ErrNoPath. A server
// marked down fails every request with a connection error.
type otherServers struct {
	mu       sync.Mutex
	holds    map[string]string // node -> server address
	down     map[string]bool
	connErr  error          // what a call to a down server fails with
	searches int            // Status.HasNodeConn requests
	served   map[string]int // server -> calls made over its session
	refused  map[string]int // server -> forwarded calls refused
}

func (o *otherServers) LocalNodeSession(string) (*yamux.Session, bool) { return nil, false }
func (o *otherServers) OtherServers() []string                         { return []string{"s1", "s2"} }

func (o *otherServers) ServerRPC(addr, method string, args, reply any) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.down[addr] {
		return o.connErr
	}
	switch method {
	case "Status.HasNodeConn":
		o.searches++
		req := args.(*structs.NodeSpecificRequest)
		resp := reply.(*structs.NodeConnQueryResponse)
		resp.Connected = o.holds[req.NodeID] == addr
		if resp.Connected {
			resp.Established = time.Unix(1, 0)
		}
		return nil
	case MethodNodeDetachVolume:
		req := args.(*structs.ClientCSINodeDetachVolumeRequest)
		if !req.IsForwarded() {
			panic("a call sent to another server must be marked forwarded")
		}
		if o.holds[req.NodeID] != addr {
			o.refused[addr]++
			return ErrNoPath(req.NodeID)
		}
		o.served[addr]++
		return nil
	}
	panic("unexpected method " + method)
}

// refusedConnError is the error of a call to an address nothing listens
// on, as the pool reports it.
func refusedConnError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must.NoError(t, err)
	addr := ln.Addr().String()
	must.NoError(t, ln.Close())
	pool := rpc.NewPool(rpc.PoolConfig{Logger: hclog.NewNullLogger(), CallTimeout: 5 * time.Second})
	defer pool.Close()
	err = pool.RPC(addr, "Status.Ping", &structs.GenericRequest{}, &structs.GenericResponse{})
	must.True(t, rpc.IsConnError(err), must.Sprintf("not a connection error: %v", err))
	return err
}

// TestForwarder_RemembersTheNodesServer: a run of calls for a node whose
// agent is on another server searches the servers once; when the agent
// moves, the server it left refuses the call (nothing reached an agent)
// and the call goes where a new search finds it; a server that cannot be
// reached loses its routes.
func TestForwarder_RemembersTheNodesServer(t *testing.T) {
	o := &otherServers{holds: map[string]string{"n1": "s1"}, down: map[string]bool{},
		served: map[string]int{}, refused: map[string]int{}, connErr: refusedConnError(t)}
	f := New(o, time.Minute, hclog.NewNullLogger())
	call := func() error {
		return f.CallNode(context.Background(), "n1", MethodNodeDetachVolume, nodeDetach(), &structs.ClientCSIEmptyResponse{}, false)
	}

	for range 3 {
		must.NoError(t, call())
	}
	must.Eq(t, 2, o.searches, must.Sprint("one search (one question per other server) for the run of calls"))
	must.Eq(t, 3, o.served["s1"])

	// The agent moves to s2.
	o.mu.Lock()
	o.holds["n1"] = "s2"
	o.mu.Unlock()
	must.NoError(t, call())
	must.Eq(t, 1, o.refused["s1"], must.Sprint("the server it left refuses the call"))
	must.Eq(t, 1, o.served["s2"], must.Sprint("the call is made once, where the agent is"))
	must.Eq(t, 4, o.searches)
	must.NoError(t, call())
	must.Eq(t, 2, o.served["s2"])
	must.Eq(t, 4, o.searches, must.Sprint("the new route is remembered"))

	// s2 goes down: the call fails as unreachable and its route goes; the
	// next call searches again.
	o.mu.Lock()
	o.down["s2"] = true
	o.mu.Unlock()
	err := call()
	must.Eq(t, structs.ErrCodeNoNodeConn, structs.CodeOf(err))
	err = call()
	must.Eq(t, structs.ErrCodeNoNodeConn, structs.CodeOf(err))
	must.Eq(t, 5, o.searches, must.Sprint("a down server's route is forgotten: the servers are searched again (s2 cannot answer)"))

	// No server holds the node: ErrNoPath, with nothing remembered.
	o.mu.Lock()
	o.down["s2"] = false
	delete(o.holds, "n1")
	o.mu.Unlock()
	err = call()
	must.True(t, isNoPath(err))
	must.Error(t, f.Reachable(context.Background(), "n1"))
}
