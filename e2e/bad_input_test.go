package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// TestE2E_BadInput throws malformed and oversized input at every door of a
// single server, the RPC port, the CLI's file parsing and the HTTP API, and
// checks that each is refused cleanly, changes nothing, and leaves the
// agent serving.
func TestE2E_BadInput(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 1})
	testBadInput(t, c)
}

// oversized is more than the 4 MiB a request body or spec file may be.
const oversized = 5 << 20

func testBadInput(t *testing.T, c Cluster) {
	s := WaitForLeader(t, c)
	registerNodes(t, c, s, 1, "dev")
	secret := newSecret(t)
	dir := t.TempDir()
	res := c.CLI(t, s, "volume register", writeVolumeSpec(t, dir, "vol-good", secret))
	must.Zero(t, res.Code, must.Sprint(res))
	ids, index := volumeList(t, s, "")
	must.Eq(t, []string{"vol-good"}, ids)

	// unchanged checks that nothing was written, and that the agent still
	// serves reads, the CLI and RPC.
	unchanged := func(t *testing.T) {
		t.Helper()
		must.True(t, c.Alive(s), must.Sprint("the agent died"))
		var leader string
		must.NoError(t, getJSON(s.HTTPAddr()+"/v1/status/leader", &leader))
		must.Eq(t, s.RPCAddr(), leader)
		gotIDs, gotIndex := volumeList(t, s, "")
		must.Eq(t, ids, gotIDs)
		must.Eq(t, index, gotIndex, must.Sprint("the volumes' index moved"))
		res := c.CLI(t, s, "volume status")
		must.Zero(t, res.Code, must.Sprint(res))
		must.Eq(t, ids, firstColumn(tableRows(res.Stdout)))
		pool := rpc.NewPool(rpc.PoolConfig{CallTimeout: requestTimeout})
		defer pool.Close()
		must.NoError(t, pool.RPC(s.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &struct{}{}))
	}

	t.Run("rpc port", func(t *testing.T) {
		for _, tc := range rpcProbes() {
			t.Run(tc.name, func(t *testing.T) {
				expectClosed(t, s.RPCAddr(), tc.payload)
				unchanged(t)
			})
		}
	})

	t.Run("volume files", func(t *testing.T) {
		spec := func(extra string) string {
			return `id = "vol-bad"
name = "bad"
type = "csi"
plugin_id = "dev"
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
` + extra
		}
		for _, tc := range []struct {
			name, file, content string
			// want are the parts the one line of error must show. Parse
			// errors name the file and line (":LINE:" is appended to the
			// path); the server's validation names the volume and field.
			line string
			want []string
		}{
			{"malformed HCL", "malformed.hcl", "id = \"vol-bad\"\nname = \ntype = \"csi\"\n", "2", nil},
			{"malformed JSON", "malformed.json", "{\"ID\": \"vol-bad\",\n  \"Name\": }\n", "2", nil},
			{"unknown HCL attribute", "unknown.hcl", spec("size = 10\n"), "9", []string{`"size"`}},
			{"unknown JSON field", "unknown.json", "{\"ID\": \"vol-bad\",\n  \"PluginID\": \"dev\",\n  \"Size\": 10}\n", "3", []string{"Size"}},
			{"invalid access mode", "mode.hcl", strings.Replace(spec(""), "single-node-writer", "sometimes", 1), "", []string{`"vol-bad"`, `access mode "sometimes"`}},
			{"oversized file", "huge.hcl", spec("# " + strings.Repeat("x", oversized) + "\n"), "", []string{filepath.Join(dir, "huge.hcl"), "larger than"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := writeFile(t, dir, tc.file, tc.content)
				res := c.CLI(t, s, "volume register", path)
				must.Eq(t, 1, res.Code, must.Sprint(res))
				must.Eq(t, "", res.Stdout, must.Sprint(res))
				line := strings.TrimSpace(res.Stderr)
				must.StrNotContains(t, line, "\n", must.Sprint("one line of error: ", res))
				want := tc.want
				if tc.line != "" {
					want = append(want, path+":"+tc.line+":")
				}
				for _, w := range want {
					must.StrContains(t, line, w, must.Sprint(res))
				}
				unchanged(t)
			})
		}
	})

	t.Run("http api", func(t *testing.T) {
		bigBody := func(n int) string {
			return `{"Volumes":[{"ID":"vol-bad","PluginID":"dev","Name":"` + strings.Repeat("x", n) + `"}]}`
		}
		const limit = 4 << 20
		for _, tc := range []struct {
			name   string
			body   io.Reader
			header []string
			status int
			want   string
		}{
			{"malformed JSON", strings.NewReader(`{"Volumes": [{"ID": "vol-bad",`), nil, http.StatusBadRequest, "invalid JSON"},
			{"unknown field", strings.NewReader(`{"Volumes":[{"ID":"vol-bad","PluginID":"dev","Size":10}]}`), nil, http.StatusBadRequest, `"Size"`},
			// The server refuses it by its Content-Length, without reading
			// it. Without waiting for a 100 Continue, the client would still
			// be writing the body when the server closes the connection, and
			// see that rather than the answer.
			{"body over 4 MiB", strings.NewReader(bigBody(oversized)), []string{"Expect", "100-continue"}, http.StatusRequestEntityTooLarge, "larger than"},
			// Without a Content-Length, the limit is met while reading. Just
			// over the limit, so that the client has sent everything by then.
			{"chunked body over 4 MiB", io.MultiReader(strings.NewReader(bigBody(limit))), nil, http.StatusRequestEntityTooLarge, "larger than"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := doHTTP(http.MethodPut, s.HTTPAddr()+"/v1/volume/csi/vol-bad", tc.body, tc.header...)
				must.NoError(t, err)
				must.Eq(t, tc.status, res.Status, must.Sprintf("%s", res.Body))
				must.StrContains(t, string(res.Body), tc.want)
				unchanged(t)
			})
		}
	})

	for name, log := range c.Logs(t) {
		noSecret(t, secret, "the log of "+name, log)
	}
	must.NoError(t, c.Stop(t, s), must.Sprint("after all of it the agent shuts down cleanly"))
}

type rpcProbe struct {
	name    string
	payload []byte
}

// rpcProbes are what a confused or hostile peer might send to the RPC
// port. The first byte selects the protocol: 0x01 msgpack RPC, 0x02 Raft,
// 0x03 yamux.
func rpcProbes() []rpcProbe {
	// A well-formed request header, {"ServiceMethod": "Status.Ping",
	// "Seq": 1}, written by hand so that the bytes are plain to see.
	header := []byte{0x82, 0xad}
	header = append(header, "ServiceMethod"...)
	header = append(header, 0xab)
	header = append(header, "Status.Ping"...)
	header = append(header, 0xa3)
	header = append(header, "Seq"...)
	header = append(header, 0x01)

	// bin32 announces a length in four big-endian bytes.
	bin32 := func(n uint32) []byte {
		return binary.BigEndian.AppendUint32([]byte{0xc6}, n)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	return []rpcProbe{
		{"HTTP on the RPC port", []byte("GET /v1/status/leader HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"unknown protocol byte", []byte{0xff, 0x00, 0x01}},
		// 0xc1 is the one byte msgpack never uses.
		{"garbage msgpack", []byte{rpc.RPCMsgpack, 0xc1, 0xc1, 0xc1, 0xc1}},
		{"header that is not a request", cat([]byte{rpc.RPCMsgpack, 0xa3}, []byte("abc"))},
		{"header announcing 4 GiB", cat([]byte{rpc.RPCMsgpack}, bin32(0xffffffff))},
		{"body of 5 MiB", cat([]byte{rpc.RPCMsgpack}, header, bin32(oversized), make([]byte, oversized))},
		{"garbage raft", []byte{rpc.RPCRaft, 0xff, 0xc1, 0xc1, 0xc1}},
		{"garbage yamux", append([]byte{rpc.RPCMultiplex}, bytes.Repeat([]byte{0xff}, 16)...)},
	}
}

// expectClosed sends payload on a new connection to addr and waits for the
// server to close the connection. The server may close it before reading
// everything, so a failed write is not an error; a connection the server
// keeps open is.
func expectClosed(t *testing.T, addr string, payload []byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, requestTimeout)
	must.NoError(t, err)
	defer conn.Close()
	must.NoError(t, conn.SetDeadline(time.Now().Add(requestTimeout)))
	if _, err := conn.Write(payload); err != nil {
		t.Logf("write cut short by the server: %v", err)
	}
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s (read %d bytes)", requestTimeout, n)
	}
	t.Logf("closed by the server after %d bytes of answer (%v)", n, err)
}
