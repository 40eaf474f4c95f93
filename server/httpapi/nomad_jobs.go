package httpapi

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/volplane/volplane/structs"
)

// Nomad's defaults for the job fields volplane does not have, as its
// jobspec fills them: they are what a job read back shows, so that Nomad's
// CLI, which dereferences them, prints them.
const (
	nomadDefaultPriority = 50
	nomadDefaultRegion   = "global"
	nomadDefaultNodePool = "default"
)

// JobView is a job as GET /v1/job/:id answers it: every field of
// structs.Job (volplane's CLI and UI read them), with the fields of Nomad's
// api.Job that its CLI reads, at Nomad's defaults.
type JobView struct {
	*structs.Job
	Region      string
	Priority    int
	AllAtOnce   bool
	Datacenters []string
	NodePool    string
	ParentID    string
	Dispatched  bool
	Stable      bool
	// StatusDescription is empty, as Nomad's for a job it did not stop
	// for a reason of its own.
	StatusDescription string
}

func jobView(j *structs.Job, region string) *JobView {
	return &JobView{Job: j.Sanitize(), Region: region, Priority: nomadDefaultPriority,
		Datacenters: []string{"*"}, NodePool: nomadDefaultNodePool}
}

// JobListStubView is a job stub with Nomad's JobListStub fields: the
// summary of its allocations (Nomad's CLI dereferences it) and the job
// fields it prints.
type JobListStubView struct {
	*structs.JobListStub
	JobSummary        *JobSummary
	Priority          int
	Datacenters       []string
	NodePool          string
	ParentID          string
	Periodic          bool
	ParameterizedJob  bool
	StatusDescription string
}

// JobSummary is Nomad's summary of a job's allocations by task group.
type JobSummary struct {
	JobID       string
	Namespace   string
	Summary     map[string]TaskGroupSummary
	Children    *JobChildrenSummary
	CreateIndex uint64
	ModifyIndex uint64
}

// JobChildrenSummary is Nomad's count of a parent job's children: always
// zero, volplane has no periodic or parameterized jobs.
type JobChildrenSummary struct {
	Pending, Running, Dead int64
}

// TaskGroupSummary counts a group's allocations by client status; Queued
// is what the group wants and has not been placed.
type TaskGroupSummary struct {
	Queued   int
	Complete int
	Failed   int
	Running  int
	Starting int
	Lost     int
	Unknown  int
}

// summarize builds a job's summary from its allocations and placement.
func summarize(j *structs.Job, allocs []*structs.Allocation) *JobSummary {
	s := &JobSummary{JobID: j.ID, Namespace: j.Namespace, Summary: map[string]TaskGroupSummary{},
		Children: &JobChildrenSummary{}, CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex}
	for _, tg := range j.TaskGroups {
		if tg != nil {
			s.Summary[tg.Name] = TaskGroupSummary{}
		}
	}
	for _, a := range allocs {
		if a.JobID != j.ID || a.Namespace != j.Namespace {
			continue
		}
		g := s.Summary[a.TaskGroup]
		switch a.ClientStatus {
		case structs.AllocClientStatusPending:
			g.Starting++
		case structs.AllocClientStatusRunning:
			g.Running++
		case structs.AllocClientStatusComplete:
			g.Complete++
		case structs.AllocClientStatusFailed:
			g.Failed++
		case structs.AllocClientStatusLost:
			g.Lost++
		default:
			g.Unknown++
		}
		s.Summary[a.TaskGroup] = g
	}
	if !j.Stop {
		for name, p := range j.Placement {
			if p == nil {
				continue
			}
			g := s.Summary[name]
			g.Queued = max(0, p.Desired-p.Placed)
			s.Summary[name] = g
		}
	}
	return s
}

// AllocListStub is an allocation as Nomad's AllocationListStub encodes it,
// with volplane's own fields as well.
type AllocListStub struct {
	ID                 string
	EvalID             string
	Name               string
	Namespace          string
	NodeID             string
	NodeName           string
	JobID              string
	JobType            string
	JobVersion         uint64
	TaskGroup          string
	DesiredStatus      string
	DesiredDescription string
	ClientStatus       string
	ClientDescription  string
	TaskStates         map[string]*TaskStateView
	FollowupEvalID     string
	CreateIndex        uint64
	ModifyIndex        uint64
	CreateTime         int64
	ModifyTime         int64
}

func allocStub(a *structs.Allocation) *AllocListStub {
	return &AllocListStub{ID: a.ID, Name: a.Name, Namespace: a.Namespace, NodeID: a.NodeID,
		JobID: a.JobID, JobVersion: a.JobVersion, TaskGroup: a.TaskGroup,
		DesiredStatus: a.DesiredStatus, DesiredDescription: a.DesiredDescription,
		ClientStatus: a.ClientStatus, ClientDescription: a.ClientDescription,
		TaskStates:  taskStatesView(a.TaskStates),
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, CreateTime: a.CreateTime, ModifyTime: a.ModifyTime}
}

// TaskStateView is a task's state as Nomad's TaskState encodes it: times
// are RFC 3339 (zero when unknown), Events a list. structs.TaskState's
// UnmarshalJSON reads it back.
type TaskStateView struct {
	State       string
	Failed      bool
	Description string `json:",omitempty"`
	Restarts    uint64
	LastRestart time.Time
	StartedAt   time.Time
	FinishedAt  time.Time
	// Events are Nomad's TaskEvent fields (Type, Time in Unix
	// nanoseconds, Message, DisplayMessage, Details).
	Events []*structs.TaskEvent
}

func taskStatesView(m map[string]*structs.TaskState) map[string]*TaskStateView {
	if m == nil {
		return nil
	}
	out := make(map[string]*TaskStateView, len(m))
	for name, ts := range m {
		if ts == nil {
			continue
		}
		events := ts.Events
		if events == nil {
			events = []*structs.TaskEvent{}
		}
		out[name] = &TaskStateView{State: ts.State, Failed: ts.Failed, Description: ts.Description, Restarts: ts.Restarts,
			StartedAt: unixNanoTime(ts.StartedAt), FinishedAt: unixNanoTime(ts.FinishedAt), Events: events}
	}
	return out
}

func unixNanoTime(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// AllocView is an allocation as GET /v1/allocation/:id answers it: every
// field of structs.Allocation, TaskStates in Nomad's shape, and the
// fields of Nomad's Allocation its CLI reads: the job, the evaluation and
// the node's name, empty placement metrics and resources.
type AllocView struct {
	*structs.Allocation
	TaskStates map[string]*TaskStateView
	EvalID     string            `json:",omitempty"`
	NodeName   string            `json:",omitempty"`
	Job        *JobView          `json:",omitempty"`
	Metrics    *AllocationMetric `json:",omitempty"`
	Resources  *Resources        `json:",omitempty"`
}

// allocJob is the job an allocation answer carries when the job itself is
// gone (purged): its identity, the allocation's version and group, and the
// group's tasks as the allocation knows them.
func allocJob(a *structs.Allocation, region string) *JobView {
	tg := &structs.TaskGroup{Name: a.TaskGroup, Count: 1}
	for _, name := range slices.Sorted(maps.Keys(a.TaskStates)) {
		tg.Tasks = append(tg.Tasks, &structs.Task{Name: name})
	}
	j := &structs.Job{ID: a.JobID, Namespace: a.Namespace, Name: a.JobID, Version: a.JobVersion,
		Status: structs.JobStatusDead, Stop: true, TaskGroups: []*structs.TaskGroup{tg}}
	return jobView(j, region)
}

// Resources is Nomad's task resources, at its jobspec's defaults: volplane
// does not reserve resources.
type Resources struct {
	CPU      int
	MemoryMB int
	DiskMB   int
}

// jobspecResources are the resources Nomad's jobspec gives a task by
// default, which allocation answers carry (Nomad's CLI adds them up).
func jobspecResources() *Resources { return &Resources{CPU: 100, MemoryMB: 300, DiskMB: 300} }

// AllocationMetric is Nomad's account of a placement. volplane's reasons
// for not placing go in ConstraintFiltered, one per reason.
type AllocationMetric struct {
	NodesEvaluated     int
	NodesFiltered      int
	NodesInPool        int
	NodesAvailable     map[string]int
	ClassFiltered      map[string]int
	ConstraintFiltered map[string]int
	NodesExhausted     int
	ClassExhausted     map[string]int
	DimensionExhausted map[string]int
	QuotaExhausted     []string
	AllocationTime     time.Duration
	CoalescedFailures  int
}

// Evaluation is a placement pass of a job as Nomad's Evaluation encodes it.
// volplane does not store evaluations: they are derived from the job (its
// modify index, stop flag and placement explanation), with IDs derived
// from the same, so that a job's evaluations read the same from every
// server and for as long as the job is unchanged.
type Evaluation struct {
	ID                string
	Priority          int
	Type              string
	TriggeredBy       string
	Namespace         string
	JobID             string
	JobModifyIndex    uint64
	NodeID            string
	NodeModifyIndex   uint64
	DeploymentID      string
	Status            string
	StatusDescription string
	Wait              time.Duration
	WaitUntil         time.Time
	NextEval          string
	PreviousEval      string
	BlockedEval       string
	FailedTGAllocs    map[string]*AllocationMetric
	QueuedAllocations map[string]int
	SnapshotIndex     uint64
	CreateIndex       uint64
	ModifyIndex       uint64
	CreateTime        int64
	ModifyTime        int64
}

// Nomad's evaluation statuses and triggers that volplane's derive to.
const (
	evalStatusPending  = "pending"
	evalStatusComplete = "complete"
	evalStatusBlocked  = "blocked"

	evalTriggerJobRegister   = "job-register"
	evalTriggerJobDeregister = "job-deregister"
	evalTriggerQueuedAllocs  = "queued-allocs"
)

// evalID derives an evaluation ID, shaped as a UUID, from what identifies
// the pass: the job, its modify index and the kind of pass.
func evalID(namespace, jobID string, jobModifyIndex uint64, kind string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%s", namespace, jobID, jobModifyIndex, kind))
	return fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}

// jobEvalID is the ID of the evaluation of the job as it stands: its
// registration's, or its stop's once stopped.
func jobEvalID(j *structs.Job) string {
	if j.Stop {
		return evalID(j.Namespace, j.ID, j.JobModifyIndex, evalTriggerJobDeregister)
	}
	return evalID(j.Namespace, j.ID, j.JobModifyIndex, evalTriggerJobRegister)
}

// jobEvals derives a job's evaluations, newest first: the pass of its
// current version (or of its stop), complete once the placer has explained
// the placement, with the groups it could not fully place in
// FailedTGAllocs and, then, a blocked evaluation that waits for what is
// missing, as Nomad's.
func jobEvals(j *structs.Job) []*Evaluation {
	trigger := evalTriggerJobRegister
	if j.Stop {
		trigger = evalTriggerJobDeregister
	}
	ev := &Evaluation{ID: jobEvalID(j), Priority: nomadDefaultPriority, Type: j.Type, TriggeredBy: trigger,
		Namespace: j.Namespace, JobID: j.ID, JobModifyIndex: j.JobModifyIndex, Status: evalStatusPending,
		CreateIndex: j.JobModifyIndex, ModifyIndex: j.ModifyIndex, CreateTime: j.SubmitTime, ModifyTime: j.SubmitTime,
		QueuedAllocations: map[string]int{}}
	if j.Placement == nil && !j.Stop {
		return []*Evaluation{ev}
	}
	ev.Status = evalStatusComplete
	var updated int64
	for _, name := range slices.Sorted(maps.Keys(j.Placement)) {
		p := j.Placement[name]
		if p == nil {
			continue
		}
		updated = max(updated, p.UpdatedAt)
		missing := max(0, p.Desired-p.Placed)
		if j.Stop {
			continue
		}
		ev.QueuedAllocations[name] = missing
		if missing == 0 && len(p.Blocked) == 0 {
			continue
		}
		if ev.FailedTGAllocs == nil {
			ev.FailedTGAllocs = map[string]*AllocationMetric{}
		}
		m := &AllocationMetric{ConstraintFiltered: map[string]int{}, CoalescedFailures: max(0, missing-1)}
		for _, why := range p.Blocked {
			m.ConstraintFiltered[why]++
			m.NodesEvaluated++
			m.NodesFiltered++
		}
		ev.FailedTGAllocs[name] = m
	}
	if updated > 0 {
		ev.ModifyTime = updated
	}
	if ev.FailedTGAllocs == nil {
		return []*Evaluation{ev}
	}
	blocked := &Evaluation{ID: evalID(j.Namespace, j.ID, j.JobModifyIndex, evalStatusBlocked),
		Priority: ev.Priority, Type: j.Type, TriggeredBy: evalTriggerQueuedAllocs, Namespace: j.Namespace,
		JobID: j.ID, JobModifyIndex: j.JobModifyIndex, Status: evalStatusBlocked,
		StatusDescription: "created to place remaining allocations", PreviousEval: ev.ID,
		QueuedAllocations: ev.QueuedAllocations, CreateIndex: ev.CreateIndex, ModifyIndex: ev.ModifyIndex,
		CreateTime: ev.ModifyTime, ModifyTime: ev.ModifyTime}
	ev.BlockedEval = blocked.ID
	return []*Evaluation{blocked, ev}
}

// evalAllocs are the allocations an evaluation placed: those of the job's
// version at the time, made since its registration.
func evalAllocs(ev *Evaluation, allocs []*structs.Allocation) []*AllocListStub {
	out := []*AllocListStub{}
	for _, a := range allocs {
		if a.JobID == ev.JobID && a.Namespace == ev.Namespace && a.CreateIndex >= ev.JobModifyIndex {
			s := allocStub(a)
			s.EvalID = ev.ID
			out = append(out, s)
		}
	}
	return out
}
