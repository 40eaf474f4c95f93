package structs

import (
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// Task event types, as Nomad's.
const (
	TaskReceived        = "Received"
	TaskStarted         = "Started"
	TaskTerminated      = "Terminated"
	TaskKilling         = "Killing"
	TaskKilled          = "Killed"
	TaskRestarting      = "Restarting"
	TaskNotRestarting   = "Not Restarting"
	TaskDriverFailure   = "Driver Failure"
	TaskSetupFailure    = "Setup Failure"
	TaskSiblingFailed   = "Sibling Task Failed"
	TaskHookFailed      = "Task hook failed"
	TaskPluginUnhealthy = "Plugin became unhealthy"
	TaskPluginHealthy   = "Plugin became healthy"
)

// ReasonWithinPolicy is the restart reason of a restart the policy allows,
// as Nomad's; it is not repeated in the event's display message.
const ReasonWithinPolicy = "Restart within policy"

// MaxTaskEvents is how many of a task's most recent events are kept, as
// Nomad's client keeps.
const MaxTaskEvents = 10

// Bounds on what a client may report in one task event.
const (
	maxTaskEventMessage = 4096
	maxTaskEventDetails = 16
)

// TaskEvent is something that happened to a task, as Nomad's (without its
// deprecated fields): Message is the raw detail, DisplayMessage the line
// `alloc status` shows, Details annotated values (exit_code, signal,
// restart_reason, ...).
type TaskEvent struct {
	Type           string
	Time           int64 // Unix nanoseconds
	Message        string
	DisplayMessage string
	Details        map[string]string `json:",omitempty"`
}

// NewTaskEvent returns an event of type typ at time now (Unix nanoseconds).
func NewTaskEvent(typ string, now int64) *TaskEvent {
	return &TaskEvent{Type: typ, Time: now, Details: map[string]string{}}
}

// SetMessage sets the event's message, cut to the length a report may
// carry (a plugin's error text is the plugin's to choose).
func (e *TaskEvent) SetMessage(msg string) *TaskEvent {
	msg = cutText(msg, maxTaskEventMessage/2)
	e.Message = msg
	e.Details["message"] = msg
	return e
}

// SetDisplayMessage sets the line shown for the event.
func (e *TaskEvent) SetDisplayMessage(msg string) *TaskEvent {
	e.DisplayMessage = cutText(msg, maxTaskEventMessage)
	return e
}

// SetDetail annotates the event.
func (e *TaskEvent) SetDetail(key, value string) *TaskEvent {
	e.Details[key] = cutText(value, maxTaskEventMessage/2)
	return e
}

// cutText cuts s to at most n bytes, on a rune boundary, marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// PopulateDisplayMessage fills DisplayMessage from the type, as Nomad
// describes its events, unless it is set.
func (e *TaskEvent) PopulateDisplayMessage() {
	if e == nil || e.DisplayMessage != "" {
		return
	}
	switch e.Type {
	case TaskStarted:
		e.DisplayMessage = "Task started by client"
	case TaskReceived:
		e.DisplayMessage = "Task received by client"
	case TaskKilled:
		e.DisplayMessage = "Task successfully killed"
	case TaskTerminated:
		d := fmt.Sprintf("Exit Code: %s", orDash(e.Details["exit_code"]))
		if s := e.Details["signal"]; s != "" {
			d += ", Signal: " + s
		}
		if e.Message != "" {
			d += fmt.Sprintf(", Exit Message: %q", e.Message)
		}
		e.DisplayMessage = d
	case TaskRestarting:
		in := "Task restarting in " + e.Details["start_delay"]
		if r := e.Details["restart_reason"]; r != "" && r != ReasonWithinPolicy {
			e.DisplayMessage = r + " - " + in
		} else {
			e.DisplayMessage = in
		}
	case TaskNotRestarting:
		e.DisplayMessage = e.Details["restart_reason"]
		if e.DisplayMessage == "" {
			e.DisplayMessage = "Task exceeded restart policy"
		}
	default:
		e.DisplayMessage = e.Message
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// AppendTaskEvent appends e to events, keeping the last MaxTaskEvents.
func AppendTaskEvent(events []*TaskEvent, e *TaskEvent) []*TaskEvent {
	e.PopulateDisplayMessage()
	events = append(events, e)
	if n := len(events); n > MaxTaskEvents {
		events = slices.Clone(events[n-MaxTaskEvents:])
	}
	return events
}

// Copy returns a deep copy.
func (e *TaskEvent) Copy() *TaskEvent {
	if e == nil {
		return nil
	}
	c := *e
	c.Details = maps.Clone(e.Details)
	return &c
}

// Equal reports whether two events are the same.
func (e *TaskEvent) Equal(o *TaskEvent) bool {
	if e == nil || o == nil {
		return e == o
	}
	return e.Type == o.Type && e.Time == o.Time && e.Message == o.Message &&
		e.DisplayMessage == o.DisplayMessage && maps.Equal(e.Details, o.Details)
}

// Copy returns a deep copy.
func (ts *TaskState) Copy() *TaskState {
	if ts == nil {
		return nil
	}
	c := *ts
	if ts.Events != nil {
		c.Events = make([]*TaskEvent, len(ts.Events))
		for i, e := range ts.Events {
			c.Events[i] = e.Copy()
		}
	}
	return &c
}

// Equal reports whether two task states are the same.
func (ts *TaskState) Equal(o *TaskState) bool {
	if ts == nil || o == nil {
		return ts == o
	}
	return ts.State == o.State && ts.Failed == o.Failed && ts.Description == o.Description &&
		ts.StartedAt == o.StartedAt && ts.FinishedAt == o.FinishedAt && ts.Restarts == o.Restarts &&
		slices.EqualFunc(ts.Events, o.Events, (*TaskEvent).Equal)
}

// validateReport checks a task state a client reports.
func (ts *TaskState) validateReport(allocID, task string) error {
	if len(ts.Events) > MaxTaskEvents {
		return ErrInvalid("allocation %q task %q: %d events; a client keeps at most %d", allocID, task, len(ts.Events), MaxTaskEvents)
	}
	for i, e := range ts.Events {
		switch {
		case e == nil:
			return ErrInvalid("allocation %q task %q: event %d is empty", allocID, task, i+1)
		case len(e.Type)+len(e.Message)+len(e.DisplayMessage) > 3*maxTaskEventMessage:
			return ErrInvalid("allocation %q task %q: event %d is longer than %d bytes", allocID, task, i+1, 3*maxTaskEventMessage)
		case len(e.Details) > maxTaskEventDetails:
			return ErrInvalid("allocation %q task %q: event %d has %d details; the limit is %d", allocID, task, i+1, len(e.Details), maxTaskEventDetails)
		}
		for k, v := range e.Details {
			if len(k)+len(v) > maxTaskEventMessage {
				return ErrInvalid("allocation %q task %q: event %d detail %q is longer than %d bytes", allocID, task, i+1, k, maxTaskEventMessage)
			}
		}
	}
	return nil
}
