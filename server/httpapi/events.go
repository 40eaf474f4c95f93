package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
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

// eventFrame is one frame of the stream, as Nomad's: the events of one
// write (one Raft index), in the order the write made them.
type eventFrame struct {
	Index  uint64
	Events []state.Event
}

// eventStream serves GET /v1/event/stream[?topic=T[:K]...][&index=N]
// [&namespace=NS]: the events of this server's own state store (whichever
// server answers; it is not forwarded to the leader, so a follower's stream
// may lag the leader's writes by its replication delay, but never skips or
// reorders them), as newline-delimited JSON in Nomad's framing: one frame
// per write, holding that write's events, each frame flushed as it is
// written:
//
//	{"Index":12,"Events":[{"Index":12,"Topic":"CSIVolume","Type":"VolumeRegistered","Key":"web","Namespace":"default","Payload":{...}}]}
//
// Topics take Nomad's syntax: "CSIVolume" or "CSIVolume:*" is every event
// of the topic, "CSIVolume:web" those whose key (the volume's ID, for
// volume and claim events) is web, "*" (or "*:*") every topic; none is
// every topic too. namespace=NS keeps the events of that namespace (and
// those of objects without one: plugins, ACL objects); "*" or none keeps
// every namespace. A line "{}" is a heartbeat, sent after EventHeartbeat
// without events. With index=N the stream starts with the buffered events
// after N; when some of those are no longer buffered it answers 400 before
// streaming. An unknown topic is a 400. The stream ends when the client
// goes away; when the server ends it (shutdown, a snapshot restore
// replacing the state, or a client too slow to keep up) its last line is
// {"Error":"..."}, after which the client should subscribe again, with
// index set to the last index it received. With ACLs on, the
// subscription's token is checked first (a 403 as any route's), and each
// event goes only to a token that may read its object; a token deleted or
// expired meanwhile ends the stream.
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
	topics, keys, err := parseEventTopics(q["topic"])
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	namespace := q.Get("namespace")
	// The token is checked before anything is subscribed; then each event
	// goes only to a token that may read its object.
	var allow func(state.Event) (bool, error)
	if h.eventFilter != nil {
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
	sub, err := broker.Subscribe(topics, from)
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
	// wanted says whether the client asked for an event and may see it.
	wanted := func(ev state.Event) (bool, error) {
		if !keys.match(ev) || (namespace != "" && namespace != "*" && ev.Namespace != "" && ev.Namespace != namespace) {
			return false, nil
		}
		if allow == nil {
			return true, nil
		}
		return allow(ev)
	}
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	// A closed context makes Next return what is queued without waiting,
	// to gather the rest of a write's events into its frame.
	now, stopNow := context.WithCancel(context.Background())
	stopNow()
	var held *state.Event // read while gathering, for the next frame
	for {
		var ev state.Event
		var err error
		if held != nil {
			ev, held = *held, nil
		} else {
			next, cancelNext := context.WithTimeout(ctx, h.heartbeat)
			ev, err = sub.Next(next)
			cancelNext()
		}
		var line any
		switch {
		case err == nil:
			ok, aerr := wanted(ev)
			if aerr != nil {
				send(streamEnd{Error: "event stream ended: " + structs.MessageOf(aerr)})
				return
			}
			frame := eventFrame{Index: ev.Index}
			if ok {
				frame.Events = append(frame.Events, ev)
			}
			for {
				more, err := sub.Next(now)
				if err != nil {
					break // nothing queued, or the end, which the next Next says again
				}
				if more.Index != ev.Index {
					held = &more
					break
				}
				ok, aerr := wanted(more)
				if aerr != nil {
					send(streamEnd{Error: "event stream ended: " + structs.MessageOf(aerr)})
					return
				}
				if ok {
					frame.Events = append(frame.Events, more)
				}
			}
			if len(frame.Events) == 0 {
				continue
			}
			line = frame
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
			// A heartbeat checks the token too, so a deleted or expired
			// token's stream ends even when nothing happens.
			if allow != nil {
				if _, aerr := allow(state.Event{}); aerr != nil {
					send(streamEnd{Error: "event stream ended: " + structs.MessageOf(aerr)})
					return
				}
			}
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

// eventKeys are the keys a subscription asked for, by topic ("*" for any
// topic); a topic whose set is nil takes every key. A nil eventKeys takes
// every event.
type eventKeys map[string]map[string]bool

func (k eventKeys) match(ev state.Event) bool {
	if k == nil {
		return true
	}
	for _, t := range []string{ev.Topic, "*"} {
		set, ok := k[t]
		if ok && (set == nil || set[ev.Key]) {
			return true
		}
	}
	return false
}

// parseEventTopics reads the topic parameters, in volplane's syntax
// ("CSIVolume") or Nomad's ("CSIVolume:*", "CSIVolume:web", "*"): the
// topics to subscribe to (nil: all) and the keys to keep.
func parseEventTopics(vals []string) ([]string, eventKeys, error) {
	if len(vals) == 0 {
		return nil, nil, nil
	}
	keys := eventKeys{}
	all := false
	for _, v := range vals {
		topic, key, _ := strings.Cut(v, ":")
		if topic == "" {
			return nil, nil, structs.ErrInvalid("invalid event topic %q: want TOPIC or TOPIC:KEY, e.g. CSIVolume:*", v)
		}
		if topic == "*" {
			all = true
		} else if !slices.Contains(state.Topics(), topic) {
			return nil, nil, structs.ErrInvalid("unknown event topic %q: want one of %s, or *", topic, strings.Join(state.Topics(), ", "))
		}
		set, seen := keys[topic]
		switch {
		case key == "" || key == "*":
			keys[topic] = nil
		case seen && set == nil:
			// Every key of the topic already.
		default:
			if set == nil {
				set = map[string]bool{}
			}
			set[key] = true
			keys[topic] = set
		}
	}
	if all {
		if set, ok := keys["*"]; ok && set == nil {
			return nil, nil, nil
		}
		return nil, keys, nil
	}
	return slices.Sorted(maps.Keys(keys)), keys, nil
}
