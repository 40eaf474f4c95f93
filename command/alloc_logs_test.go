package command

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// logAgent is a fake agent whose task log is log: it streams it in frames
// of at most 8 bytes from where the query says, as the agent does.
func logAgent(t *testing.T, log string, end string) *fakeAgent {
	f := newFakeAgent(t)
	const id = "aaaaaaaa-0000-0000-0000-000000000000"
	f.json("GET /v1/allocation/"+id, 200, placedAllocs()[0])
	f.routes["GET /v1/client/fs/logs/"+id] = func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		off, _ := strconv.ParseInt(q.Get("offset"), 10, 64)
		pos := off
		if q.Get("origin") == "end" {
			pos = max(int64(len(log))-off, 0)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		must.NoError(t, enc.Encode(structs.StreamFrame{}))
		for pos < int64(len(log)) {
			n := min(pos+8, int64(len(log)))
			must.NoError(t, enc.Encode(structs.StreamFrame{Offset: n, Data: []byte(log[pos:n]), File: "alloc/logs/t.stdout"}))
			pos = n
		}
		if end != "" {
			_, _ = w.Write([]byte(end + "\n"))
		}
	}
	return f
}

const testLog = "one\ntwo\nthree\nfour\nfive\n"

func TestAllocLogs(t *testing.T) {
	f := logAgent(t, testLog, "")
	r := run(t, "", "alloc", "logs", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, testLog, r.out)
	reqs := f.requests()
	must.Eq(t, request{Method: "GET", Path: "/v1/client/fs/logs/aaaaaaaa-0000-0000-0000-000000000000",
		Query: "type=stdout"}, reqs[len(reqs)-1])

	// The task, stderr and follow go into the query.
	r = run(t, "", "alloc", "logs", "-stderr", "-f", "aaaaaaaa-0000-0000-0000-000000000000", "t")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	reqs = f.requests()
	must.Eq(t, "follow=true&task=t&type=stderr", reqs[len(reqs)-1].Query)
}

func TestAllocLogs_Tail(t *testing.T) {
	f := logAgent(t, testLog, "")
	// -tail alone: the last ten lines, here all of them.
	r := run(t, "", "alloc", "logs", "-tail", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, testLog, r.out)

	// -n implies -tail.
	r = run(t, "", "alloc", "logs", "-n", "2", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "four\nfive\n", r.out)
	reqs := f.requests()
	must.Eq(t, "offset=512&origin=end&type=stdout", reqs[len(reqs)-1].Query)

	// -c counts bytes.
	r = run(t, "", "alloc", "logs", "-tail", "-c", "6", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "\nfive\n", r.out)

	// With -f, the rest follows from where the window ended.
	r = run(t, "", "alloc", "logs", "-n", "1", "-f", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "five\n", r.out)
	reqs = f.requests()
	must.Eq(t, "follow=true&offset=24&origin=start&type=stdout", reqs[len(reqs)-1].Query)

	r = run(t, "", "alloc", "logs", "-n", "1", "-c", "2", "aaaaaaaa")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "-n and -c cannot be given together")
}

func TestAllocLogs_Errors(t *testing.T) {
	// A stream the server ended early fails the command, after what came.
	logAgent(t, "partial\n", `{"Error":"no path to node \"n1\""}`)
	r := run(t, "", "alloc", "logs", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 1, r.code)
	must.Eq(t, "partial\n", r.out)
	must.Eq(t, "Error reading logs: no path to node \"n1\"\n", r.stderr)

	f := newFakeAgent(t)
	f.json("GET /v1/allocation/aaaaaaaa-0000-0000-0000-000000000000", 200, placedAllocs()[0])
	f.text("GET /v1/client/fs/logs/aaaaaaaa-0000-0000-0000-000000000000", 400,
		`allocation "aaaaaaaa-0000-0000-0000-000000000000" runs tasks a, b; name the task`)
	r = run(t, "", "alloc", "logs", "aaaaaaaa-0000-0000-0000-000000000000")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error reading logs: allocation \"aaaaaaaa-0000-0000-0000-000000000000\" runs tasks a, b; name the task\n", r.stderr)

	r = run(t, "", "alloc", "logs")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes one or two arguments")
}

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"partial line\nb\n", 5, "partial line\nb\n"},
		{"a\nb\n", 0, ""},
		{"", 3, ""},
	} {
		must.Eq(t, tc.want, string(lastLines([]byte(tc.in), tc.n)), must.Sprint(tc))
	}
}

// alloc status lists the tasks as the client reported them.
func TestAllocStatus_Tasks(t *testing.T) {
	a := &structs.Allocation{TaskStates: map[string]*structs.TaskState{
		"web":  {State: "running", StartedAt: fixedNow().UnixNano()},
		"init": {State: "dead", Failed: true, Description: "task init: exit code 3"},
	}}
	must.Eq(t, "Task  State    Failed  Started               Finished  Description\n"+
		"init  dead     true    <none>                <none>    task init: exit code 3\n"+
		"web   running  false   2026-11-25T10:00:00Z  <none>    <none>", taskStates(a))
}
