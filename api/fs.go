package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/volplane/volplane/structs"
)

// LogsOptions select a task's log and where to read it from.
type LogsOptions struct {
	// Task names the task; empty means the allocation's only task.
	Task string
	// Stderr reads the task's stderr instead of its stdout.
	Stderr bool
	// Follow keeps the stream open for new output until the task ends.
	Follow bool
	// Origin (structs.LogOriginStart or LogOriginEnd; empty is start) and
	// Offset say where to start, in bytes.
	Origin string
	Offset int64
}

// LogStream is a task's log as the agent streams it: a series of frames.
type LogStream struct {
	body io.ReadCloser
	dec  *json.Decoder
}

// Logs opens the log of a task of an allocation (GET
// /v1/client/fs/logs/:alloc). The caller reads it with Next and closes it;
// q.Context ends it early.
func (a *Allocations) Logs(allocID string, o LogsOptions, q *QueryOptions) (*LogStream, error) {
	r := a.c.newQuery(http.MethodGet, "/v1/client/fs/logs/"+escape(allocID), q)
	logType := structs.LogTypeStdout
	if o.Stderr {
		logType = structs.LogTypeStderr
	}
	r.params.Set("type", logType)
	if o.Task != "" {
		r.params.Set("task", o.Task)
	}
	if o.Follow {
		r.params.Set("follow", "true")
	}
	if o.Origin != "" {
		r.params.Set("origin", o.Origin)
	}
	if o.Offset > 0 {
		r.params.Set("offset", strconv.FormatInt(o.Offset, 10))
	}
	body, err := a.c.openStream(r)
	if err != nil {
		return nil, err
	}
	return &LogStream{body: body, dec: json.NewDecoder(body)}, nil
}

// Next returns the next frame with data, skipping heartbeats. It returns
// io.EOF once the stream ended as it should (the end of the log, or with
// Follow the end of a task that ended), and an error when the server ended
// it early or the connection broke.
func (s *LogStream) Next() (*structs.StreamFrame, error) {
	for {
		var f structs.StreamFrame
		if err := s.dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("reading the log stream: %w", err)
		}
		if f.Error != "" {
			return nil, errors.New(f.Error)
		}
		if len(f.Data) > 0 {
			return &f, nil
		}
	}
}

// Close ends the stream.
func (s *LogStream) Close() error { return s.body.Close() }

// openStream sends r and returns the body of a 2xx answer for the caller
// to read as it comes.
func (c *Client) openStream(r *request) (io.ReadCloser, error) {
	target := c.base.String() + r.path
	if len(r.params) > 0 {
		target += "?" + r.params.Encode()
	}
	ctx := r.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, nil)
	if err != nil {
		return nil, err
	}
	if r.token != "" {
		req.Header.Set("X-Nomad-Token", r.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &ConnectError{Address: c.Address(), Err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		text := strings.TrimSpace(string(msg))
		if text == "" {
			text = fmt.Sprintf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
		}
		return nil, &StatusError{Code: resp.StatusCode, Message: text}
	}
	return resp.Body, nil
}
