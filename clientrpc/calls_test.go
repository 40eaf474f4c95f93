package clientrpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	netrpc "net/rpc"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// blockingAgent is a client agent's ClientCSI endpoint whose node detach
// waits for its call's context to end, as a hung plugin call does, and
// whose controller calls answer as told.
type blockingAgent struct {
	calls *Calls

	started chan time.Duration // the time left on a node detach's context, 0 without deadline
	ended   chan error         // the context's error when a node detach ended

	mu       sync.Mutex
	answer   error // what controller calls return
	ctrlSeen []string
}

func newBlockingAgent() *blockingAgent {
	return &blockingAgent{calls: NewCalls(context.Background()), started: make(chan time.Duration, 4), ended: make(chan error, 4)}
}

func (a *blockingAgent) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	ctx, cancel := a.calls.Context(args)
	defer cancel()
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	a.started <- left
	<-ctx.Done()
	a.ended <- ctx.Err()
	return structs.NewError(structs.ErrCodeRetryable, "NodeUnpublishVolume of volume %q failed: %v", args.VolumeID, ctx.Err())
}

func (a *blockingAgent) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctrlSeen = append(a.ctrlSeen, args.NodeID)
	return a.answer
}

func (a *blockingAgent) tracked() int {
	a.calls.mu.Lock()
	defer a.calls.mu.Unlock()
	return len(a.calls.byArgs)
}

// agentSession connects an agent serving ep to a server-side session, as a
// client agent's session with a server: the server opens the streams.
func agentSession(t *testing.T, ep *blockingAgent) *yamux.Session {
	t.Helper()
	srvConn, agentConn := net.Pipe()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = nil
	cfg.Logger = hclog.NewNullLogger().StandardLogger(nil)
	serverSide, err := yamux.Server(srvConn, cfg)
	must.NoError(t, err)
	agentSide, err := yamux.Client(agentConn, cfg)
	must.NoError(t, err)
	srv := netrpc.NewServer()
	must.NoError(t, srv.RegisterName("ClientCSI", ep))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			stream, err := agentSide.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				srv.ServeCodec(ep.calls.ServerCodec(rpc.NewServerCodec(stream, 0)))
			}()
		}
	}()
	t.Cleanup(func() {
		serverSide.Close()
		agentSide.Close()
		wg.Wait()
	})
	return serverSide
}

// fakeServers hands the Forwarder the sessions of the agents by node ID.
type fakeServers struct{ sessions map[string]*yamux.Session }

func (f fakeServers) LocalNodeSession(nodeID string) (*yamux.Session, bool) {
	s, ok := f.sessions[nodeID]
	return s, ok
}
func (f fakeServers) OtherServers() []string { return nil }
func (f fakeServers) ServerRPC(addr, method string, args, reply any) error {
	return errors.New("no other server")
}

func nodeDetach() *structs.ClientCSINodeDetachVolumeRequest {
	return &structs.ClientCSINodeDetachVolumeRequest{PluginID: "dev", VolumeID: "v1", AllocID: "a1",
		ClientCSITarget: structs.ClientCSITarget{NodeID: "n1"}}
}

func waitStarted(t *testing.T, ep *blockingAgent) time.Duration {
	t.Helper()
	select {
	case left := <-ep.started:
		return left
	case <-time.After(10 * time.Second):
		t.Fatal("the agent never got the call")
		return 0
	}
}

func waitEnded(t *testing.T, ep *blockingAgent, within time.Duration) error {
	t.Helper()
	select {
	case err := <-ep.ended:
		return err
	case <-time.After(within):
		t.Fatalf("the agent's call did not end within %s", within)
		return nil
	}
}

func TestCalls_AgentCallEndsWithItsCaller(t *testing.T) {
	t.Run("the deadline travels with the request, and the agent answers before the caller gives up", func(t *testing.T) {
		ep := newBlockingAgent()
		fwd := New(fakeServers{map[string]*yamux.Session{"n1": agentSession(t, ep)}}, 2*time.Minute, hclog.NewNullLogger())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := fwd.CallNode(ctx, "n1", MethodNodeDetachVolume, nodeDetach(), &structs.ClientCSIEmptyResponse{}, false)
		left := waitStarted(t, ep)
		must.Between(t, 500*time.Millisecond, left, time.Second, must.Sprint("the agent's deadline is the caller's, less a margin"))
		must.ErrorIs(t, waitEnded(t, ep, 5*time.Second), context.DeadlineExceeded)
		// The agent's own answer, with its code, arrived in time: not a
		// transport error.
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err))
		must.StrContains(t, structs.MessageOf(err), "NodeUnpublishVolume")
		must.Less(t, 5*time.Second, time.Since(start), must.Sprint("far from the two-minute client timeout"))
		must.Zero(t, ep.tracked(), must.Sprint("the answered call is forgotten"))
	})

	t.Run("a cancelled caller ends the agent's call at once", func(t *testing.T) {
		ep := newBlockingAgent()
		fwd := New(fakeServers{map[string]*yamux.Session{"n1": agentSession(t, ep)}}, 2*time.Minute, hclog.NewNullLogger())
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			errc <- fwd.CallNode(ctx, "n1", MethodNodeDetachVolume, nodeDetach(), &structs.ClientCSIEmptyResponse{}, false)
		}()
		left := waitStarted(t, ep)
		must.Greater(t, time.Minute, left, must.Sprint("without a deadline of its own, the caller waits the client timeout"))
		cancel()
		must.ErrorIs(t, waitEnded(t, ep, 5*time.Second), context.Canceled, must.Sprint("the stream's end cancels the plugin call"))
		// The caller hears of its cancellation, or the agent's answer if it
		// came first: either is retryable.
		err := <-errc
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err))
		if rpc.IsConnError(errors.Unwrap(err)) {
			must.ErrorIs(t, err, context.Canceled, must.Sprint("the cause is kept"))
		} else {
			must.StrContains(t, structs.MessageOf(err), "context canceled")
		}
		// The stream's codec forgets a call once its stream ends.
		testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
			return ep.tracked() == 0, fmt.Errorf("%d calls still tracked", ep.tracked())
		})
	})

	t.Run("a caller that dies ends the agent's call", func(t *testing.T) {
		ep := newBlockingAgent()
		sess := agentSession(t, ep)
		errc := make(chan error, 1)
		go func() {
			errc <- rpc.CallOnSessionContext(context.Background(), sess, MethodNodeDetachVolume, nodeDetach(), &structs.ClientCSIEmptyResponse{})
		}()
		waitStarted(t, ep)
		sess.Close() // the server's end of the session goes away
		must.ErrorIs(t, waitEnded(t, ep, 5*time.Second), context.Canceled)
		must.True(t, rpc.IsConnError(<-errc))
	})

	t.Run("an in-process call gets the base context, with the request's deadline", func(t *testing.T) {
		ep := newBlockingAgent()
		req := nodeDetach()
		req.Timeout = 50 * time.Millisecond
		err := rpc.InmemCall(func() *netrpc.Server {
			srv := netrpc.NewServer()
			must.NoError(t, srv.RegisterName("ClientCSI", ep))
			return srv
		}(), MethodNodeDetachVolume, req, &structs.ClientCSIEmptyResponse{})
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err))
		must.Between(t, time.Millisecond, <-ep.started, 50*time.Millisecond)
		must.ErrorIs(t, <-ep.ended, context.DeadlineExceeded)
	})
}
