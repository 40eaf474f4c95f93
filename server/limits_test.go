package server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/testutil"
)

// Connections to the HTTP port beyond the per-client limit are closed at
// once; the ones within it are served.
func TestHTTP_ConnLimitPerClient(t *testing.T) {
	s := TestServer(t, func(c *Config) { c.HTTPMaxConnsPerClient = 3 })
	WaitForLeader(t, s)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 3 {
		conn, err := net.Dial("tcp", s.HTTPAddr())
		must.NoError(t, err)
		held = append(held, conn)
	}
	// The fourth is closed without an answer (the three above may not be
	// counted yet when it arrives: try until one is refused).
	refused := false
	for range 20 {
		conn, err := net.Dial("tcp", s.HTTPAddr())
		must.NoError(t, err)
		must.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err = conn.Read(make([]byte, 1))
		var ne net.Error
		if errors.Is(err, io.EOF) || (err != nil && !(errors.As(err, &ne) && ne.Timeout())) {
			refused = true
			conn.Close()
			break
		}
		held = append(held, conn)
	}
	must.True(t, refused, must.Sprint("no connection over the limit was refused"))
	// Closing the held ones makes room again.
	for _, c := range held {
		c.Close()
	}
	held = nil
	// The server frees their places when it sees them closed.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		conn, err := net.Dial("tcp", s.HTTPAddr())
		if err != nil {
			return false, err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			return false, err
		}
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return false, err
		}
		buf := make([]byte, 12)
		if _, err := io.ReadFull(conn, buf); err != nil {
			return false, err
		}
		return string(buf) == "HTTP/1.1 200", fmt.Errorf("answered %q", buf)
	})
}
