package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// logsBackend serves FileSystem.Logs over a log in memory, in chunks of at
// most 4 bytes. A call that waits, at the end of the log, finds more
// (grow) the first time, and the task ended the time after.
type logsBackend struct {
	mu    sync.Mutex
	log   string
	grow  string
	ended bool
	// failAt fails the call at that offset (once), when set.
	failAt int64
	calls  []structs.FSLogsRequest
}

func (b *logsBackend) RPC(method string, args, reply any) error {
	if method != "FileSystem.Logs" {
		return structs.ErrNotFound("no %s here", method)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	req := *args.(*structs.FSLogsRequest)
	b.calls = append(b.calls, req)
	if req.AllocID != "a1" {
		return structs.ErrNotFound("allocation %q not found", req.AllocID)
	}
	if b.failAt > 0 && req.Offset == b.failAt {
		b.failAt = 0
		return structs.NewError(structs.ErrCodeNoNodeConn, "no path to node \"n1\"")
	}
	pos := req.Offset
	if req.Origin == structs.LogOriginEnd {
		pos = max(int64(len(b.log))-req.Offset, 0)
	}
	if pos >= int64(len(b.log)) && req.Wait > 0 {
		switch {
		case b.grow != "":
			b.log += b.grow
			b.grow = ""
		default:
			b.ended = true
		}
	}
	end := min(pos+4, int64(len(b.log)))
	r := reply.(*structs.FSLogsResponse)
	*r = structs.FSLogsResponse{Task: "t", File: "alloc/logs/t.stdout", Data: []byte(b.log[pos:end]), Offset: end,
		EOF: end == int64(len(b.log))}
	r.Done = r.EOF && b.ended
	return nil
}

func logsGet(t *testing.T, be Backend, query string) (*http.Response, string) {
	t.Helper()
	srv := httptest.NewServer(NewHandler(Config{Backend: be}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/v1/client/fs/logs/" + query)
	must.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	must.NoError(t, err)
	return resp, string(body)
}

func frames(t *testing.T, body string) []structs.StreamFrame {
	t.Helper()
	var out []structs.StreamFrame
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var f structs.StreamFrame
		must.NoError(t, json.Unmarshal(sc.Bytes(), &f))
		out = append(out, f)
	}
	return out
}

func TestAllocLogs_Plain(t *testing.T) {
	be := &logsBackend{log: "hello world\n"}
	resp, body := logsGet(t, be, "a1?task=t&type=stdout&plain=true")
	must.Eq(t, http.StatusOK, resp.StatusCode)
	must.Eq(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	must.Eq(t, "hello world\n", body)
	// Read to the end in chunks, without waiting.
	must.Len(t, 3, be.calls)
	must.Eq(t, int64(8), be.calls[2].Offset)
	must.Eq(t, 0, be.calls[2].Wait)

	// From the end.
	be = &logsBackend{log: "hello world\n"}
	_, body = logsGet(t, be, "a1?task=t&type=stdout&plain=true&origin=end&offset=6")
	must.Eq(t, "world\n", body)
}

func TestAllocLogs_Frames(t *testing.T) {
	be := &logsBackend{log: "hello\n"}
	resp, body := logsGet(t, be, "a1?task=t&type=stdout")
	must.Eq(t, "application/json", resp.Header.Get("Content-Type"))
	must.Eq(t, []structs.StreamFrame{
		{Offset: 4, Data: []byte("hell"), File: "alloc/logs/t.stdout"},
		{Offset: 6, Data: []byte("o\n"), File: "alloc/logs/t.stdout"},
	}, frames(t, body))
}

// With follow, the stream goes on through quiet spells (heartbeats) until
// the task ended and all it wrote was sent.
func TestAllocLogs_FollowEndsWithTheTask(t *testing.T) {
	be := &logsBackend{log: "one\n", grow: "two\n"}
	_, body := logsGet(t, be, "a1?task=t&type=stdout&follow=true")
	var data strings.Builder
	for _, f := range frames(t, body) {
		data.Write(f.Data)
	}
	must.Eq(t, "one\ntwo\n", data.String())
	// The calls after the end of what was written wait for more.
	last := be.calls[len(be.calls)-1]
	must.Eq(t, logsFollowWait, last.Wait)
	must.Eq(t, structs.LogOriginStart, last.Origin)
	must.True(t, be.ended)
}

func TestAllocLogs_Errors(t *testing.T) {
	// Before the first byte: the error's status.
	resp, body := logsGet(t, &logsBackend{}, "nope?task=t&type=stdout")
	must.Eq(t, http.StatusNotFound, resp.StatusCode)
	must.Eq(t, `allocation "nope" not found`, body)
	resp, body = logsGet(t, &logsBackend{}, "a1?offset=-1")
	must.Eq(t, http.StatusBadRequest, resp.StatusCode)
	must.StrContains(t, body, "invalid offset")
	resp, _ = logsGet(t, &logsBackend{}, "a1?follow=maybe")
	must.Eq(t, http.StatusBadRequest, resp.StatusCode)

	// Later: the stream's last frame says why it ended.
	be := &logsBackend{log: "hello world\n", failAt: 4}
	resp, body = logsGet(t, be, "a1?task=t&type=stdout&follow=true")
	must.Eq(t, http.StatusOK, resp.StatusCode)
	fs := frames(t, body)
	must.Eq(t, structs.StreamFrame{Error: `no path to node "n1"`}, fs[len(fs)-1])
	must.Eq(t, "hell", string(fs[0].Data))
}

// The UI is served under /ui/, and the agent's root sends browsers there.
func TestUI_Served(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Backend: &logsBackend{}}))
	t.Cleanup(srv.Close)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(srv.URL + "/")
	must.NoError(t, err)
	resp.Body.Close()
	must.Eq(t, http.StatusTemporaryRedirect, resp.StatusCode)
	must.Eq(t, "/ui/", resp.Header.Get("Location"))

	resp, err = http.Get(srv.URL + "/ui/")
	must.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	must.Eq(t, http.StatusOK, resp.StatusCode)
	must.StrContains(t, string(body), "<title>volplane</title>")
	must.Eq(t, uiCSP, resp.Header.Get("Content-Security-Policy"))
	must.Eq(t, "no-cache", resp.Header.Get("Cache-Control"))

	// Only the root redirects; other unknown paths are still 404s.
	resp, err = http.Get(srv.URL + "/v2/nothing")
	must.NoError(t, err)
	resp.Body.Close()
	must.Eq(t, http.StatusNotFound, resp.StatusCode)
}
