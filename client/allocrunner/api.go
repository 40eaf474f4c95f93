package allocrunner

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/volplane/volplane/client/execdriver"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// AllocIDs returns the allocations the client runs or remembers, sorted.
func (m *Manager) AllocIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.runners))
}

// AllocState is what the client knows of one allocation: its status as
// the client reports it, its volumes and its tasks.
type AllocState struct {
	ClientStatus      string
	ClientDescription string
	Volumes           map[string]structs.AllocVolumeState
	// Tasks are the PIDs of the tasks' supervisors (0 before a start),
	// and Exited whether they ended.
	Tasks map[string]TaskState
}

// TaskState is one task as the client knows it.
type TaskState struct {
	PID         int
	State       string
	Failed      bool
	Description string
}

// AllocState returns what the client knows of an allocation, and whether
// it knows it.
func (m *Manager) AllocState(allocID string) (AllocState, bool) {
	r := m.runner(allocID)
	if r == nil {
		return AllocState{}, false
	}
	return r.snapshot(), true
}

// Reconciled counts the answers of the allocation query the manager acted
// upon: 0 until the servers were first heard from.
func (m *Manager) Reconciled() uint64 { return m.reconciled.Load() }

// StopAll stops every allocation, for an agent that exits for good: from
// the call on no allocation is started. It returns the IDs of the
// allocations it stopped; Running tells which of them still run.
func (m *Manager) StopAll(reason string) []string {
	m.mu.Lock()
	m.draining = true
	runners := slices.Collect(maps.Values(m.runners))
	m.mu.Unlock()
	ids := make([]string, 0, len(runners))
	for _, r := range runners {
		r.stop(reason)
		ids = append(ids, r.id)
	}
	slices.Sort(ids)
	return ids
}

// Running returns those of the allocations ids that have not ended yet;
// one forgotten meanwhile has ended.
func (m *Manager) Running(ids []string) []string {
	var out []string
	for _, id := range ids {
		if r := m.runner(id); r != nil && r.getPhase() != phaseDone {
			out = append(out, id)
		}
	}
	return out
}

// TaskLog is where a task's output is, for the FileSystem endpoint.
type TaskLog struct {
	// Task is the task's name, Paths its files (Stdout and Stderr).
	Task  string
	Paths execdriver.TaskPaths
	// Done reports whether the task will write no more output: it ended,
	// or the allocation did (perhaps before the task ever started).
	Done func() bool
}

// TaskLog resolves the task a logs request names in an allocation: the
// named one, which must be one of the group's, or the group's only task.
// ok is false when the client does not know the allocation.
func (m *Manager) TaskLog(allocID, task string) (log TaskLog, ok bool, err error) {
	r := m.runner(allocID)
	if r == nil {
		return TaskLog{}, false, nil
	}
	name, err := r.logTask(task)
	if err != nil {
		return TaskLog{}, true, err
	}
	return TaskLog{
		Task: name, Paths: execdriver.NewTaskPaths(m.allocDir(r.id), name),
		Done: func() bool { return r.taskDone(name) },
	}, true, nil
}

// logTask resolves the task a logs request names: the named one, which must
// be one of the group's, or the group's only task.
func (r *allocRunner) logTask(name string) (string, error) {
	r.mu.Lock()
	group := r.rec.Group
	r.mu.Unlock()
	if group == nil {
		return "", structs.ErrNotFound("allocation %q: its task group is unknown on this node", r.id)
	}
	var names []string
	for _, t := range group.Tasks {
		names = append(names, t.Name)
	}
	switch {
	case name != "" && slices.Contains(names, name):
		return name, nil
	case name != "":
		return "", structs.ErrNotFound("allocation %q has no task %q (its tasks: %s)", r.id, name, strings.Join(names, ", "))
	case len(names) == 1:
		return names[0], nil
	}
	return "", structs.ErrInvalid("allocation %q runs %s; name the task", r.id, taskList(names))
}

func taskList(names []string) string {
	if len(names) == 0 {
		return "no tasks"
	}
	return fmt.Sprintf("tasks %s", strings.Join(names, ", "))
}

// taskDone reports whether the task will write no more output: it ended,
// or the allocation did (perhaps before the task ever started).
func (r *allocRunner) taskDone(task string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec.Done {
		return true
	}
	t := r.tasks[task]
	return t != nil && t.State == state.TaskDead
}
