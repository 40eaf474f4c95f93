package structs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// UnmarshalJSON reads a task state in either encoding of its times: Unix
// nanoseconds (volplane's RPC types) or RFC 3339 strings (Nomad's
// TaskState, which is how the HTTP API answers, so that Nomad's client
// reads it). A zero time in either is 0.
func (s *TaskState) UnmarshalJSON(b []byte) error {
	type plain TaskState
	aux := struct {
		*plain
		StartedAt  json.RawMessage
		FinishedAt json.RawMessage
	}{plain: (*plain)(s)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	var err error
	if s.StartedAt, err = unixNanoJSON(aux.StartedAt); err != nil {
		return fmt.Errorf("task state StartedAt: %w", err)
	}
	if s.FinishedAt, err = unixNanoJSON(aux.FinishedAt); err != nil {
		return fmt.Errorf("task state FinishedAt: %w", err)
	}
	// Nomad's encoding lists no events as []; volplane's state has none.
	if len(s.Events) == 0 {
		s.Events = nil
	}
	return nil
}

// unixNanoJSON reads a time given as Unix nanoseconds or as an RFC 3339
// string; absent, null and the zero time are 0.
func unixNanoJSON(raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	if raw[0] != '"' {
		var n int64
		err := json.Unmarshal(raw, &n)
		return n, err
	}
	var t time.Time
	if err := json.Unmarshal(raw, &t); err != nil {
		return 0, err
	}
	if t.IsZero() || t.Unix() <= 0 {
		return 0, nil
	}
	return t.UnixNano(), nil
}
