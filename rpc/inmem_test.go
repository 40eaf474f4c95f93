package rpc

import (
	"testing"

	"github.com/shoenig/test/must"
	"github.com/volplane/volplane/structs"
)

func TestInmemCall(t *testing.T) {
	srv, _ := newTestRPCServer(t)

	t.Run("pointer args", func(t *testing.T) {
		var reply EchoReply
		must.NoError(t, InmemCall(srv, "Test.Echo", &EchoArgs{Msg: "hi", Blob: []byte{1}}, &reply))
		must.Eq(t, EchoReply{Msg: "hi", N: 1}, reply)
	})

	t.Run("value args", func(t *testing.T) {
		var reply EchoReply
		must.NoError(t, InmemCall(srv, "Test.Echo", EchoArgs{Msg: "v"}, &reply))
		must.Eq(t, "v", reply.Msg)
		must.NoError(t, InmemCall(srv, "Test.ByValue", &EchoArgs{Msg: "p"}, &reply))
		must.Eq(t, "value:p", reply.Msg)
	})

	t.Run("args are copied", func(t *testing.T) {
		args := &EchoArgs{Msg: "orig"}
		var reply EchoReply
		must.NoError(t, InmemCall(srv, "Test.Overwrite", args, &reply))
		must.Eq(t, "orig", args.Msg)
	})

	t.Run("typed error", func(t *testing.T) {
		var reply EchoReply
		err := InmemCall(srv, "Test.NotFound", &EchoArgs{Msg: "x"}, &reply)
		must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
		must.Eq(t, `volume "x" not found`, structs.MessageOf(err))
		must.False(t, IsConnError(err))
	})

	t.Run("plain error", func(t *testing.T) {
		err := InmemCall(srv, "Test.Plain", &EchoArgs{}, &EchoReply{})
		must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(err))
		must.Eq(t, "plain failure", structs.MessageOf(err))
	})

	t.Run("unknown method", func(t *testing.T) {
		err := InmemCall(srv, "Test.Nope", &EchoArgs{}, &EchoReply{})
		must.Error(t, err)
		must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(err))
	})

	t.Run("wrong args type", func(t *testing.T) {
		err := InmemCall(srv, "Test.Echo", &EchoReply{}, &EchoReply{})
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
		err = InmemCall(srv, "Test.Echo", nil, &EchoReply{})
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
		err = InmemCall(srv, "Test.Echo", (*EchoArgs)(nil), &EchoReply{})
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	})

	t.Run("wrong reply type", func(t *testing.T) {
		must.Error(t, InmemCall(srv, "Test.Echo", &EchoArgs{}, &EchoArgs{}))
		must.Error(t, InmemCall(srv, "Test.Echo", &EchoArgs{}, EchoReply{}))
		must.Error(t, InmemCall(srv, "Test.Echo", &EchoArgs{}, nil))
	})
}
