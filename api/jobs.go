package api

import (
	"errors"
	"net/http"

	"github.com/volplane/volplane/structs"
)

// Jobs is the job endpoints.
type Jobs struct{ c *Client }

// Jobs returns the job endpoints.
func (c *Client) Jobs() *Jobs { return &Jobs{c: c} }

// jobWriteResponse is the body of a job register or deregister answer.
// The servers send Warnings as one string, a warning per line, as Nomad's.
type jobWriteResponse struct {
	Warnings warningList
	// Index is the Raft index of the write, also sent as X-Nomad-Index.
	Index uint64
}

// Register creates or updates a job; the servers validate it and place its
// allocations. It returns the server's warnings.
func (j *Jobs) Register(job *structs.Job, w *WriteOptions) ([]string, *WriteMeta, error) {
	if job == nil {
		return nil, nil, errors.New("no job to register")
	}
	r := j.c.newWrite(http.MethodPut, "/v1/jobs", w)
	// Only Job: the server refuses unknown fields, and the RPC request's
	// other fields (timestamp, forwarding mark) are the servers' own.
	r.body = &struct{ Job *structs.Job }{Job: job}
	var out jobWriteResponse
	wm, err := j.c.write(r, &out)
	if err != nil {
		return nil, nil, err
	}
	return out.Warnings, wm, nil
}

// Deregister stops a job: its allocations are stopped and their volumes
// released. With purge, the job is also removed from the servers' state.
func (j *Jobs) Deregister(id string, purge bool, w *WriteOptions) (*WriteMeta, error) {
	r := j.c.newWrite(http.MethodDelete, "/v1/job/"+escape(id), w)
	if purge {
		r.params.Set("purge", "true")
	}
	return j.c.write(r, nil)
}

// Info reads one job, with its placement explanation. Mount flags of its
// volume requests come back redacted.
func (j *Jobs) Info(id string, q *QueryOptions) (*structs.Job, *QueryMeta, error) {
	return get[structs.Job](j.c, "/v1/job/"+escape(id), q)
}

// List returns the job stubs; q.Prefix filters them by ID.
func (j *Jobs) List(q *QueryOptions) ([]*structs.JobListStub, *QueryMeta, error) {
	return list[*structs.JobListStub](j.c, "/v1/jobs", q)
}

// Allocations returns the allocations of one job.
func (j *Jobs) Allocations(id string, q *QueryOptions) ([]*structs.Allocation, *QueryMeta, error) {
	return list[*structs.Allocation](j.c, "/v1/job/"+escape(id)+"/allocations", q)
}
