package client

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// logScript writes to stdout and stderr, waits for the "done" file, writes
// once more and exits.
const logScript = `echo hello; echo oops >&2; ` +
	`while [ ! -e "$VOLPLANE_ALLOC_DIR/done" ]; do sleep 0.05; done; echo bye`

// The logs of a task are read from its node through the servers, in
// chunks; a follower gets everything the task wrote and is told when the
// task ended.
func TestFileSystemLogs(t *testing.T) {
	srv, e, c := newOneClientEnv(t, nil)
	e.createVolume(srv, "vol[0]")
	registerJob(t, srv, writerJob("logs", 1, "vol", true, logScript))
	var allocID string
	for _, a := range waitAllocs(t, srv, "logs", 1, clientStatus(structs.AllocClientStatusRunning)) {
		allocID = a.ID
	}
	logs := func(args structs.FSLogsRequest) (*structs.FSLogsResponse, error) {
		args.AllocID = allocID
		var reply structs.FSLogsResponse
		err := srv.RPC("FileSystem.Logs", &args, &reply)
		return &reply, err
	}
	// Output lands in the file a moment after the task starts.
	var first *structs.FSLogsResponse
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		r, err := logs(structs.FSLogsRequest{})
		first = r
		if err != nil {
			return false, err
		}
		return string(r.Data) == "hello\n", fmt.Errorf("stdout is %q", r.Data)
	})
	must.Eq(t, "t", first.Task)
	must.Eq(t, "alloc/logs/t.stdout", first.File)
	must.Eq(t, int64(6), first.Offset)
	must.True(t, first.EOF)
	must.False(t, first.Done)

	r, err := logs(structs.FSLogsRequest{Task: "t", LogType: structs.LogTypeStderr})
	must.NoError(t, err)
	must.Eq(t, "oops\n", string(r.Data))
	r, err = logs(structs.FSLogsRequest{Origin: structs.LogOriginEnd, Offset: 3})
	must.NoError(t, err)
	must.Eq(t, "lo\n", string(r.Data))
	must.Eq(t, int64(6), r.Offset)
	r, err = logs(structs.FSLogsRequest{Limit: 2})
	must.NoError(t, err)
	must.Eq(t, "he", string(r.Data))
	must.False(t, r.EOF)

	// A follower: each call waits for output from where the last ended.
	type followed struct {
		data string
		err  error
	}
	done := make(chan followed, 1)
	go func() {
		var b strings.Builder
		off := int64(0)
		for {
			r, err := logs(structs.FSLogsRequest{Offset: off, Wait: 5 * time.Second})
			if err != nil {
				done <- followed{b.String(), err}
				return
			}
			b.Write(r.Data)
			off = r.Offset
			if r.EOF && r.Done {
				done <- followed{b.String(), nil}
				return
			}
		}
	}()
	finishTask(t, c, allocID)
	select {
	case f := <-done:
		must.NoError(t, f.err)
		must.Eq(t, "hello\nbye\n", f.data)
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end after the task did")
	}
	a := waitAlloc(t, srv, allocID, clientStatus(structs.AllocClientStatusComplete))
	// The task's end is reported with the allocation's.
	must.NotNil(t, a.TaskStates["t"])
	must.Eq(t, structs.TaskStateDead, a.TaskStates["t"].State)
	must.False(t, a.TaskStates["t"].Failed)
	must.Eq(t, "task t: exit code 0", a.TaskStates["t"].Description)
	must.Positive(t, a.TaskStates["t"].StartedAt)
	r, err = logs(structs.FSLogsRequest{Wait: 5 * time.Second})
	must.NoError(t, err)
	must.Eq(t, "hello\nbye\n", string(r.Data))
	must.True(t, r.Done)

	// What is asked wrongly, or of what is not there, is said.
	_, err = logs(structs.FSLogsRequest{Task: "nope"})
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	must.StrContains(t, err.Error(), `has no task "nope" (its tasks: t)`)
	_, err = logs(structs.FSLogsRequest{LogType: "stdin"})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	_, err = logs(structs.FSLogsRequest{Origin: "middle"})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	var reply structs.FSLogsResponse
	err = srv.RPC("FileSystem.Logs", &structs.FSLogsRequest{AllocID: "unknown"}, &reply)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	err = srv.RPC("FileSystem.Logs", &structs.FSLogsRequest{AllocID: allocID, QueryOptions: structs.QueryOptions{Namespace: "other"}}, &reply)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
}
