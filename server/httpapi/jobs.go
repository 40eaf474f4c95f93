package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/volplane/volplane/structs"
)

// jobRegisterBody is the body of PUT /v1/jobs and PUT /v1/job/:id: Nomad's
// api.JobRegisterRequest, whose job may be volplane's structs.Job or
// Nomad's api.Job (see wireJob). It is decoded strictly: an unknown field
// is a mistake worth a 400. The RPC request's own fields (Timestamp,
// AuthToken, Forwarded) are not accepted at all: they are the servers' to
// set.
type jobRegisterBody struct {
	Job *wireJob

	// Submission is the job's source as Nomad's CLI read it; Nomad keeps
	// it for job inspect. volplane does not: accepted and ignored.
	Submission json.RawMessage
	// EnforceIndex registers only when the job's modify index is
	// JobModifyIndex (0: only when the job does not exist yet), as Nomad's
	// job run -check-index.
	EnforceIndex   bool
	JobModifyIndex uint64
	// PreserveCounts keeps the counts of the groups the job has already.
	PreserveCounts bool
	// Ignored: volplane has no Sentinel, reserves no resources and has no
	// evaluation queue to prioritise.
	PolicyOverride    bool
	PreserveResources bool
	EvalPriority      int

	// Diff asks a plan for the job's diff (PUT /v1/job/:id/plan only).
	Diff bool

	// Region and Namespace stand in for ?region and ?namespace; the token
	// travels in the X-Nomad-Token header.
	Region    string
	Namespace string
	SecretID  string
}

// registerEnforceIndexPrefix starts the error of a refused EnforceIndex
// registration; Nomad's CLI looks for it (api.RegisterEnforceIndexErrPrefix).
const registerEnforceIndexPrefix = "Enforcing job modify index"

// JobWriteResponse is the body of a successful job register or
// deregister, as Nomad's JobRegisterResponse and JobDeregisterResponse.
// Warnings is one string, one warning per line (Nomad's type).
type JobWriteResponse struct {
	// EvalID is the evaluation of the write (see Evaluation); empty for a
	// purged job, which has none left to read.
	EvalID          string
	EvalCreateIndex uint64
	JobModifyIndex  uint64
	Warnings        string `json:",omitempty"`
	// Index is the Raft index of the write, also sent as X-Nomad-Index.
	Index uint64
}

// decodeJob reads a job register (or plan, or validate) body and returns
// the job volplane runs, its namespace filled in.
func (h *handler) decodeJob(w http.ResponseWriter, r *http.Request, wr *structs.WriteRequest) (*structs.Job, *jobRegisterBody, error) {
	if _, err := parseWriteRequest(r, wr); err != nil {
		return nil, nil, err
	}
	var body jobRegisterBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, nil, err
	}
	if body.Job == nil {
		return nil, nil, structs.ErrInvalid(`the body has no job: send {"Job":{...}}`)
	}
	job, err := body.Job.toStructs()
	if err != nil {
		return nil, nil, err
	}
	if pathID := r.PathValue("id"); pathID != "" {
		switch job.ID {
		case "":
			job.ID = pathID
		case pathID:
		default:
			// Most likely a body meant for another job; registering it
			// under either ID would surprise someone.
			return nil, nil, structs.ErrInvalid("job ID %q in the body does not match %q in the path", job.ID, pathID)
		}
	}
	if wr.Namespace == "" {
		wr.Namespace = body.Namespace
	}
	if wr.Region == "" {
		wr.Region = body.Region
	}
	job.ClearServerFields()
	// The job's own namespace wins, then ?namespace, then the default; the
	// request is then made in the job's namespace.
	if job.Namespace == "" {
		job.Namespace = wr.RequestNamespace()
	}
	job.Canonicalize()
	wr.Namespace = job.Namespace
	return job, &body, nil
}

// jobRegister serves PUT and POST /v1/jobs, and /v1/job/:id, whose ID the
// job's must match (or fill in).
func (h *handler) jobRegister(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.JobRegisterRequest
	job, body, err := h.decodeJob(w, r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	args.Job = job
	if body.EnforceIndex || body.PreserveCounts {
		// Read from the leader, which the write goes to. The check is not
		// atomic with the write: it guards against a stale specification,
		// as Nomad's, not against a race with another registration.
		existing, err := h.readJob(args.AuthToken, job.Namespace, job.ID, false)
		if err != nil {
			return nil, err
		}
		if body.EnforceIndex {
			var have uint64
			if existing != nil {
				have = existing.JobModifyIndex
			}
			if have != body.JobModifyIndex {
				return nil, structs.ErrConflict("%s %d: job exists with conflicting job modify index: %d",
					registerEnforceIndexPrefix, body.JobModifyIndex, have)
			}
		}
		if body.PreserveCounts && existing != nil {
			for _, tg := range job.TaskGroups {
				if old := existing.LookupTaskGroup(tg.Name); old != nil {
					tg.Count = old.Count
				}
			}
		}
	}

	var reply structs.JobRegisterResponse
	if err := h.backend.RPC("Job.Register", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	// The evaluation is the job's as written (see Evaluation).
	return &JobWriteResponse{Warnings: strings.Join(reply.Warnings, "\n"), Index: reply.Index,
		EvalID:          evalID(job.Namespace, job.ID, reply.JobModifyIndex, evalTriggerJobRegister),
		EvalCreateIndex: reply.JobModifyIndex, JobModifyIndex: reply.JobModifyIndex}, nil
}

// readJob reads one job (nil when unknown).
func (h *handler) readJob(token, namespace, id string, stale bool) (*structs.Job, error) {
	args := structs.JobSpecificRequest{JobID: id}
	args.AuthToken, args.Namespace, args.AllowStale = token, namespace, stale
	var reply structs.SingleJobResponse
	if err := h.backend.RPC("Job.GetJob", &args, &reply); err != nil {
		return nil, err
	}
	return reply.Job, nil
}

// jobDeregister serves DELETE /v1/job/:id[?purge=true].
func (h *handler) jobDeregister(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.JobDeregisterRequest{JobID: r.PathValue("id")}
	v, err := parseWriteRequest(r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	if args.Purge, err = optionalBool(v, "purge", false); err != nil {
		return nil, err
	}
	var reply structs.JobDeregisterResponse
	if err := h.backend.RPC("Job.Deregister", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	out := &JobWriteResponse{Index: reply.Index}
	// A purged job has no evaluation left to read; a stopped one has the
	// stop's (see Evaluation).
	if !args.Purge {
		out.EvalID = evalID(args.RequestNamespace(), args.JobID, reply.JobModifyIndex, evalTriggerJobDeregister)
		out.EvalCreateIndex, out.JobModifyIndex = reply.Index, reply.JobModifyIndex
	}
	return out, nil
}

// jobList serves GET /v1/jobs[?prefix=]: a bare array of stubs, each with
// Nomad's JobSummary.
func (h *handler) jobList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.JobListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.JobListResponse
	if err := h.backend.RPC("Job.List", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	out := make([]*JobListStubView, 0, len(reply.Jobs))
	if len(reply.Jobs) == 0 {
		return out, nil
	}
	// One read of the allocations for every summary. A token that may list
	// jobs but not read them gets summaries without counts.
	allocs, _ := h.listAllocs(args.QueryOptions)
	byJob := map[string][]*structs.Allocation{}
	for _, a := range allocs {
		k := structs.JobKey(a.Namespace, a.JobID)
		byJob[k] = append(byJob[k], a)
	}
	for _, stub := range reply.Jobs {
		j := &structs.Job{ID: stub.ID, Namespace: stub.Namespace, CreateIndex: stub.CreateIndex, ModifyIndex: stub.ModifyIndex}
		out = append(out, &JobListStubView{JobListStub: stub, JobSummary: summarize(j, byJob[structs.JobKey(stub.Namespace, stub.ID)]),
			Priority: nomadDefaultPriority, Datacenters: []string{"*"}, NodePool: nomadDefaultNodePool})
	}
	return out, nil
}

// listAllocs reads every allocation the caller may see, with the read
// options of the request it serves (not its blocking ones).
func (h *handler) listAllocs(q structs.QueryOptions) ([]*structs.Allocation, error) {
	args := structs.AllocListRequest{QueryOptions: structs.QueryOptions{Region: q.Region, Namespace: q.Namespace,
		AuthToken: q.AuthToken, AllowStale: q.AllowStale}}
	var reply structs.AllocListResponse
	if err := h.backend.RPC("Alloc.List", &args, &reply); err != nil {
		return nil, err
	}
	return reply.Allocations, nil
}

// jobGet serves GET /v1/job/:id.
func (h *handler) jobGet(w http.ResponseWriter, r *http.Request) (any, error) {
	j, err := h.jobRead(w, r)
	if err != nil {
		return nil, err
	}
	return jobView(j, h.region()), nil
}

// jobRead reads the job of the path, with the request's query options,
// and sets the answer's headers; unknown is a 404.
func (h *handler) jobRead(w http.ResponseWriter, r *http.Request) (*structs.Job, error) {
	args := structs.JobSpecificRequest{JobID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleJobResponse
	if err := h.backend.RPC("Job.GetJob", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Job == nil {
		return nil, structs.ErrNotFound("job %q not found", args.JobID)
	}
	return reply.Job, nil
}

// jobAndAllocs reads the job of the path (blocking as the request asks)
// and then its allocations.
func (h *handler) jobAndAllocs(w http.ResponseWriter, r *http.Request) (*structs.Job, []*structs.Allocation, error) {
	j, err := h.jobRead(w, r)
	if err != nil {
		return nil, nil, err
	}
	allocs, err := h.readJobAllocs(r, j)
	return j, allocs, err
}

func (h *handler) readJobAllocs(r *http.Request, j *structs.Job) ([]*structs.Allocation, error) {
	args := structs.JobSpecificRequest{JobID: j.ID}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	args.Namespace, args.MinQueryIndex, args.MaxQueryTime = j.Namespace, 0, 0
	var reply structs.JobAllocationsResponse
	if err := h.backend.RPC("Job.Allocations", &args, &reply); err != nil {
		return nil, err
	}
	return reply.Allocations, nil
}

// jobSummary serves GET /v1/job/:id/summary: Nomad's JobSummary.
func (h *handler) jobSummary(w http.ResponseWriter, r *http.Request) (any, error) {
	j, allocs, err := h.jobAndAllocs(w, r)
	if err != nil {
		return nil, err
	}
	return summarize(j, allocs), nil
}

// jobEvaluations serves GET /v1/job/:id/evaluations: the job's derived
// evaluations (see jobEvals).
func (h *handler) jobEvaluations(w http.ResponseWriter, r *http.Request) (any, error) {
	j, err := h.jobRead(w, r)
	if err != nil {
		return nil, err
	}
	return jobEvals(j), nil
}

// jobDeployment serves GET /v1/job/:id/deployment: null, as Nomad's for a
// job without deployments; volplane has none (it replaces allocations of
// an old version without a rolling update).
func (h *handler) jobDeployment(w http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := h.jobRead(w, r); err != nil {
		return nil, err
	}
	return json.RawMessage("null"), nil
}

// jobDeployments serves GET /v1/job/:id/deployments: [], see jobDeployment.
func (h *handler) jobDeployments(w http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := h.jobRead(w, r); err != nil {
		return nil, err
	}
	return []struct{}{}, nil
}

// jobAllocations serves GET /v1/job/:id/allocations: a bare array, empty
// for a job without allocations (or unknown).
func (h *handler) jobAllocations(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.JobSpecificRequest{JobID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.JobAllocationsResponse
	if err := h.backend.RPC("Job.Allocations", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return allocViews(reply.Allocations), nil
}

// nodeAllocations serves GET /v1/node/:id/allocations: a bare array,
// empty for a node without allocations (or unknown), as Nomad's.
func (h *handler) nodeAllocations(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NodeSpecificRequest{NodeID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.AllocListResponse
	if err := h.backend.RPC("Node.GetAllocs", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return allocViews(reply.Allocations), nil
}

// allocList serves GET /v1/allocations[?prefix=]: a bare array.
func (h *handler) allocList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.AllocListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.AllocListResponse
	if err := h.backend.RPC("Alloc.List", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return allocViews(reply.Allocations), nil
}

// allocViews are allocations as lists answer them: every field of
// structs.Allocation, with Nomad's task states and evaluation.
func allocViews(allocs []*structs.Allocation) []*AllocView {
	out := make([]*AllocView, 0, len(allocs))
	for _, a := range allocs {
		out = append(out, &AllocView{Allocation: a, TaskStates: taskStatesView(a.TaskStates), Resources: jobspecResources()})
	}
	return out
}

// allocGet serves GET /v1/allocation/:id: the allocation, with its job
// (as Nomad's answer has it) when the caller may read it.
func (h *handler) allocGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.AllocSpecificRequest{AllocID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleAllocResponse
	if err := h.backend.RPC("Alloc.GetAlloc", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	a := reply.Alloc
	if a == nil {
		return nil, structs.ErrNotFound("allocation %q not found", args.AllocID)
	}
	out := &AllocView{Allocation: a, TaskStates: taskStatesView(a.TaskStates), Metrics: &AllocationMetric{},
		Resources: jobspecResources()}
	if j, err := h.readJob(args.AuthToken, a.Namespace, a.JobID, true); err == nil && j != nil {
		out.Job = jobView(j, h.region())
		out.EvalID = jobEvalID(j)
	} else {
		out.Job = allocJob(a, h.region())
	}
	return out, nil
}
