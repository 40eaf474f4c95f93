package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Event is one change to the cluster's state, from the event stream. The
// payload is left raw: its type depends on the topic (see state.Event).
type Event struct {
	Index     uint64
	Topic     string
	Type      string
	Key       string
	Namespace string
	Payload   json.RawMessage
}

// EventStream is an open GET /v1/event/stream.
type EventStream struct {
	body    io.ReadCloser
	dec     *json.Decoder
	pending []*Event
}

// Events is the event stream endpoint.
type Events struct{ c *Client }

// Events returns the event stream endpoint.
func (c *Client) Events() *Events { return &Events{c: c} }

// Stream subscribes to the events of the topics (none means all) after
// index (0: from now). q.Context ends the stream.
func (e *Events) Stream(topics []string, index uint64, q *QueryOptions) (*EventStream, error) {
	r := e.c.newQuery(http.MethodGet, "/v1/event/stream", q)
	for _, t := range topics {
		r.params.Add("topic", t)
	}
	if index > 0 {
		r.params.Set("index", strconv.FormatUint(index, 10))
	}
	body, err := e.c.openStream(r)
	if err != nil {
		return nil, err
	}
	return &EventStream{body: body, dec: json.NewDecoder(body)}, nil
}

// streamLine is one object of the stream, in either of the two framings an
// agent may use: one event per line, or Nomad's batches
// {"Index":N,"Events":[...]}. {} is a heartbeat; {"Error":"..."} ends it.
type streamLine struct {
	Event
	Events []*Event
	Error  string
}

// Next returns the next event, skipping heartbeats. It returns an error
// when the stream ends: the server's reason when it gave one.
func (s *EventStream) Next() (*Event, error) {
	for len(s.pending) == 0 {
		var line streamLine
		if err := s.dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("the event stream ended")
			}
			return nil, fmt.Errorf("reading the event stream: %w", err)
		}
		switch {
		case line.Error != "":
			return nil, errors.New(line.Error)
		case len(line.Events) > 0:
			s.pending = line.Events
		case line.Topic != "":
			ev := line.Event
			s.pending = []*Event{&ev}
		}
	}
	ev := s.pending[0]
	s.pending = s.pending[1:]
	return ev, nil
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }
