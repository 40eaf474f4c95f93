package structs

import "time"

// Task logs travel from the client agent that ran the task to whoever asks
// a server for them: the server finds the allocation's node and calls
// FileSystem.Logs on its agent over the agent's yamux session (forwarded to
// the server that holds the session, as ClientCSI calls are). A call
// returns one chunk; following a log is a series of calls, each of which
// waits a little for new output, so that no call holds a stream for long
// and every hop keeps its deadline.

// Log types, as Nomad's ?type=.
const (
	LogTypeStdout = "stdout"
	LogTypeStderr = "stderr"
)

// Log origins, as Nomad's ?origin=: where Offset counts from.
const (
	LogOriginStart = "start"
	LogOriginEnd   = "end"
)

// Bounds of one FileSystem.Logs call.
const (
	// MaxLogChunk bounds the bytes one call returns.
	MaxLogChunk = 256 << 10
	// MaxLogWait bounds how long one call waits for new output.
	MaxLogWait = 20 * time.Second
)

// FSLogsRequest asks for a chunk of a task's stdout or stderr.
type FSLogsRequest struct {
	AllocID string
	// Task names the task; empty means the group's only task.
	Task string
	// LogType is LogTypeStdout or LogTypeStderr.
	LogType string
	// Origin and Offset say where to read from: Offset bytes after the
	// start of the log (LogOriginStart) or before its end (LogOriginEnd).
	Origin string
	Offset int64
	// Limit bounds the bytes returned; 0 or more than MaxLogChunk means
	// MaxLogChunk.
	Limit int
	// Wait, when above zero, is how long to wait for output when there is
	// none past the offset yet, unless the task ended (at most
	// MaxLogWait).
	Wait time.Duration
	// ClientCSITarget names the allocation's node (the server fills it
	// in) and carries the caller's deadline, as for the ClientCSI calls.
	ClientCSITarget
	QueryOptions
}

// FSLogsResponse is one chunk of a task's log.
type FSLogsResponse struct {
	// Task is the task whose log this is (the request's, or the group's
	// only task).
	Task string
	// File is the log's path relative to the allocation's directory, as
	// Nomad's stream frames name it ("alloc/logs/web.stdout").
	File string
	Data []byte
	// Offset is the position, from the start of the log, just after Data:
	// the next call's Offset with LogOriginStart.
	Offset int64
	// EOF is set when Data reaches what the task has written so far.
	EOF bool
	// Done is set when the task will write no more: it ended, or its
	// allocation did. A follower stops once EOF and Done are both set.
	Done bool
}

// StreamFrame is one frame of a log streamed over HTTP without ?plain, as
// Nomad's: Data (base64 in JSON) read from File, ending at Offset from the
// start of the log. A frame with no field set is a heartbeat. Error,
// volplane's own, is the last frame of a stream the server had to end
// early.
type StreamFrame struct {
	Offset    int64  `json:",omitempty"`
	Data      []byte `json:",omitempty"`
	File      string `json:",omitempty"`
	FileEvent string `json:",omitempty"`
	Error     string `json:",omitempty"`
}
