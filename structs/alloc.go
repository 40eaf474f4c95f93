package structs

import (
	"strconv"
	"strings"
)

// Allocation desired statuses (what the servers want).
const (
	AllocDesiredStatusRun   = "run"
	AllocDesiredStatusStop  = "stop"
	AllocDesiredStatusEvict = "evict"
)

// Allocation client statuses (what the client reports).
const (
	AllocClientStatusPending  = "pending"
	AllocClientStatusRunning  = "running"
	AllocClientStatusComplete = "complete"
	AllocClientStatusFailed   = "failed"
	AllocClientStatusLost     = "lost"
)

// Allocation is one placed instance of a job's task group.
type Allocation struct {
	ID        string
	Namespace string
	// Name is "job.group[N]"; N is the index per_alloc volume IDs use.
	Name      string
	JobID     string
	TaskGroup string
	NodeID    string

	// JobVersion is the version of the job the allocation runs.
	JobVersion uint64

	DesiredStatus      string
	DesiredDescription string
	ClientStatus       string
	ClientDescription  string

	// VolumeStates are the client's progress with each of the group's
	// volumes, by alias, as the client last reported them.
	VolumeStates map[string]*AllocVolumeState

	// TaskStates are the client's tasks of the allocation, by name, as the
	// client last reported them.
	TaskStates map[string]*TaskState

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  int64
	ModifyTime  int64
}

// Copy returns a deep copy.
func (a *Allocation) Copy() *Allocation {
	if a == nil {
		return nil
	}
	c := *a
	c.VolumeStates = CopyStates(a.VolumeStates)
	c.TaskStates = CopyStates(a.TaskStates)
	return &c
}

// CopyStates deep-copies a map of an allocation's reported states. A nil entry stays nil:
// only a malformed request carries one, and copying it must not panic the
// FSM that refuses it.
func CopyStates[T any](m map[string]*T) map[string]*T {
	if m == nil {
		return nil
	}
	out := make(map[string]*T, len(m))
	for k, v := range m {
		if v == nil {
			out[k] = nil
			continue
		}
		vc := *v
		if d, ok := any(&vc).(interface{ deepenCopy() }); ok {
			d.deepenCopy()
		}
		out[k] = &vc
	}
	return out
}

// deepenCopy makes a shallow copy of a task state deep, for CopyStates.
func (ts *TaskState) deepenCopy() { *ts = *ts.Copy() }

// Task states, as Nomad's.
const (
	TaskStatePending = "pending"
	TaskStateRunning = "running"
	TaskStateDead    = "dead"
)

// TaskState is how one task of an allocation stands on its client.
type TaskState struct {
	// State is pending, running or dead.
	State string
	// Failed is set when a dead task failed on its own (not stopped by
	// the client).
	Failed bool
	// Description says how it ended, e.g. "task t: exit code 3".
	Description string `json:",omitempty"`
	StartedAt   int64  `json:",omitempty"`
	FinishedAt  int64  `json:",omitempty"`
	// Restarts counts the times the client restarted the task.
	Restarts uint64 `json:",omitempty"`
	// Events are the task's most recent events, the oldest first (at
	// most MaxTaskEvents).
	Events []*TaskEvent `json:",omitempty"`
}

// Steps a client reports for an allocation's volume.
const (
	AllocVolumeStepClaiming  = "claiming"
	AllocVolumeStepClaimed   = "claimed"
	AllocVolumeStepStaged    = "staged"
	AllocVolumeStepPublished = "published"
	AllocVolumeStepFailed    = "failed"
)

// AllocVolumeState is a client's progress with one volume of an
// allocation: the step reached and, while it waits, why and until when.
type AllocVolumeState struct {
	VolumeID string
	Step     string
	// Waiting says why the client has not reached the next step, e.g. the
	// claim error naming the allocation whose claim it waits for.
	Waiting   string
	Attempts  int
	NextRetry int64
	UpdatedAt int64
}

// ClientTerminal reports whether the client has finished with the
// allocation: its task no longer runs, so its volumes may be released.
func (a *Allocation) ClientTerminal() bool {
	switch a.ClientStatus {
	case AllocClientStatusComplete, AllocClientStatusFailed, AllocClientStatusLost:
		return true
	}
	return false
}

// ServerTerminal reports whether the servers want the allocation stopped.
func (a *Allocation) ServerTerminal() bool {
	return a.DesiredStatus == AllocDesiredStatusStop || a.DesiredStatus == AllocDesiredStatusEvict
}

// Terminal reports whether the allocation is terminal on either side.
func (a *Allocation) Terminal() bool { return a.ClientTerminal() || a.ServerTerminal() }

// AllocUpdateRequest writes allocations (placement and status updates).
type AllocUpdateRequest struct {
	Allocs []*Allocation
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// NodeClientAllocsRequest is a client asking for the allocations placed on
// its node, usually as a blocking query.
type NodeClientAllocsRequest struct {
	NodeID   string
	SecretID string
	QueryOptions
}

// NodeClientAllocsResponse carries the node's allocations and the jobs they
// belong to (keyed by namespace + "/" + job ID), which the client needs to
// run them.
type NodeClientAllocsResponse struct {
	Allocs []*Allocation
	Jobs   map[string]*Job
	QueryMeta
}

// JobKey is the key of a job in NodeClientAllocsResponse.Jobs.
func JobKey(namespace, jobID string) string { return namespace + "/" + jobID }

// AllocClientUpdate is what a client reports about one allocation.
type AllocClientUpdate struct {
	ID                string
	ClientStatus      string
	ClientDescription string
	VolumeStates      map[string]*AllocVolumeState
	TaskStates        map[string]*TaskState
}

// NodeUpdateAllocRequest is a client reporting its allocations' status.
type NodeUpdateAllocRequest struct {
	NodeID   string
	SecretID string
	Allocs   []*AllocClientUpdate
	WriteRequest
}

// ClientReportable reports whether a client may report status s for one of
// its allocations: lost is the servers' word for an allocation whose node
// went away, never a client's.
func ClientReportable(s string) bool {
	switch s {
	case AllocClientStatusPending, AllocClientStatusRunning, AllocClientStatusComplete, AllocClientStatusFailed:
		return true
	}
	return false
}

// checkSameAllocation refuses an update of a that names another
// allocation, or moves it: an allocation is one placement of one slot of
// one job version on one node for its whole life, and a replacement is a
// new allocation. The claims and the release rely on that (a claim's node
// is its allocation's).
func (a *Allocation) checkSameAllocation(next *Allocation) error {
	switch {
	case next.ID != a.ID:
		return ErrInvalid("allocation %q: an update names allocation %q", a.ID, next.ID)
	case next.Namespace != a.Namespace || next.JobID != a.JobID || next.TaskGroup != a.TaskGroup ||
		next.Name != a.Name || next.JobVersion != a.JobVersion:
		return ErrInvalid("allocation %q (%s of job %q version %d) cannot become %s of job %q version %d",
			a.ID, a.Name, a.JobID, a.JobVersion, next.Name, next.JobID, next.JobVersion)
	case next.NodeID != a.NodeID:
		return ErrInvalid("allocation %q runs on node %q and cannot move to node %q", a.ID, a.NodeID, next.NodeID)
	}
	return nil
}

// CheckUpdate applies the rules every write of an existing allocation a
// keeps, whoever writes it: it stays the same allocation on the same node
// (see checkSameAllocation), a terminal client status is final (its claims
// are being released: it cannot run again), and so is a stop by the
// servers. Refusals that depend on the stored state are conflicts.
func (a *Allocation) CheckUpdate(next *Allocation) error {
	if err := a.checkSameAllocation(next); err != nil {
		return err
	}
	if a.ClientTerminal() && next.ClientStatus != a.ClientStatus {
		return ErrConflict("allocation %q is %s and cannot become %s", a.ID, a.ClientStatus, next.ClientStatus)
	}
	if a.ServerTerminal() && !next.ServerTerminal() {
		return ErrConflict("allocation %q was stopped (%s) and cannot be set to %s", a.ID, a.DesiredStatus, next.DesiredStatus)
	}
	return nil
}

// MergeClientUpdate applies what the allocation's client reports (next,
// the allocation as the client's update would write it) onto a copy of the
// stored allocation a, and returns it. Only the client's fields are taken:
// client status and description, volume states and task states; what the servers own
// (desired status) stays as stored, so a report racing a job stop cannot
// undo the stop. The result must pass CheckUpdate.
//
// The leader calls it against its state to keep refused reports out of the
// Raft log; the state store calls it again inside the write.
func (a *Allocation) MergeClientUpdate(next *Allocation) (*Allocation, error) {
	if err := a.checkSameAllocation(next); err != nil {
		return nil, err
	}
	if !ClientReportable(next.ClientStatus) {
		return nil, ErrInvalid("allocation %q: a client cannot report status %q", a.ID, next.ClientStatus)
	}
	for alias, vs := range next.VolumeStates {
		if vs == nil {
			return nil, ErrInvalid("allocation %q: empty state of volume %q", a.ID, alias)
		}
	}
	for name, ts := range next.TaskStates {
		if ts == nil {
			return nil, ErrInvalid("allocation %q: empty state of task %q", a.ID, name)
		}
		if err := ts.validateReport(a.ID, name); err != nil {
			return nil, err
		}
	}
	out := a.Copy()
	out.ClientStatus, out.ClientDescription = next.ClientStatus, next.ClientDescription
	nc := next.Copy()
	out.VolumeStates = nc.VolumeStates
	if nc.TaskStates != nil {
		// A client that does not report its tasks (an older one) leaves
		// them as they were.
		out.TaskStates = nc.TaskStates
	}
	if err := a.CheckUpdate(out); err != nil {
		return nil, err
	}
	return out, nil
}

// MergePlanUpdate applies what a plan decides for an existing allocation
// (next, the allocation as the plan would write it) onto a copy of the
// stored allocation a, and returns it. A plan only stops allocations: it
// takes the desired status and description; what the client owns stays as
// stored, so a plan computed before the client's last report cannot undo
// it. The result must pass CheckUpdate.
func (a *Allocation) MergePlanUpdate(next *Allocation) (*Allocation, error) {
	if err := a.checkSameAllocation(next); err != nil {
		return nil, err
	}
	switch next.DesiredStatus {
	case AllocDesiredStatusRun, AllocDesiredStatusStop, AllocDesiredStatusEvict:
	default:
		return nil, ErrInvalid("allocation %q: unknown desired status %q", a.ID, next.DesiredStatus)
	}
	out := a.Copy()
	out.DesiredStatus, out.DesiredDescription = next.DesiredStatus, next.DesiredDescription
	if err := a.CheckUpdate(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckNew applies the rules of a new allocation of job: it is the job's,
// of its current version, of one of its groups, placed on a node, to run
// and not yet started, and its name is one of the group's slots: for
// service and batch jobs "job.group[N]" with N below the group's count,
// for system and sysbatch jobs "job.group[0]". Whether the node and the
// slot are free is the state's to check.
func (a *Allocation) CheckNew(job *Job) error {
	if err := ValidateID("allocation id", a.ID); err != nil {
		return err
	}
	if a.Namespace != job.Namespace || a.JobID != job.ID {
		return ErrInvalid("allocation %q is of job %q, not %q", a.ID, a.JobID, job.ID)
	}
	if a.JobVersion != job.Version {
		return ErrConflict("allocation %q is of version %d of job %q, which is at version %d",
			a.ID, a.JobVersion, job.ID, job.Version)
	}
	tg := job.LookupTaskGroup(a.TaskGroup)
	switch {
	case tg == nil:
		return ErrInvalid("allocation %q: job %q has no group %q", a.ID, job.ID, a.TaskGroup)
	case a.NodeID == "":
		return ErrInvalid("allocation %q: placed on no node", a.ID)
	case a.DesiredStatus != AllocDesiredStatusRun || a.ClientStatus != AllocClientStatusPending:
		return ErrInvalid("allocation %q: a new allocation is %s/%s, not %s/%s", a.ID,
			a.DesiredStatus, a.ClientStatus, AllocDesiredStatusRun, AllocClientStatusPending)
	}
	if job.IsSystem() {
		if a.Name != AllocName(job.ID, tg.Name, 0) {
			return ErrInvalid("allocation %q: %q is not the name of group %q's allocations", a.ID, a.Name, tg.Name)
		}
		return nil
	}
	if i, ok := allocIndex(job.ID, tg.Name, a.Name); !ok || i >= tg.Count {
		return ErrInvalid("allocation %q: %q is not one of the %d slots of group %q", a.ID, a.Name, tg.Count, tg.Name)
	}
	return nil
}

// allocIndex parses the N of "job.group[N]", written as AllocName writes it.
func allocIndex(jobID, group, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, jobID+"."+group+"[")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, "]")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || AllocName(jobID, group, i) != name {
		return 0, false
	}
	return i, true
}
