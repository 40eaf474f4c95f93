package client

import (
	"errors"
	"io"
	"os"
	"time"

	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// FileSystem is the endpoint servers call on this client for the files of
// its allocations (Nomad's name for it): the logs of their tasks, which
// the task shims append to under the allocation's directory.
type FileSystem struct {
	c *Client
}

// logPollInterval is how often a Logs call that waits for output looks at
// the log again. Task output arrives through files the shim writes, which
// tell no one; a tenth of a second is quick for a person reading and costs
// a stat per waiting caller.
const logPollInterval = 100 * time.Millisecond

// Logs returns a chunk of a task's stdout or stderr (see
// structs.FSLogsRequest). With a Wait, a call that finds nothing new waits
// for output, for the task to end, or for the wait (or the server's
// deadline) to pass, whichever comes first.
func (e *FileSystem) Logs(args *structs.FSLogsRequest, reply *structs.FSLogsResponse) error {
	ctx, cancel := e.c.calls.Context(args)
	defer cancel()
	if args.AllocID == "" {
		return structs.ErrInvalid("logs: missing allocation ID")
	}
	logType := args.LogType
	switch logType {
	case "":
		logType = structs.LogTypeStdout
	case structs.LogTypeStdout, structs.LogTypeStderr:
	default:
		return structs.ErrInvalid("logs: unknown log type %q: want %s or %s", logType, structs.LogTypeStdout, structs.LogTypeStderr)
	}
	if args.Offset < 0 {
		return structs.ErrInvalid("logs: negative offset %d", args.Offset)
	}
	tl, ok, err := e.c.allocs.TaskLog(args.AllocID, args.Task)
	switch {
	case !ok:
		return structs.ErrNotFound("allocation %q is not on node %q, or its files were removed", args.AllocID, e.c.NodeID())
	case err != nil:
		return err
	}
	task, paths := tl.Task, tl.Paths
	path := paths.Stdout
	if logType == structs.LogTypeStderr {
		path = paths.Stderr
	}
	limit := args.Limit
	if limit <= 0 || limit > structs.MaxLogChunk {
		limit = structs.MaxLogChunk
	}
	wait := min(args.Wait, structs.MaxLogWait)
	deadline := time.Now().Add(wait)

	// pos is where to read from, from the start of the log; an offset from
	// the end is turned into one on the first read, so that output written
	// while the call waits is not skipped.
	pos, fromEnd := args.Offset, args.Origin == structs.LogOriginEnd
	if args.Origin != "" && args.Origin != structs.LogOriginStart && !fromEnd {
		return structs.ErrInvalid("logs: unknown origin %q: want %s or %s", args.Origin, structs.LogOriginStart, structs.LogOriginEnd)
	}
	reply.Task = task
	reply.File = "alloc/logs/" + state.Segment(task) + "." + logType
	for {
		// Whether the task ended is read before the log, so that a task
		// that ends meanwhile is not reported done before its last output
		// was read.
		done := tl.Done()
		data, next, eof, err := readLogChunk(path, pos, fromEnd, limit)
		if err != nil {
			return structs.Wrap(err, "reading the %s of task %q of allocation %q", logType, task, args.AllocID)
		}
		pos, fromEnd = next, false
		left := time.Until(deadline)
		if len(data) > 0 || !eof || done || left <= 0 {
			reply.Data, reply.Offset, reply.EOF, reply.Done = data, next, eof, done && eof
			return nil
		}
		t := time.NewTimer(min(logPollInterval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			// The server stopped waiting: it hears that nothing came.
			reply.Offset, reply.EOF = next, true
			return nil
		case <-t.C:
		}
	}
}

// readLogChunk reads up to limit bytes of the log at path from pos (from
// its end when fromEnd). It returns the bytes, the position after them from
// the start of the log, and whether they reach its end. A log not written
// yet (the task has not started) is empty.
func readLogChunk(path string, pos int64, fromEnd bool, limit int) (data []byte, next int64, eof bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, true, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, false, err
	}
	size := fi.Size()
	if fromEnd {
		pos = max(size-pos, 0)
	}
	// Logs only grow; a position past the end (a caller's guess) is the
	// end.
	pos = min(pos, size)
	n := min(int64(limit), size-pos)
	data = make([]byte, n)
	got, err := f.ReadAt(data, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, false, err
	}
	data = data[:got]
	next = pos + int64(got)
	return data, next, next >= size, nil
}
