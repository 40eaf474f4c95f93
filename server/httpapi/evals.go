package httpapi

import (
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/volplane/volplane/structs"
)

// jobStubs lists every job the caller may see, in any namespace
// (evaluations are found by ID whatever their namespace), after checking
// the caller against the route's own ACL row.
func (h *handler) jobStubs(r *http.Request, endpoint string) ([]*structs.JobListStub, structs.QueryOptions, error) {
	var args structs.JobListRequest
	if err := h.authorizeRoute(r, endpoint); err != nil {
		return nil, args.QueryOptions, err
	}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, args.QueryOptions, err
	}
	if args.Namespace == "" {
		args.Namespace = "*"
	}
	args.Prefix, args.MinQueryIndex, args.MaxQueryTime = "", 0, 0
	var list structs.JobListResponse
	if err := h.backend.RPC("Job.List", &args, &list); err != nil {
		return nil, args.QueryOptions, err
	}
	return list.Jobs, args.QueryOptions, nil
}

// evalByID finds one derived evaluation by its ID. volplane stores no
// evaluations (see Evaluation): an ID is derived from its job's identity
// and modify index, which the job stubs carry, so only the job it belongs
// to is read.
func (h *handler) evalByID(r *http.Request, endpoint, id string) (*Evaluation, *structs.Job, error) {
	if id == "" {
		return nil, nil, structs.ErrInvalid("missing evaluation ID")
	}
	stubs, q, err := h.jobStubs(r, endpoint)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range stubs {
		if !slices.Contains(evalIDsOf(s.Namespace, s.ID, s.JobModifyIndex), id) {
			continue
		}
		j, err := h.readJob(q.AuthToken, s.Namespace, s.ID, q.AllowStale)
		if err != nil {
			return nil, nil, err
		}
		if j == nil {
			break // gone since the list
		}
		for _, ev := range jobEvals(j) {
			if ev.ID == id {
				return ev, j, nil
			}
		}
	}
	return nil, nil, structs.ErrNotFound("evaluation %q not found", id)
}

// evalIDsOf are the IDs a job's evaluations may have at a modify index.
func evalIDsOf(namespace, jobID string, jobModifyIndex uint64) []string {
	return []string{
		evalID(namespace, jobID, jobModifyIndex, evalTriggerJobRegister),
		evalID(namespace, jobID, jobModifyIndex, evalTriggerJobDeregister),
		evalID(namespace, jobID, jobModifyIndex, evalStatusBlocked),
	}
}

// evalGet serves GET /v1/evaluation/:id.
func (h *handler) evalGet(w http.ResponseWriter, r *http.Request) (any, error) {
	ev, _, err := h.evalByID(r, "Eval.GetEval", r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	setLocalMeta(w, true)
	w.Header().Set(headerIndex, strconv.FormatUint(ev.ModifyIndex, 10))
	return ev, nil
}

// evalAllocations serves GET /v1/evaluation/:id/allocations: the
// allocations the evaluation placed, as Nomad's allocation stubs.
func (h *handler) evalAllocations(w http.ResponseWriter, r *http.Request) (any, error) {
	ev, j, err := h.evalByID(r, "Eval.Allocations", r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	allocs, err := h.readJobAllocs(r, j)
	if err != nil {
		return nil, err
	}
	setLocalMeta(w, true)
	w.Header().Set(headerIndex, strconv.FormatUint(ev.ModifyIndex, 10))
	return evalAllocs(ev, allocs), nil
}

// evalList serves GET /v1/evaluations[?prefix=&job=&status=]: the derived
// evaluations of every job the caller may read (one read per job).
func (h *handler) evalList(w http.ResponseWriter, r *http.Request) (any, error) {
	v, err := params(r)
	if err != nil {
		return nil, err
	}
	prefix, jobID, status := v.Get("prefix"), v.Get("job"), v.Get("status")
	stubs, q, err := h.jobStubs(r, "Eval.List")
	if err != nil {
		return nil, err
	}
	out := []*Evaluation{}
	var index uint64
	for _, s := range stubs {
		if jobID != "" && s.ID != jobID {
			continue
		}
		j, err := h.readJob(q.AuthToken, s.Namespace, s.ID, q.AllowStale)
		if err != nil {
			return nil, err
		}
		if j == nil {
			continue
		}
		for _, ev := range jobEvals(j) {
			if strings.HasPrefix(ev.ID, prefix) && (status == "" || ev.Status == status) {
				out = append(out, ev)
				index = max(index, ev.ModifyIndex)
			}
		}
	}
	setLocalMeta(w, true)
	w.Header().Set(headerIndex, strconv.FormatUint(index, 10))
	return out, nil
}

// JobPlanResponse is Nomad's answer to a plan.
type JobPlanResponse struct {
	JobModifyIndex     uint64
	CreatedEvals       []*Evaluation
	Diff               *JobDiff
	Annotations        *PlanAnnotations
	FailedTGAllocs     map[string]*AllocationMetric
	NextPeriodicLaunch any
	Warnings           string
}

// PlanAnnotations is Nomad's: what the plan does per group.
type PlanAnnotations struct {
	DesiredTGUpdates map[string]*DesiredUpdates
	PreemptedAllocs  []*AllocListStub
}

// DesiredUpdates counts what a plan does to a group's allocations.
// volplane replaces an allocation of an older version by stopping it and
// placing another, so what Nomad counts as a destructive update appears as
// a stop and a place.
type DesiredUpdates struct {
	Ignore            uint64
	Place             uint64
	Migrate           uint64
	Stop              uint64
	InPlaceUpdate     uint64
	DestructiveUpdate uint64
	Canary            uint64
	Preemptions       uint64
}

// JobDiff is Nomad's diff of a job against its registered version: the
// kind of change of the job, of each group (with its count) and of each
// task. volplane does not diff field by field.
type JobDiff struct {
	Type       string
	ID         string
	Fields     []*FieldDiff
	Objects    []struct{}
	TaskGroups []*TaskGroupDiff
}

// TaskGroupDiff is one group's diff, with the plan's counts in Updates.
type TaskGroupDiff struct {
	Type    string
	Name    string
	Fields  []*FieldDiff
	Objects []struct{}
	Tasks   []*TaskDiff
	Updates map[string]uint64
}

// TaskDiff is one task's diff.
type TaskDiff struct {
	Type        string
	Name        string
	Fields      []*FieldDiff
	Objects     []struct{}
	Annotations []string
}

// FieldDiff is one field's change.
type FieldDiff struct {
	Type        string
	Name        string
	Old, New    string
	Annotations []string
}

// Nomad's diff types.
const (
	diffNone    = "None"
	diffAdded   = "Added"
	diffDeleted = "Deleted"
	diffEdited  = "Edited"
)

// jobPlan serves PUT and POST /v1/job/:id/plan: what registering the job
// would do now (Job.Plan, a dry run of the placer), as Nomad's
// JobPlanResponse.
func (h *handler) jobPlan(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.JobPlanRequest
	job, body, err := h.decodeJob(w, r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	args.Job = job
	var reply structs.JobPlanResponse
	if err := h.backend.RPC("Job.Plan", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	out := &JobPlanResponse{JobModifyIndex: reply.JobModifyIndex, CreatedEvals: []*Evaluation{},
		Annotations: &PlanAnnotations{DesiredTGUpdates: map[string]*DesiredUpdates{}},
		Warnings:    strings.Join(reply.Warnings, "\n")}
	for name, g := range reply.Groups {
		out.Annotations.DesiredTGUpdates[name] = &DesiredUpdates{Place: uint64(g.Place), Stop: uint64(g.Stop), Ignore: uint64(g.Ignore)}
	}
	if reply.Job != nil {
		failed := jobEvals(reply.Job)
		planned := reply.Job.Copy()
		planned.Placement, planned.Stop = reply.Placement, false
		if planned.Placement != nil {
			failed = jobEvals(planned)
		}
		out.FailedTGAllocs = failed[len(failed)-1].FailedTGAllocs
	}
	if body.Diff {
		out.Diff = jobDiff(reply.Existing, reply.Job, reply.Groups)
	} else {
		out.Diff = &JobDiff{Type: diffNone, ID: job.ID}
	}
	return out, nil
}

// jobDiff compares the job as registered (nil when new) with the job as
// planned.
func jobDiff(old, new *structs.Job, groups map[string]*structs.GroupPlanUpdates) *JobDiff {
	d := &JobDiff{Type: diffNone, Fields: []*FieldDiff{}}
	if new != nil {
		d.ID = new.ID
	}
	switch {
	case new == nil:
		return d
	case old == nil:
		d.Type = diffAdded
	case old.Stop || old.Type != new.Type || old.Name != new.Name || !reflect.DeepEqual(old.TaskGroups, new.TaskGroups):
		d.Type = diffEdited
	}
	if old != nil && old.Type != new.Type {
		d.Fields = append(d.Fields, &FieldDiff{Type: diffEdited, Name: "Type", Old: old.Type, New: new.Type})
	}
	if old != nil && old.Stop {
		d.Fields = append(d.Fields, &FieldDiff{Type: diffEdited, Name: "Stop", Old: "true", New: "false"})
	}
	names := map[string]bool{}
	for _, tg := range new.TaskGroups {
		names[tg.Name] = true
	}
	if old != nil {
		for _, tg := range old.TaskGroups {
			names[tg.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		var before *structs.TaskGroup
		if old != nil {
			before = old.LookupTaskGroup(name)
		}
		d.TaskGroups = append(d.TaskGroups, groupDiff(name, before, new.LookupTaskGroup(name), groups[name]))
	}
	return d
}

func groupDiff(name string, old, new *structs.TaskGroup, g *structs.GroupPlanUpdates) *TaskGroupDiff {
	d := &TaskGroupDiff{Type: diffNone, Name: name, Fields: []*FieldDiff{}, Updates: map[string]uint64{}}
	if g != nil {
		for k, n := range map[string]int{"create": g.Place, "destroy": g.Stop, "ignore": g.Ignore} {
			if n > 0 {
				d.Updates[k] = uint64(n)
			}
		}
	}
	switch {
	case old == nil && new == nil:
		return d
	case old == nil:
		d.Type = diffAdded
		d.Fields = append(d.Fields, &FieldDiff{Type: diffAdded, Name: "Count", New: strconv.Itoa(new.Count)})
	case new == nil:
		d.Type = diffDeleted
		d.Fields = append(d.Fields, &FieldDiff{Type: diffDeleted, Name: "Count", Old: strconv.Itoa(old.Count)})
	case !reflect.DeepEqual(old, new):
		d.Type = diffEdited
		if old.Count != new.Count {
			d.Fields = append(d.Fields, &FieldDiff{Type: diffEdited, Name: "Count",
				Old: strconv.Itoa(old.Count), New: strconv.Itoa(new.Count)})
		}
	}
	tasks := map[string][2]*structs.Task{}
	if old != nil {
		for _, t := range old.Tasks {
			p := tasks[t.Name]
			p[0] = t
			tasks[t.Name] = p
		}
	}
	if new != nil {
		for _, t := range new.Tasks {
			p := tasks[t.Name]
			p[1] = t
			tasks[t.Name] = p
		}
	}
	for _, tn := range slices.Sorted(maps.Keys(tasks)) {
		p := tasks[tn]
		td := &TaskDiff{Type: diffNone, Name: tn, Fields: []*FieldDiff{}}
		switch {
		case p[0] == nil:
			td.Type = diffAdded
		case p[1] == nil:
			td.Type = diffDeleted
		case !reflect.DeepEqual(p[0], p[1]):
			td.Type = diffEdited
			td.Annotations = []string{"forces create/destroy update"}
		}
		d.Tasks = append(d.Tasks, td)
	}
	return d
}

// JobValidateResponse is Nomad's answer to a validation.
type JobValidateResponse struct {
	DriverConfigValidated bool
	ValidationErrors      []string
	Error                 string
	Warnings              string
}

// jobValidate serves PUT and POST /v1/validate/job: the job's validation,
// every problem listed, without registering it. A job that does not decode
// (or that asks for what volplane refuses) is a 400, as a registration
// would be; a job that decodes but breaks a rule is a 200 listing the
// rules, as Nomad's. Nomad's takes read-job in the job's namespace.
func (h *handler) jobValidate(w http.ResponseWriter, r *http.Request) (any, error) {
	var wr structs.WriteRequest
	job, _, err := h.decodeJob(w, r, &wr)
	if err != nil {
		return nil, err
	}
	if h.authorize != nil {
		if err := h.authorize("Job.Validate", wr.AuthToken, job.Namespace); err != nil {
			return nil, err
		}
	}
	out := &JobValidateResponse{DriverConfigValidated: true, ValidationErrors: []string{}}
	if err := job.Validate(); err != nil {
		out.Error = structs.MessageOf(err)
		out.ValidationErrors = append(out.ValidationErrors, out.Error)
	}
	return out, nil
}
