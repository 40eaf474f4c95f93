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

// evalFind reads every job the caller may list and derives their
// evaluations, calling fn with each job's until it returns true. volplane
// stores no evaluations (see Evaluation), so finding one by ID means
// deriving them; a cluster's job count bounds the work.
func (h *handler) evalFind(r *http.Request, endpoint string, fn func(j *structs.Job, evals []*Evaluation, allocs []*structs.Allocation) bool) error {
	if err := h.authorizeRoute(r, endpoint); err != nil {
		return err
	}
	var args structs.JobListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return err
	}
	// Evaluations are looked up by ID, whatever namespace they are in.
	if args.Namespace == "" {
		args.Namespace = "*"
	}
	args.Prefix, args.MinQueryIndex, args.MaxQueryTime = "", 0, 0
	var list structs.JobListResponse
	if err := h.backend.RPC("Job.List", &args, &list); err != nil {
		return err
	}
	allocs, _ := h.listAllocs(args.QueryOptions)
	for _, stub := range list.Jobs {
		j, err := h.readJob(args.AuthToken, stub.Namespace, stub.ID, args.AllowStale)
		if err != nil || j == nil {
			continue
		}
		if fn(j, jobEvals(j, allocs), allocs) {
			return nil
		}
	}
	return nil
}

// evalByID finds one derived evaluation, by its ID or a unique prefix of it.
func (h *handler) evalByID(r *http.Request, endpoint, id string) (*Evaluation, []*structs.Allocation, error) {
	if id == "" {
		return nil, nil, structs.ErrInvalid("missing evaluation ID")
	}
	var found *Evaluation
	var allocs []*structs.Allocation
	err := h.evalFind(r, endpoint, func(_ *structs.Job, evals []*Evaluation, all []*structs.Allocation) bool {
		for _, ev := range evals {
			if ev.ID == id {
				found, allocs = ev, all
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, nil, err
	}
	if found == nil {
		return nil, nil, structs.ErrNotFound("evaluation %q not found", id)
	}
	return found, allocs, nil
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
	ev, allocs, err := h.evalByID(r, "Eval.Allocations", r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	setLocalMeta(w, true)
	w.Header().Set(headerIndex, strconv.FormatUint(ev.ModifyIndex, 10))
	return evalAllocs(ev, allocs), nil
}

// evalList serves GET /v1/evaluations[?prefix=&job=&status=]: the derived
// evaluations of every job the caller may read.
func (h *handler) evalList(w http.ResponseWriter, r *http.Request) (any, error) {
	v, err := params(r)
	if err != nil {
		return nil, err
	}
	prefix, jobID, status := v.Get("prefix"), v.Get("job"), v.Get("status")
	out := []*Evaluation{}
	var index uint64
	err = h.evalFind(r, "Eval.List", func(j *structs.Job, evals []*Evaluation, _ []*structs.Allocation) bool {
		if jobID != "" && j.ID != jobID {
			return false
		}
		for _, ev := range evals {
			if strings.HasPrefix(ev.ID, prefix) && (status == "" || ev.Status == status) {
				out = append(out, ev)
				index = max(index, ev.ModifyIndex)
			}
		}
		return false
	})
	if err != nil {
		return nil, err
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
		failed := jobEvals(reply.Job, nil)
		planned := reply.Job.Copy()
		planned.Placement, planned.Stop = reply.Placement, false
		if planned.Placement != nil {
			failed = jobEvals(planned, nil)
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
