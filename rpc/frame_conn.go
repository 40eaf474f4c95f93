package rpc

import (
	"encoding/binary"
	"net"
	"sync"
)

// yamux's frame header (its spec.md): version, type, flags (2 bytes), stream
// ID (4 bytes) and length (4 bytes). A data frame's length is the size of
// the body that follows it.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// maxCoalescedBody is the largest body frameConn sends in one write with its
// header; a larger one costs a copy worth more than the write it saves.
const maxCoalescedBody = 32 << 10

var coalesceBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, yamuxHeaderSize+maxCoalescedBody)
	return &b
}}

// frameConn is the connection under a yamux session. yamux's send loop
// writes a frame's header and its body in two writes: two syscalls, and
// over TLS two records, for every message of every call. frameConn holds
// the header of a data frame that has a body and sends it with that body,
// which the send loop writes next, in one write. It never reorders bytes;
// it only delays a header until its body.
type frameConn struct {
	net.Conn
	mu     sync.Mutex
	header [yamuxHeaderSize]byte
	held   bool
}

func newFrameConn(c net.Conn) *frameConn { return &frameConn{Conn: c} }

func (c *frameConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0 {
			copy(c.header[:], p)
			c.held = true
			return len(p), nil
		}
		return c.Conn.Write(p)
	}
	c.held = false
	if len(p) > maxCoalescedBody {
		if _, err := c.Conn.Write(c.header[:]); err != nil {
			return 0, err
		}
		return c.Conn.Write(p)
	}
	bp := coalesceBufs.Get().(*[]byte)
	buf := append(append((*bp)[:0], c.header[:]...), p...)
	n, err := c.Conn.Write(buf)
	*bp = buf[:0]
	coalesceBufs.Put(bp)
	return max(n-yamuxHeaderSize, 0), err
}
