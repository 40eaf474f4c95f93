package rpc

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"

	"github.com/shoenig/test/must"
)

// writesConn records each write made on it.
type writesConn struct {
	net.Conn
	writes [][]byte
}

func (w *writesConn) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func yamuxHeader(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:], 7)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// TestFrameConn_CoalescesDataHeaderWithBody: a data frame's header goes out
// with its body in one write; a frame without a body (a window update, a
// ping) and a body too large to copy go out as they came; the bytes and
// their order are what yamux wrote.
func TestFrameConn_CoalescesDataHeaderWithBody(t *testing.T) {
	under := &writesConn{}
	c := newFrameConn(under)
	var sent [][]byte
	write := func(p []byte) {
		t.Helper()
		n, err := c.Write(p)
		must.NoError(t, err)
		must.Eq(t, len(p), n)
		sent = append(sent, p)
	}

	body := bytes.Repeat([]byte("b"), 300)
	write(yamuxHeader(yamuxTypeData, uint32(len(body))))
	must.Len(t, 0, under.writes, must.Sprint("the header waits for its body"))
	write(body)
	must.Len(t, 1, under.writes)
	must.Eq(t, yamuxHeaderSize+len(body), len(under.writes[0]))

	write(yamuxHeader(1, 1<<16)) // a window update: no body follows
	must.Len(t, 2, under.writes)
	write(yamuxHeader(yamuxTypeData, 0)) // a data frame with flags only
	must.Len(t, 3, under.writes)

	large := bytes.Repeat([]byte("L"), maxCoalescedBody+1)
	write(yamuxHeader(yamuxTypeData, uint32(len(large))))
	write(large)
	must.Len(t, 5, under.writes, must.Sprint("a large body is not copied"))

	// A body of a header's size is a body, not a header.
	write(yamuxHeader(yamuxTypeData, yamuxHeaderSize))
	write(yamuxHeader(yamuxTypeData, 99))
	must.Len(t, 6, under.writes)

	must.Eq(t, bytes.Join(sent, nil), bytes.Join(under.writes, nil))
}
