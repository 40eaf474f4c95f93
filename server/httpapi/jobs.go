package httpapi

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// jobRegisterBody is the body of PUT /v1/jobs and PUT /v1/job/:id. The job
// has structs.Job's fields, decoded strictly: an unknown field is a mistake
// worth a 400. The RPC request's own fields (Timestamp, AuthToken,
// Forwarded) are not accepted at all: they are the servers' to set.
type jobRegisterBody struct {
	Job *structs.Job
}

// JobWriteResponse is the body of a successful job register or deregister.
type JobWriteResponse struct {
	Warnings []string `json:",omitempty"`
	// Index is the Raft index of the write, also sent as X-Nomad-Index.
	Index uint64
}

// jobRegister serves PUT and POST /v1/jobs, and /v1/job/:id, whose ID the
// job's must match (or fill in).
func (h *handler) jobRegister(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.JobRegisterRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var body jobRegisterBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	job := body.Job
	if job == nil {
		return nil, structs.ErrInvalid(`the body has no job: send {"Job":{...}}`)
	}
	if pathID := r.PathValue("id"); pathID != "" {
		switch job.ID {
		case "":
			job.ID = pathID
		case pathID:
		default:
			// Most likely a body meant for another job; registering it
			// under either ID would surprise someone.
			return nil, structs.ErrInvalid("job ID %q in the body does not match %q in the path", job.ID, pathID)
		}
	}
	job.ClearServerFields()
	// The job's own namespace wins, then ?namespace, then the default; the
	// request is then made in the job's namespace.
	if job.Namespace == "" {
		job.Namespace = args.RequestNamespace()
	}
	job.Canonicalize()
	args.Namespace = job.Namespace
	args.Job = job

	var reply structs.JobRegisterResponse
	if err := h.backend.RPC("Job.Register", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &JobWriteResponse{Warnings: reply.Warnings, Index: reply.Index}, nil
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
	return &JobWriteResponse{Index: reply.Index}, nil
}

// jobList serves GET /v1/jobs[?prefix=]: a bare array of stubs.
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
	return orEmpty(reply.Jobs), nil
}

// jobGet serves GET /v1/job/:id.
func (h *handler) jobGet(w http.ResponseWriter, r *http.Request) (any, error) {
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
	return reply.Job.Sanitize(), nil
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
	return orEmpty(reply.Allocations), nil
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
	return orEmpty(reply.Allocations), nil
}

// allocGet serves GET /v1/allocation/:id.
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
	if reply.Alloc == nil {
		return nil, structs.ErrNotFound("allocation %q not found", args.AllocID)
	}
	return reply.Alloc, nil
}
