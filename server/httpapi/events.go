package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// DefaultEventHeartbeat is how long an event stream stays silent before it
// sends a heartbeat line, when Config.EventHeartbeat is 0.
const DefaultEventHeartbeat = 10 * time.Second

// eventWriteTimeout bounds one write to a stream's client. A client that
// stops reading would otherwise hold the handler forever; its subscription
// is dropped by the broker meanwhile, so the FSM never waits for it.
const eventWriteTimeout = 30 * time.Second

// streamEnd is the last line of a stream that the server ends: the reason,
// and that the client should subscribe again.
type streamEnd struct {
	Error string
}

// eventStream serves GET /v1/event/stream[?topic=T...][&index=N]: the events
// of this server's own state store (whichever server answers; it is not
// forwarded to the leader, so a follower's stream may lag the leader's
// writes by its replication delay, but never skips or reorders them), as
// newline-delimited JSON, one object per event, each flushed as it is
// written:
//
//	{"Index":12,"Topic":"CSIVolume","Type":"VolumeRegistered","Key":"web","Namespace":"default","Payload":{...}}
//
// A line "{}" is a heartbeat, sent after EventHeartbeat without events. With
// index=N the stream starts with the buffered events after N; when some of
// those are no longer buffered it answers 400 before streaming. An unknown
// topic is a 400. The stream ends when the client goes away; when the
// server ends it (shutdown, a snapshot restore replacing the state, or a
// client too slow to keep up) its last line is {"Error":"..."}, after which
// the client should subscribe again, with index set to the last index it
// received. With ACLs on, the subscription's token is checked first (a 403
// as any route's), and each event goes only to a token that may read its
// object; a token deleted or expired meanwhile ends the stream.
func (h *handler) eventStream(w http.ResponseWriter, r *http.Request) {
	if h.events == nil {
		h.writeError(w, r, structs.ErrNotFound("the event stream is not enabled on this agent"))
		return
	}
	q := r.URL.Query()
	var from uint64
	if s := q.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			h.writeError(w, r, structs.ErrInvalid("invalid index %q: want a non-negative integer", s))
			return
		}
		from = n
	}
	// The token is checked before anything is subscribed; then each event
	// goes only to a token that may read its object.
	var allow func(state.Event) (bool, error)
	if h.eventFilter != nil {
		var err error
		if allow, err = h.eventFilter(r.Header.Get(headerToken)); err != nil {
			h.writeError(w, r, err)
			return
		}
	}
	broker := h.events()
	if broker == nil {
		h.writeError(w, r, structs.ErrNotFound("the event stream is not enabled on this agent"))
		return
	}
	sub, err := broker.Subscribe(q["topic"], from)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	defer sub.Close()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if h.shutdownCh != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-h.shutdownCh:
				cancel()
			case <-stop:
			}
		}()
	}

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	// send writes one line and flushes it; false means the client is gone.
	send := func(v any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if err := enc.Encode(v); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	for {
		next, cancelNext := context.WithTimeout(ctx, h.heartbeat)
		ev, err := sub.Next(next)
		cancelNext()
		var line any = ev
		if allow != nil && (err == nil || errors.Is(err, context.DeadlineExceeded)) {
			// A heartbeat checks the token too, so a deleted or expired
			// token's stream ends even when nothing happens.
			ok, aerr := allow(ev)
			if aerr != nil {
				send(streamEnd{Error: "event stream ended: " + structs.MessageOf(aerr)})
				return
			}
			if !ok && err == nil {
				continue
			}
		}
		switch {
		case err == nil:
		case ctx.Err() != nil:
			// The client went away, or the server is shutting down and
			// says so.
			select {
			case <-h.shutdownCh:
				send(streamEnd{Error: "event stream ended: the server is shutting down; subscribe again"})
			default:
			}
			return
		case errors.Is(err, context.DeadlineExceeded):
			line = struct{}{}
		default:
			send(streamEnd{Error: structs.MessageOf(err)})
			return
		}
		if !send(line) {
			return
		}
	}
}
