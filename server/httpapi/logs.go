package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/volplane/volplane/structs"
)

// logsFollowWait is how long each FileSystem.Logs call of a followed log
// waits for output. Shorter means more calls while a task is quiet; longer
// means a client that went away holds a call on the node for longer.
const logsFollowWait = 10 * time.Second

// allocLogs serves GET /v1/client/fs/logs/:alloc?task=&type=stdout|stderr
// [&follow=true][&origin=start|end][&offset=N][&plain=true], Nomad's route
// for a task's logs. The log is read from the allocation's node, in chunks
// (see structs.FSLogsRequest), and written as it comes: raw bytes with
// plain, otherwise a stream of JSON structs.StreamFrames. Without follow the
// stream ends at the end of what the task has written; with follow it
// ends once the task (or its allocation) ended and everything it wrote was
// sent. Errors before the first byte are answered with their status.
func (h *handler) allocLogs(w http.ResponseWriter, r *http.Request) {
	args := structs.FSLogsRequest{AllocID: r.PathValue("alloc")}
	v, err := parseQueryOptions(r, &args.QueryOptions)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	args.Task, args.LogType, args.Origin = v.Get("task"), v.Get("type"), v.Get("origin")
	if s := v.Get("offset"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			h.writeError(w, r, structs.ErrInvalid("invalid offset %q: must be a non-negative integer", s))
			return
		}
		args.Offset = n
	}
	follow, err := optionalBool(v, "follow", false)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	plain, err := optionalBool(v, "plain", false)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	var reply structs.FSLogsResponse
	if err := h.backend.RPC("FileSystem.Logs", &args, &reply); err != nil {
		h.writeError(w, r, err)
		return
	}

	if plain {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	// send writes one chunk (or, for a JSON stream, a heartbeat when the
	// chunk is empty) and flushes it; false means the client is gone.
	send := func(reply *structs.FSLogsResponse) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		var err error
		switch {
		case plain && len(reply.Data) == 0:
			return true
		case plain:
			_, err = w.Write(reply.Data)
		case len(reply.Data) == 0:
			err = enc.Encode(structs.StreamFrame{})
		default:
			err = enc.Encode(structs.StreamFrame{Offset: reply.Offset, Data: reply.Data, File: reply.File})
		}
		return err == nil && rc.Flush() == nil
	}
	w.WriteHeader(http.StatusOK)
	for {
		if !send(&reply) {
			return
		}
		if reply.EOF && (!follow || reply.Done) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.shutdownCh:
			if !plain {
				_ = enc.Encode(structs.StreamFrame{Error: "log stream ended: the server is shutting down"})
			}
			return
		default:
		}
		next := args
		next.Origin, next.Offset = structs.LogOriginStart, reply.Offset
		next.Task = reply.Task
		if reply.EOF {
			next.Wait = logsFollowWait
		}
		reply = structs.FSLogsResponse{}
		if err := h.backend.RPC("FileSystem.Logs", &next, &reply); err != nil {
			h.logger.Warn("log stream ended by an error", "alloc_id", args.AllocID, "error", structs.MessageOf(err))
			if !plain {
				_ = enc.Encode(structs.StreamFrame{Error: structs.MessageOf(err)})
				_ = rc.Flush()
			}
			return
		}
	}
}
