package command

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// Defaults of `alloc logs -tail`, as Nomad's: ten lines, read from a window
// of a guessed size at the end of the log.
const (
	defaultTailLines = 10
	// bytesPerLineGuess sizes the window read from the end of a log for
	// -n: lines longer than that on average show fewer lines.
	bytesPerLineGuess = 256
	maxTailBytes      = 8 << 20
)

// AllocLogsCommand prints (and follows) a task's stdout or stderr.
type AllocLogsCommand struct{ Meta }

func (c *AllocLogsCommand) Synopsis() string { return "Streams the logs of a task." }

func (c *AllocLogsCommand) Help() string {
	return helpText(`
Usage: volplane alloc logs [options] <allocation> [<task>]

  Prints the stdout (or, with -stderr, the stderr) of a task of an
  allocation, read from the client node that ran it through the servers.
  The allocation is its ID or a unique prefix of one; the task may be left
  out when the allocation's group has only one.

  With -f the command keeps printing what the task writes until the task
  (or its allocation) stops, then exits.
`, jobNamespaceOptionHelp+`

Logs Options:

  -stderr
    Print the task's stderr instead of its stdout.

  -f
    Follow the log: keep printing new output until the task stops.

  -tail
    Print the end of the log rather than all of it: the last 10 lines, or
    as many as -n or -c say.

  -n <lines>
    With -tail (which it implies), how many lines to print from the end,
    best effort.

  -c <bytes>
    With -tail (which it implies), how many bytes to print from the end.`, FlagSetClient)
}

func (c *AllocLogsCommand) Run(args []string) int {
	var stderr, follow, tail bool
	var lines, nbytes int64
	f := c.FlagSet("alloc logs", FlagSetClient|FlagSetNamespace)
	f.BoolVar(&stderr, "stderr", false, "")
	f.BoolVar(&follow, "f", false, "")
	f.BoolVar(&tail, "tail", false, "")
	f.Int64Var(&lines, "n", -1, "")
	f.Int64Var(&nbytes, "c", -1, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() < 1 || f.NArg() > 2 {
		return c.UsageError(c, "This command takes one or two arguments: <allocation> [<task>]")
	}
	if lines >= 0 && nbytes >= 0 {
		return c.UsageError(c, "-n and -c cannot be given together")
	}
	if lines >= 0 || nbytes >= 0 {
		tail = true
	}
	if tail && lines < 0 && nbytes < 0 {
		lines = defaultTailLines
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	alloc, err := (&AllocStatusCommand{Meta: c.Meta}).lookupAlloc(client, f.Arg(0))
	if err != nil {
		return c.Fail("querying allocation", err)
	}
	opts := api.LogsOptions{Task: f.Arg(1), Stderr: stderr}
	q := &api.QueryOptions{Namespace: alloc.Namespace}
	out := outputWriter(c.Ui)
	if out == nil {
		out = &lineWriter{ui: c.Ui}
		defer out.(*lineWriter).flush()
	}

	if tail {
		// The end of the log first, trimmed to its last lines; then, when
		// following, everything written after that window.
		window := api.LogsOptions{Task: opts.Task, Stderr: stderr, Origin: structs.LogOriginEnd, Offset: nbytes}
		if lines >= 0 {
			window.Offset = min(lines*bytesPerLineGuess, maxTailBytes)
		}
		var buf bytes.Buffer
		end, err := copyLog(client, alloc.ID, window, q, &buf)
		if err != nil {
			return c.Fail("reading logs", err)
		}
		data := buf.Bytes()
		if lines >= 0 {
			data = lastLines(data, int(lines))
		}
		if _, err := out.Write(data); err != nil {
			return c.Fail("writing logs", err)
		}
		if !follow {
			return 0
		}
		opts.Origin, opts.Offset = structs.LogOriginStart, end
	}
	opts.Follow = follow
	if _, err := copyLog(client, alloc.ID, opts, q, out); err != nil {
		return c.Fail("reading logs", err)
	}
	return 0
}

// copyLog copies a task's log, as the agent streams it, to w. It returns
// the offset the copy ended at, from the start of the log; 0 when nothing
// came (the log is empty, or the window read ended where it started).
func copyLog(client *api.Client, allocID string, o api.LogsOptions, q *api.QueryOptions, w io.Writer) (int64, error) {
	stream, err := client.Allocations().Logs(allocID, o, q)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	end := o.Offset
	if o.Origin == structs.LogOriginEnd {
		end = 0
	}
	for {
		frame, err := stream.Next()
		if errors.Is(err, io.EOF) {
			return end, nil
		}
		if err != nil {
			return end, err
		}
		if _, err := w.Write(frame.Data); err != nil {
			return end, err
		}
		end = frame.Offset
	}
}

// lastLines is the last n lines of data; a final line without its newline
// counts as one. The first, partial, line of a window is dropped when
// there are more than n lines.
func lastLines(data []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i, seen := end-1, 0; i >= 0; i-- {
		if data[i] == '\n' {
			seen++
			if seen == n {
				return data[i+1:]
			}
		}
	}
	return data
}

// lineWriter writes through a Ui that takes whole lines, for a Ui that
// does not expose its writer.
type lineWriter struct {
	ui      interface{ Output(string) }
	partial strings.Builder
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.partial.Write(p)
	s := l.partial.String()
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		return len(p), nil
	}
	for _, line := range strings.Split(s[:i], "\n") {
		l.ui.Output(line)
	}
	l.partial.Reset()
	l.partial.WriteString(s[i+1:])
	return len(p), nil
}

func (l *lineWriter) flush() {
	if l.partial.Len() > 0 {
		l.ui.Output(l.partial.String())
		l.partial.Reset()
	}
}
