package rpc

import (
	"bufio"
	"io"
	"slices"

	"github.com/volplane/volplane/structs"
)

// frameReader reads whole msgpack objects off a connection, as raw bytes,
// before anything decodes them.
//
// Why not let the msgpack decoder read the connection directly: the decoder
// trusts declared lengths in a few places (an ext value decoded into an
// interface{} makes a buffer of the declared size before reading it), so a
// nine-byte frame can cost a gigabyte; MaxInitLen does not cover that path.
// Scanning the framing first means memory grows only with bytes that have
// actually arrived, the size limit is exact and checked before anything is
// allocated, and the decoder then works on a byte slice, where it never
// allocates by declared length.
//
// A frameReader is used by one goroutine at a time (net/rpc reads a
// connection's requests sequentially).
type frameReader struct {
	r *bufio.Reader

	// limit is the byte budget of one message (header and body frames
	// together); left is what remains of it. limit <= 0 means no limit.
	limit int64
	left  int64
	what  string // "request" or "response", for the too-large error
}

// maxPendingItems bounds the number of declared-but-unread elements when
// there is no byte budget to bound them (each element needs at least a byte,
// so a declared count above this cannot be real).
const maxPendingItems = 1 << 40

// payloadChunk is how much of a declared string or binary payload is
// allocated ahead of its arrival.
const payloadChunk = 64 << 10

func newFrameReader(r io.Reader, limit int64, what string) *frameReader {
	return &frameReader{r: bufio.NewReader(r), limit: limit, left: limit, what: what}
}

// reset readies a frameReader to read r, keeping its buffer: what was
// buffered from the previous reader is dropped.
func (f *frameReader) reset(r io.Reader, limit int64, what string) {
	f.r.Reset(r)
	f.limit, f.left, f.what = limit, limit, what
}

// startMessage resets the byte budget; it is called before a header frame.
func (f *frameReader) startMessage() { f.left = f.limit }

func (f *frameReader) tooLarge() error {
	return structs.NewError(structs.ErrCodeTooLarge, "%s exceeds %d bytes", f.what, f.limit)
}

// take charges n bytes to the budget before they are read.
func (f *frameReader) take(n uint64) error {
	if f.limit <= 0 {
		return nil
	}
	if n > uint64(f.left) {
		f.left = 0
		return f.tooLarge()
	}
	f.left -= int64(n)
	return nil
}

func (f *frameReader) readByte() (byte, error) {
	if err := f.take(1); err != nil {
		return 0, err
	}
	return f.r.ReadByte()
}

// readN appends the next n bytes to dst, growing it as the bytes arrive.
func (f *frameReader) readN(dst []byte, n uint64) ([]byte, error) {
	if err := f.take(n); err != nil {
		return dst, err
	}
	for n > 0 {
		k := int(min(n, payloadChunk))
		dst = slices.Grow(dst, k)
		m, err := io.ReadFull(f.r, dst[len(dst):len(dst)+k])
		dst = dst[:len(dst)+m]
		if err != nil {
			return dst, err
		}
		n -= uint64(k)
	}
	return dst, nil
}

// readLen appends a big-endian length of size bytes to dst and returns it.
func (f *frameReader) readLen(dst []byte, size int) ([]byte, uint64, error) {
	start := len(dst)
	dst, err := f.readN(dst, uint64(size))
	if err != nil {
		return dst, 0, err
	}
	var n uint64
	for _, b := range dst[start:] {
		n = n<<8 | uint64(b)
	}
	return dst, n, nil
}

// next reads one complete msgpack object and returns its bytes appended to
// dst. An EOF before the first byte is io.EOF (the peer hung up between
// messages); an EOF inside the object is io.ErrUnexpectedEOF.
func (f *frameReader) next(dst []byte) ([]byte, error) {
	dst, err := f.scan(dst)
	if err == io.EOF && len(dst) > 0 {
		err = io.ErrUnexpectedEOF
	}
	return dst, err
}

func (f *frameReader) scan(dst []byte) ([]byte, error) {
	// Only the number of objects still owed matters, not their nesting, so
	// the scan is a loop with a counter: no recursion a hostile frame could
	// deepen. Nesting depth is bounded later by the decoder's MaxDepth.
	pending := uint64(1)
	for pending > 0 {
		pending--
		b, err := f.readByte()
		if err != nil {
			return dst, err
		}
		dst = append(dst, b)

		var payload, items uint64 // bytes that follow; objects that follow
		switch {
		case b <= 0x7f || b >= 0xe0: // positive and negative fixint
		case b <= 0x8f: // fixmap
			items = 2 * uint64(b&0x0f)
		case b <= 0x9f: // fixarray
			items = uint64(b & 0x0f)
		case b <= 0xbf: // fixstr
			payload = uint64(b & 0x1f)
		default:
			var n uint64
			switch b {
			case 0xc0, 0xc2, 0xc3: // nil, false, true
			case 0xc4, 0xd9: // bin8, str8
				dst, payload, err = f.readLen(dst, 1)
			case 0xc5, 0xda: // bin16, str16
				dst, payload, err = f.readLen(dst, 2)
			case 0xc6, 0xdb: // bin32, str32
				dst, payload, err = f.readLen(dst, 4)
			case 0xc7: // ext8: length, type, data
				dst, n, err = f.readLen(dst, 1)
				payload = n + 1
			case 0xc8: // ext16
				dst, n, err = f.readLen(dst, 2)
				payload = n + 1
			case 0xc9: // ext32
				dst, n, err = f.readLen(dst, 4)
				payload = n + 1
			case 0xca, 0xce, 0xd2: // float32, uint32, int32
				payload = 4
			case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
				payload = 8
			case 0xcc, 0xd0: // uint8, int8
				payload = 1
			case 0xcd, 0xd1: // uint16, int16
				payload = 2
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 plus the type byte
				payload = 1 + 1<<(b-0xd4)
			case 0xdc: // array16
				dst, items, err = f.readLen(dst, 2)
			case 0xdd: // array32
				dst, items, err = f.readLen(dst, 4)
			case 0xde: // map16
				dst, n, err = f.readLen(dst, 2)
				items = 2 * n
			case 0xdf: // map32
				dst, n, err = f.readLen(dst, 4)
				items = 2 * n
			default: // 0xc1 is never used
				return dst, structs.NewError(structs.ErrCodeInvalid,
					"malformed msgpack frame: byte 0x%02x at offset %d", b, len(dst)-1)
			}
			if err != nil {
				return dst, err
			}
		}
		if payload > 0 {
			if dst, err = f.readN(dst, payload); err != nil {
				return dst, err
			}
		}
		pending += items
		// Every owed object needs at least one more byte: a count that cannot
		// fit is rejected now instead of after reading up to the limit.
		if f.limit > 0 && pending > uint64(f.left) {
			f.left = 0
			return dst, f.tooLarge()
		}
		if pending > maxPendingItems {
			return dst, structs.NewError(structs.ErrCodeInvalid,
				"malformed msgpack frame: %d elements declared", pending)
		}
	}
	return dst, nil
}
