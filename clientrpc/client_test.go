package clientrpc

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

type fixedControllers []string

func (f fixedControllers) ControllerNodes(string) ([]string, error) { return f, nil }

func controllerDetach() *structs.ClientCSIControllerDetachVolumeRequest {
	return &structs.ClientCSIControllerDetachVolumeRequest{PluginID: "dev", VolumeID: "ext-v1", ClientCSINodeID: "ext-n9"}
}

func TestClient_ControllerCalls(t *testing.T) {
	t.Run("a controller that asks to retry is passed over for the next", func(t *testing.T) {
		busy, ok := newBlockingAgent(), newBlockingAgent()
		busy.answer = structs.NewError(structs.ErrCodeRetryable, "controller busy")
		fwd := New(fakeServers{map[string]*yamux.Session{"n1": agentSession(t, busy), "n2": agentSession(t, ok)}},
			time.Minute, hclog.NewNullLogger())
		c := NewClient(fwd, fixedControllers{"n1", "n2"}, hclog.NewNullLogger())
		must.NoError(t, c.ControllerDetachVolume(context.Background(), controllerDetach()))
		must.Eq(t, []string{"n1"}, busy.ctrlSeen, must.Sprint("each instance is told it is the one meant"))
		must.Eq(t, []string{"n2"}, ok.ctrlSeen)
	})

	t.Run("a final error ends the call with its code and cause", func(t *testing.T) {
		broken, other := newBlockingAgent(), newBlockingAgent()
		broken.answer = structs.NewError(structs.ErrCodeInternal, "DeleteVolume failed with gRPC code Internal")
		fwd := New(fakeServers{map[string]*yamux.Session{"n1": agentSession(t, broken), "n2": agentSession(t, other)}},
			time.Minute, hclog.NewNullLogger())
		c := NewClient(fwd, fixedControllers{"n1", "n2"}, hclog.NewNullLogger())
		err := c.ControllerDetachVolume(context.Background(), controllerDetach())
		must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(err))
		must.Eq(t, "controller detach volume: DeleteVolume failed with gRPC code Internal", structs.MessageOf(err))
		var cause *structs.Error
		must.True(t, errors.As(errors.Unwrap(err), &cause), must.Sprint("the agent's error is the cause"))
		must.SliceEmpty(t, other.ctrlSeen, must.Sprint("no second controller after a final error"))
	})

	t.Run("every controller unreachable or busy: retryable, naming each", func(t *testing.T) {
		busy := newBlockingAgent()
		busy.answer = structs.NewError(structs.ErrCodeRetryable, "controller busy")
		fwd := New(fakeServers{map[string]*yamux.Session{"n2": agentSession(t, busy)}}, time.Minute, hclog.NewNullLogger())
		c := NewClient(fwd, fixedControllers{"n1", "n2"}, hclog.NewNullLogger())
		err := c.ControllerDetachVolume(context.Background(), controllerDetach())
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err))
		must.StrContains(t, structs.MessageOf(err), `node n1: no path to node "n1"`)
		must.StrContains(t, structs.MessageOf(err), "node n2: controller busy")
	})

	t.Run("no controller is tried once the call's time is up", func(t *testing.T) {
		ok := newBlockingAgent()
		fwd := New(fakeServers{map[string]*yamux.Session{"n1": agentSession(t, ok)}}, time.Minute, hclog.NewNullLogger())
		c := NewClient(fwd, fixedControllers{"n1"}, hclog.NewNullLogger())
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := c.ControllerDetachVolume(ctx, controllerDetach())
		must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(err))
		must.ErrorIs(t, err, context.Canceled)
		must.SliceEmpty(t, ok.ctrlSeen)
	})

	t.Run("a forwarded call with its node chosen goes only there", func(t *testing.T) {
		ok := newBlockingAgent()
		fwd := New(fakeServers{map[string]*yamux.Session{"n2": agentSession(t, ok)}}, time.Minute, hclog.NewNullLogger())
		c := NewClient(fwd, fixedControllers{"n1", "n2"}, hclog.NewNullLogger())
		req := controllerDetach()
		req.NodeID, req.Forwarded = "n1", true
		err := c.ControllerDetachVolume(context.Background(), req)
		must.Eq(t, structs.ErrCodeNoNodeConn, structs.CodeOf(err))
		must.SliceEmpty(t, ok.ctrlSeen)
	})
}
