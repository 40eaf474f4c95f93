package httpapi

import (
	"bufio"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// A body sent a byte at a time (a slowloris) is cut off after the body
// timeout: the server answers 400 at once and closes the connection,
// without waiting for the rest of the body.
func TestBodyTimeout_SlowBody(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Backend: newFakeBackend(), BodyTimeout: 300 * time.Millisecond}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	must.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "PUT /v1/volume/csi/slow HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{")
	must.NoError(t, err)

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	must.NoError(t, err, must.Sprint("the server answers before the body ends"))
	must.Eq(t, "HTTP/1.1 400 Bad Request\r\n", status)
	rest := make([]byte, 4096)
	var body string
	for {
		n, err := r.Read(rest)
		body += string(rest[:n])
		if err != nil {
			break
		}
	}
	must.StrContains(t, body, "request body not received within 300ms")
	must.StrContains(t, body, "Connection: close")
}
