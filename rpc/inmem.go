package rpc

import (
	"fmt"
	netrpc "net/rpc"
	"reflect"

	"github.com/volplane/volplane/structs"
)

// InmemCall makes a call through srv's endpoints in this process, without
// serializing anything: args are copied into the value net/rpc allocates for
// the method, and the reply is copied back into reply. Errors are translated
// exactly as Call translates them, so an endpoint's *structs.Error arrives
// with its code.
//
// The copies are shallow: slices, maps and pointers inside args and the
// reply are shared between caller and endpoint, as they would not be over
// the wire. Endpoints must not keep or change what args point to, and
// callers must not change what the reply points to (it may be state store
// data).
func InmemCall(srv *netrpc.Server, method string, args, reply any) error {
	c := &inmemCodec{method: method, args: args, reply: reply}
	// ServeRequest serves one request synchronously: the endpoint has run
	// and WriteResponse has been called by the time it returns.
	_ = srv.ServeRequest(c)
	if !c.answered {
		return fmt.Errorf("rpc %s: no response from in-memory call", method)
	}
	if c.errText != "" {
		return structs.ParseError(c.errText)
	}
	return c.replyErr
}

// inmemCodec is a netrpc.ServerCodec for exactly one in-process request.
type inmemCodec struct {
	method string
	args   any
	reply  any

	answered bool
	errText  string
	replyErr error
}

func (c *inmemCodec) ReadRequestHeader(r *netrpc.Request) error {
	r.ServiceMethod = c.method
	r.Seq = 0
	return nil
}

// ReadRequestBody copies the caller's args into body, which net/rpc always
// allocates as a pointer to the method's argument type. A nil body is
// net/rpc discarding the body of a request it cannot serve.
func (c *inmemCodec) ReadRequestBody(body any) error {
	if body == nil {
		return nil
	}
	dst := reflect.ValueOf(body).Elem()
	src, err := valueOf(c.args, dst.Type())
	if err != nil {
		return structs.NewError(structs.ErrCodeInvalid, "%s: arguments: %v", c.method, err)
	}
	dst.Set(src)
	return nil
}

func (c *inmemCodec) WriteResponse(r *netrpc.Response, body any) error {
	c.answered = true
	if r.Error != "" {
		c.errText = r.Error
		return nil
	}
	// body is the pointer net/rpc allocated for the reply.
	src := reflect.ValueOf(body).Elem()
	rv := reflect.ValueOf(c.reply)
	if !rv.IsValid() || rv.Kind() != reflect.Pointer || rv.IsNil() {
		c.replyErr = fmt.Errorf("rpc %s: reply must be a non-nil pointer, got %T", c.method, c.reply)
		return nil
	}
	if rv.Elem().Type() != src.Type() {
		c.replyErr = fmt.Errorf("rpc %s: reply is %T, the method returns %s", c.method, c.reply, src.Type())
		return nil
	}
	rv.Elem().Set(src)
	return nil
}

func (c *inmemCodec) Close() error { return nil }

// valueOf returns args as a value of type want: args may be a want or a
// pointer to one.
func valueOf(args any, want reflect.Type) (reflect.Value, error) {
	v := reflect.ValueOf(args)
	if !v.IsValid() {
		return reflect.Value{}, fmt.Errorf("nil, want %s", want)
	}
	if v.Type() == want {
		return v, nil
	}
	if v.Kind() == reflect.Pointer && v.Type().Elem() == want {
		if v.IsNil() {
			return reflect.Value{}, fmt.Errorf("nil %s", v.Type())
		}
		return v.Elem(), nil
	}
	return reflect.Value{}, fmt.Errorf("got %T, want %s", args, want)
}
