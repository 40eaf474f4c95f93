package rpc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	netrpc "net/rpc"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/yamux"
	"github.com/shoenig/test/must"
	"github.com/volplane/volplane/structs"
)

func encodeMsgpack(t testing.TB, vs ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := codec.NewEncoder(&buf, structs.MsgpackHandle)
	for _, v := range vs {
		must.NoError(t, enc.Encode(v))
	}
	return buf.Bytes()
}

type allKinds struct {
	Nil      *int
	Bools    []bool
	Ints     []int64
	Uints    []uint64
	F32      float32
	F64      float64
	Strs     []string
	Bin      [][]byte
	Map      map[string]any
	Nested   [][]map[string][]int
	Time     time.Time
	Duration time.Duration
}

// The scanner must find exactly one encoded value, for every msgpack type
// the handle writes and every one it might read.
func TestFrameReader_ScansEveryType(t *testing.T) {
	v := allKinds{
		Bools: []bool{true, false},
		Ints: []int64{0, 1, -1, -32, -33, 127, 128, -128, -129, 255, 256,
			math.MaxInt16, math.MinInt16, 1 << 20, -(1 << 20), math.MaxInt64, math.MinInt64},
		Uints: []uint64{0, 200, 60000, 1 << 31, math.MaxUint64},
		F32:   1.5,
		F64:   -2.25,
		Strs: []string{"", "short", strings.Repeat("a", 31), strings.Repeat("b", 32),
			strings.Repeat("c", 300), strings.Repeat("d", 70000)},
		Bin: [][]byte{{}, {1, 2, 3}, bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{9}, 70000)},
		Map: map[string]any{"a": 1, "b": []any{"x", 2.5, nil, true}, "c": map[string]any{"d": "e"}},
		Nested: [][]map[string][]int{{{"k": {1, 2, 3}}, {}}, nil,
			{{"big": make([]int, 70000)}}},
		Time:     time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC),
		Duration: time.Minute,
	}
	bigMap := make(map[string]int, 70000)
	for i := range 70000 {
		bigMap[string(rune('a'+i%26))+strings.Repeat("x", i%7)+string(rune(i))] = i
	}
	values := []any{v, bigMap, nil, 5, "tail"}
	var frames [][]byte
	for _, x := range values {
		frames = append(frames, encodeMsgpack(t, x))
	}
	// Hand-written frames for the types the handle does not emit from Go
	// values: fixext 1/2/4/8/16 and ext 8/16/32.
	frames = append(frames,
		[]byte{0xd4, 1, 0xaa},
		append([]byte{0xd5, 1}, make([]byte, 2)...),
		append([]byte{0xd6, 1}, make([]byte, 4)...),
		append([]byte{0xd7, 1}, make([]byte, 8)...),
		append([]byte{0xd8, 1}, make([]byte, 16)...),
		append([]byte{0xc7, 3, 1}, 1, 2, 3),
		append([]byte{0xc8, 0x01, 0x00, 1}, make([]byte, 256)...),
		append([]byte{0xc9, 0, 0, 0x01, 0x00, 1}, make([]byte, 256)...),
		[]byte{0x92, 0xca, 0, 0, 0, 0, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
	)

	stream := bytes.Join(frames, nil)
	fr := newFrameReader(bytes.NewReader(stream), 0, "request")
	for i, want := range frames {
		got, err := fr.next(nil)
		must.NoError(t, err, must.Sprintf("frame %d", i))
		must.True(t, bytes.Equal(want, got), must.Sprintf("frame %d: scanned %d bytes, want %d", i, len(got), len(want)))
	}
	_, err := fr.next(nil)
	must.ErrorIs(t, err, io.EOF)

	// The scanned bytes decode to the original value.
	var back allKinds
	dec := codec.NewDecoderBytes(frames[0], structs.MsgpackHandle)
	must.NoError(t, dec.Decode(&back))
	must.Eq(t, v.Strs, back.Strs)
	must.True(t, v.Time.Equal(back.Time))
}

func TestFrameReader_TruncatedAndMalformed(t *testing.T) {
	full := encodeMsgpack(t, EchoArgs{Msg: "hello", Blob: []byte{1, 2, 3}})
	for cut := 1; cut < len(full); cut++ {
		fr := newFrameReader(bytes.NewReader(full[:cut]), 0, "request")
		_, err := fr.next(nil)
		must.ErrorIs(t, err, io.ErrUnexpectedEOF, must.Sprintf("cut at %d", cut))
	}

	fr := newFrameReader(bytes.NewReader([]byte{0x92, 0x01, 0xc1}), 0, "request")
	_, err := fr.next(nil)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
}

// A request of exactly the limit is served; one byte more is refused with
// the too-large code, and the codec stays failed.
func TestServerCodec_LimitIsExact(t *testing.T) {
	args := EchoArgs{Msg: "x", Blob: bytes.Repeat([]byte{1}, 1000)}
	hdr := netrpc.Request{ServiceMethod: "Test.Echo", Seq: 1}
	wire := encodeMsgpack(t, &hdr, &args)
	size := int64(len(wire))

	sc := NewServerCodec(rwc{bytes.NewReader(wire), io.Discard}, size)
	var gotHdr netrpc.Request
	var got EchoArgs
	must.NoError(t, sc.ReadRequestHeader(&gotHdr))
	must.NoError(t, sc.ReadRequestBody(&got))
	must.Eq(t, args, got)

	sc = NewServerCodec(rwc{bytes.NewReader(append(wire, wire...)), io.Discard}, size-1)
	must.NoError(t, sc.ReadRequestHeader(&gotHdr))
	err := sc.ReadRequestBody(&got)
	must.Eq(t, structs.ErrCodeTooLarge, structs.CodeOf(err))
	must.Eq(t, fmt.Sprintf("request exceeds %d bytes", size-1), structs.MessageOf(err))
	// Sticky: the second, well-formed request is never read.
	must.Error(t, sc.ReadRequestHeader(&gotHdr))
}

// Frames that declare huge lengths are refused before anything is
// allocated for them. Without the frame reader, the ext frame alone makes
// the msgpack decoder allocate its declared gigabyte.
func TestServerCodec_DeclaredLengthsCostNothing(t *testing.T) {
	hdr := encodeMsgpack(t, &netrpc.Request{ServiceMethod: "Test.Unknown", Seq: 1})
	bodies := map[string][]byte{
		"ext32 time": {0xc9, 0x40, 0, 0, 0, 0xff, 1, 2, 3},
		"str32":      {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},
		"bin32":      {0xc6, 0xff, 0xff, 0xff, 0xff, 1},
		"array32":    {0xdd, 0xff, 0xff, 0xff, 0xff, 1},
		"map32":      {0xdf, 0xff, 0xff, 0xff, 0xff, 1},
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			sc := NewServerCodec(rwc{bytes.NewReader(append(hdr, body...)), io.Discard}, 0)
			var req netrpc.Request
			must.NoError(t, sc.ReadRequestHeader(&req))

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var sink any
			err := sc.ReadRequestBody(&sink)
			runtime.ReadMemStats(&after)

			must.Eq(t, structs.ErrCodeTooLarge, structs.CodeOf(err))
			must.Less(t, uint64(1<<20), after.TotalAlloc-before.TotalAlloc)
		})
	}
}

// Without a limit the same frame still costs only the bytes that arrive.
func TestClientCodec_DeclaredLengthGrowsWithData(t *testing.T) {
	hdr := encodeMsgpack(t, &netrpc.Response{ServiceMethod: "Test.Echo", Seq: 1})
	body := []byte{0xc9, 0x10, 0, 0, 0, 0xff, 1, 2, 3} // 256 MiB declared, 3 bytes sent
	cc := NewClientCodec(rwc{bytes.NewReader(append(hdr, body...)), io.Discard})
	var resp netrpc.Response
	must.NoError(t, cc.ReadResponseHeader(&resp))

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var sink any
	err := cc.ReadResponseBody(&sink)
	runtime.ReadMemStats(&after)
	must.ErrorIs(t, err, io.ErrUnexpectedEOF)
	must.Less(t, uint64(1<<20), after.TotalAlloc-before.TotalAlloc)
}

func TestServerCodec_BodyOfWrongType(t *testing.T) {
	wire := encodeMsgpack(t, &netrpc.Request{ServiceMethod: "Test.Echo", Seq: 1}, "not a struct")
	sc := NewServerCodec(rwc{bytes.NewReader(wire), io.Discard}, 0)
	var req netrpc.Request
	must.NoError(t, sc.ReadRequestHeader(&req))
	var args EchoArgs
	err := sc.ReadRequestBody(&args)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.Error(t, sc.ReadRequestHeader(&req))
}

func TestIsConnError(t *testing.T) {
	transport := []error{
		io.EOF, io.ErrUnexpectedEOF, net.ErrClosed, yamux.ErrSessionShutdown,
		yamux.ErrTimeout, yamux.ErrConnectionReset,
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET},
		errors.Join(errors.New("context"), syscall.EPIPE),
	}
	for _, err := range transport {
		must.True(t, isTransport(err), must.Sprintf("%v", err))
		must.True(t, IsConnError(connErr(err)), must.Sprintf("%v", err))
		must.Eq(t, structs.ErrCodeInternal, structs.CodeOf(connErr(err)))
	}
	must.False(t, isTransport(errors.New("msgpack decode error")))
	must.False(t, IsConnError(structs.ErrNotFound("x")))
	must.False(t, IsConnError(nil))
	// Wrapping twice does not nest.
	must.Eq(t, connErr(io.EOF).Error(), connErr(connErr(io.EOF)).Error())
}

func TestCallTimeout_BlockingQueries(t *testing.T) {
	type readReq struct {
		ID string
		structs.QueryOptions
	}
	type wrapped struct{ *readReq }
	base := 10 * time.Second

	must.Eq(t, base, callTimeout(base, &EchoArgs{}))
	must.Eq(t, base, callTimeout(base, &readReq{}))
	must.Eq(t, time.Duration(0), callTimeout(0, &readReq{QueryOptions: structs.QueryOptions{MinQueryIndex: 5}}))

	q := &readReq{QueryOptions: structs.QueryOptions{MinQueryIndex: 5, MaxQueryTime: time.Minute}}
	must.Eq(t, base+time.Minute+time.Minute/structs.BlockingQueryJitterFrac, callTimeout(base, q))

	q.MaxQueryTime = 0
	d := structs.DefaultBlockingQueryTime
	must.Eq(t, base+d+d/structs.BlockingQueryJitterFrac, callTimeout(base, q))

	q.MaxQueryTime = time.Hour
	d = structs.MaxBlockingQueryTime
	must.Eq(t, base+d+d/structs.BlockingQueryJitterFrac, callTimeout(base, q))

	// Behind a nil embedded pointer: no panic, no extension.
	must.Eq(t, base, callTimeout(base, wrapped{}))
	must.Eq(t, base, callTimeout(base, nil))
	must.Eq(t, base, callTimeout(base, 42))
}

// A codec reuses its body buffer from one request to the next: nothing
// decoded from a body may point into it. A second request of the same
// shape, every byte different, is read over the first one's bytes, and the
// first request's values (strings, byte slices, an interface map, a time, a
// volume with sealed secrets) are unchanged.
func TestCodec_BodyBufferReuse(t *testing.T) {
	type body struct {
		Kinds allKinds
		Vol   *structs.CSIVolume
	}
	mk := func(fill byte) body {
		s := strings.Repeat(string(rune('a'+fill)), 40)
		b := bytes.Repeat([]byte{fill}, 40)
		return body{
			Kinds: allKinds{
				Strs: []string{s, s[:3]},
				Bin:  [][]byte{b, b[:5]},
				Map:  map[string]any{"k": s, "n": []any{s, int64(fill)}},
				Time: time.Date(2024, 5, 6, 7, 8, int(fill), 10, time.UTC),
			},
			Vol: &structs.CSIVolume{ID: "vol-" + s, PluginID: "p-" + s,
				Parameters:    map[string]string{s: s},
				SealedSecrets: &structs.Sealed{KeyID: s, Nonce: b[:12], Ciphertext: b},
				MountOptions:  &structs.CSIMountOptions{FSType: s, MountFlags: []string{s}}},
		}
	}
	first, second := mk(1), mk(2)
	wire := encodeMsgpack(t,
		&netrpc.Request{ServiceMethod: "Test.Echo", Seq: 1}, &first,
		&netrpc.Request{ServiceMethod: "Test.Echo", Seq: 2}, &second)

	sc := NewServerCodec(rwc{bytes.NewReader(wire), io.Discard}, 0)
	var hdr netrpc.Request
	var got1, got2 body
	must.NoError(t, sc.ReadRequestHeader(&hdr))
	must.NoError(t, sc.ReadRequestBody(&got1))
	must.NoError(t, sc.ReadRequestHeader(&hdr))
	must.NoError(t, sc.ReadRequestBody(&got2))

	for _, c := range []struct {
		got, want body
	}{{got1, first}, {got2, second}} {
		must.Eq(t, c.want.Kinds.Strs, c.got.Kinds.Strs)
		must.Eq(t, c.want.Kinds.Bin, c.got.Kinds.Bin)
		must.Eq(t, c.want.Kinds.Map["k"], c.got.Kinds.Map["k"])
		must.Eq(t, c.want.Kinds.Map["n"].([]any)[0], c.got.Kinds.Map["n"].([]any)[0])
		must.True(t, c.want.Kinds.Time.Equal(c.got.Kinds.Time))
		must.Eq(t, c.want.Vol.ID, c.got.Vol.ID)
		must.Eq(t, c.want.Vol.Parameters, c.got.Vol.Parameters)
		must.Eq(t, c.want.Vol.SealedSecrets, c.got.Vol.SealedSecrets)
		must.Eq(t, c.want.Vol.MountOptions, c.got.Vol.MountOptions)
	}
}

// A reply a caller reuses for a second call holds the second answer only:
// the volume types leave empty fields off the wire, so decoding onto the
// first answer would otherwise keep what the second left out.
func TestClientCodec_ReusedReplyKeepsNothingStale(t *testing.T) {
	first := &structs.CSIVolumeClaimResponse{
		PublishContext: map[string]string{"dev": "/dev/xvdf"},
		Volume:         &structs.CSIVolume{ID: "v1", ExternalID: "vol-0abc", Schedulable: true},
	}
	second := &structs.CSIVolumeClaimResponse{Volume: &structs.CSIVolume{ID: "v2"}}
	wire := encodeMsgpack(t,
		&netrpc.Response{ServiceMethod: "CSIVolume.Claim", Seq: 1}, first,
		&netrpc.Response{ServiceMethod: "CSIVolume.Claim", Seq: 2}, second)

	cc := NewClientCodec(rwc{bytes.NewReader(wire), io.Discard})
	var hdr netrpc.Response
	var reply structs.CSIVolumeClaimResponse
	for _, want := range []*structs.CSIVolumeClaimResponse{first, second} {
		must.NoError(t, cc.ReadResponseHeader(&hdr))
		must.NoError(t, cc.ReadResponseBody(&reply))
		must.Eq(t, want, &reply)
	}
}
