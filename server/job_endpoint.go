package server

import (
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/acl"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Job is the endpoint for registering, stopping and reading jobs.
type Job struct {
	srv    *Server
	logger hclog.Logger
}

// admit returns a copy of a job sent for registration (or a plan of it),
// in its namespace (the request's when the job names none), canonicalized,
// validated with every problem in one error, within the cluster's group
// count limit, and with the server-owned fields cleared: those never come
// from the caller.
func (e *Job) admit(sent *structs.Job, requestNamespace string) (*structs.Job, error) {
	if sent == nil {
		return nil, structs.ErrInvalid("missing job")
	}
	job := sent.Copy()
	if job.Namespace == "" {
		job.Namespace = requestNamespace
	}
	job.Canonicalize()
	if err := job.Validate(); err != nil {
		return nil, err
	}
	for _, tg := range job.TaskGroups {
		if tg.Count > e.srv.config.MaxGroupCount {
			return nil, structs.ErrInvalid("job %q validation failed: group %q: count %d is over this cluster's limit of %d (server { job_max_group_count })",
				job.ID, tg.Name, tg.Count, e.srv.config.MaxGroupCount)
		}
	}
	job.ClearServerFields()
	return job, nil
}

// Register registers a job or a new version of it. The job is validated
// here, every problem in one error; placing it is the placer's work, which
// a registration wakes.
func (e *Job) Register(args *structs.JobRegisterRequest, reply *structs.JobRegisterResponse) error {
	if done, err := e.srv.forward("Job.Register", args, args, reply); done {
		return err
	}
	job, err := e.admit(args.Job, args.RequestNamespace())
	if err != nil {
		return err
	}
	existing, err := e.srv.State().JobByID(nil, job.Namespace, job.ID)
	if err != nil {
		return err
	}
	if err := e.srv.sealJob(job, existing); err != nil {
		return err
	}
	args.Job = job
	args.Timestamp = structs.NowNano()
	_, index, err := e.srv.raftApply(structs.JobRegisterRequestType, args)
	if err != nil {
		return err
	}
	e.logger.Debug("job registered", "job_id", job.ID, "namespace", job.Namespace)
	reply.Warnings = job.Warnings()
	reply.Index = index
	// The leader has applied the write: the job's modify index says
	// whether it changed anything (the evaluation the HTTP API derives).
	if stored, err := e.srv.State().JobByID(nil, job.Namespace, job.ID); err == nil && stored != nil {
		reply.JobModifyIndex = stored.JobModifyIndex
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// Deregister stops a job, or with Purge removes it; its allocations stop.
func (e *Job) Deregister(args *structs.JobDeregisterRequest, reply *structs.JobDeregisterResponse) error {
	if done, err := e.srv.forward("Job.Deregister", args, args, reply); done {
		return err
	}
	if args.JobID == "" {
		return structs.ErrInvalid("missing job ID")
	}
	job, err := e.srv.State().JobByID(nil, args.RequestNamespace(), args.JobID)
	if err != nil {
		return err
	}
	if job == nil {
		return structs.ErrNotFound("job %q not found", args.JobID)
	}
	args.Timestamp = structs.NowNano()
	_, index, err := e.srv.raftApply(structs.JobDeregisterRequestType, args)
	if err != nil {
		return err
	}
	reply.Index = index
	if !args.Purge {
		reply.JobModifyIndex = job.JobModifyIndex
	}
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// GetJob returns one job; Job is nil when it is unknown.
func (e *Job) GetJob(args *structs.JobSpecificRequest, reply *structs.SingleJobResponse) error {
	if done, err := e.srv.forward("Job.GetJob", args, args, reply); done {
		return err
	}
	if args.JobID == "" {
		return structs.ErrInvalid("missing job ID")
	}
	ns := args.RequestNamespace()
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		j, err := st.JobByID(ws, ns, args.JobID)
		if err != nil {
			return 0, err
		}
		reply.Job = j
		if j == nil {
			return st.IndexWatch(ws, state.TableJobs)
		}
		return j.ModifyIndex, nil
	})
}

// List returns the jobs of a namespace, by ID prefix; namespace "*" lists
// those of every namespace the caller may list jobs in, as Nomad's.
func (e *Job) List(args *structs.JobListRequest, reply *structs.JobListResponse) error {
	if done, err := e.srv.forward("Job.List", args, args, reply); done {
		return err
	}
	ns := args.RequestNamespace()
	allow, err := e.srv.namespacesShown(args, ns, acl.NamespaceCapabilityListJobs, acl.NamespaceCapabilityReadJob)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		var iter memdb.ResultIterator
		var err error
		if ns == acl.AllNamespaces {
			iter, err = st.Jobs(ws)
		} else {
			iter, err = st.JobsByIDPrefix(ws, ns, args.Prefix)
		}
		if err != nil {
			return 0, err
		}
		reply.Jobs = []*structs.JobListStub{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			j := raw.(*structs.Job)
			if ns == acl.AllNamespaces && (!strings.HasPrefix(j.ID, args.Prefix) || (allow != nil && !allow(j.Namespace))) {
				continue
			}
			reply.Jobs = append(reply.Jobs, j.Stub())
		}
		return st.Index(state.TableJobs)
	})
}

// Allocations returns a job's allocations.
func (e *Job) Allocations(args *structs.JobSpecificRequest, reply *structs.JobAllocationsResponse) error {
	if done, err := e.srv.forward("Job.Allocations", args, args, reply); done {
		return err
	}
	if args.JobID == "" {
		return structs.ErrInvalid("missing job ID")
	}
	ns := args.RequestNamespace()
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		allocs, err := st.AllocsByJob(ws, ns, args.JobID)
		if err != nil {
			return 0, err
		}
		if allocs == nil {
			allocs = []*structs.Allocation{}
		}
		reply.Allocations = allocs
		return st.Index(state.TableAllocs)
	})
}

// Alloc is the endpoint for reading allocations.
type Alloc struct {
	srv *Server
}

// GetAlloc returns one allocation; Alloc is nil when it is unknown.
func (e *Alloc) GetAlloc(args *structs.AllocSpecificRequest, reply *structs.SingleAllocResponse) error {
	if done, err := e.srv.forward("Alloc.GetAlloc", args, args, reply); done {
		return err
	}
	if args.AllocID == "" {
		return structs.ErrInvalid("missing allocation ID")
	}
	allow, err := e.srv.namespacesShown(args, acl.AllNamespaces, acl.NamespaceCapabilityReadJob)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		a, err := st.AllocByID(ws, args.AllocID)
		if err != nil {
			return 0, err
		}
		if a != nil && allow != nil && !allow(a.Namespace) {
			a = nil
		}
		reply.Alloc = a
		if a == nil {
			return st.IndexWatch(ws, state.TableAllocs)
		}
		return a.ModifyIndex, nil
	})
}

// List returns every allocation whose ID starts with the prefix.
func (e *Alloc) List(args *structs.AllocListRequest, reply *structs.AllocListResponse) error {
	if done, err := e.srv.forward("Alloc.List", args, args, reply); done {
		return err
	}
	allow, err := e.srv.namespacesShown(args, acl.AllNamespaces, acl.NamespaceCapabilityReadJob)
	if err != nil {
		return err
	}
	return e.srv.blockingQuery(&args.QueryOptions, &reply.QueryMeta, func(ws memdb.WatchSet, st *state.StateStore) (uint64, error) {
		iter, err := st.Allocs(ws)
		if err != nil {
			return 0, err
		}
		reply.Allocations = []*structs.Allocation{}
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			if a := raw.(*structs.Allocation); strings.HasPrefix(a.ID, args.Prefix) && (allow == nil || allow(a.Namespace)) {
				reply.Allocations = append(reply.Allocations, a)
			}
		}
		return st.Index(state.TableAllocs)
	})
}
