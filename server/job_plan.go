package server

import (
	"github.com/volplane/volplane/scheduler"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// Plan answers what registering the job would do now, without writing
// anything: the job is validated as Register does, then placed by
// scheduler.Place against the leader's current state, as the placer would
// place it once registered. It is a dry run of the placer, so what it says
// holds only until the state changes.
func (e *Job) Plan(args *structs.JobPlanRequest, reply *structs.JobPlanResponse) error {
	if done, err := e.srv.forward("Job.Plan", args, args, reply); done {
		return err
	}
	job, err := e.admit(args.Job, args.RequestNamespace())
	if err != nil {
		return err
	}
	snap, err := e.srv.State().Snapshot()
	if err != nil {
		return err
	}
	existing, err := snap.JobByID(nil, job.Namespace, job.ID)
	if err != nil {
		return err
	}
	if err := e.srv.sealJob(job, existing); err != nil {
		return err
	}
	version, changes := state.JobVersionAfter(existing, job)
	candidate := job
	if existing != nil {
		if !changes {
			candidate = existing.Copy()
		} else {
			candidate.CreateIndex, candidate.ModifyIndex = existing.CreateIndex, existing.ModifyIndex
			candidate.JobModifyIndex = existing.JobModifyIndex
			candidate.Status = existing.Status
		}
		reply.JobModifyIndex = existing.JobModifyIndex
	}
	candidate.Version = version
	if changes {
		// A new registration resets the explanation, so the plan explains
		// every group afresh, as the placer would after the write.
		candidate.Placement = nil
	}
	var nodes []*structs.Node
	iter, err := snap.Nodes(nil)
	if err != nil {
		return err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		nodes = append(nodes, raw.(*structs.Node))
	}
	allocs, err := snap.AllocsByJob(nil, job.Namespace, job.ID)
	if err != nil {
		return err
	}
	plan, err := scheduler.Place(snap, nodes, candidate, allocs, structs.NowNano(), e.srv.config.ReschedulePolicy, newAllocID)
	if err != nil {
		return structs.Wrap(err, "planning job %q", job.ID)
	}
	reply.Existing, reply.Job = existing, candidate
	reply.Groups = planUpdates(candidate, allocs, plan)
	reply.Placement = candidate.Placement
	if plan != nil {
		reply.Placement = plan.Placement
	}
	index, err := snap.Index(state.TableJobs)
	if err != nil {
		return err
	}
	reply.Index = index
	e.srv.setQueryMeta(&reply.QueryMeta)
	return nil
}

// planUpdates counts, per group, the allocations a plan places and stops,
// and the live ones it leaves as they are.
func planUpdates(job *structs.Job, existing []*structs.Allocation, plan *structs.PlanApplyRequest) map[string]*structs.GroupPlanUpdates {
	out := map[string]*structs.GroupPlanUpdates{}
	group := func(name string) *structs.GroupPlanUpdates {
		if out[name] == nil {
			out[name] = &structs.GroupPlanUpdates{}
		}
		return out[name]
	}
	for _, tg := range job.TaskGroups {
		group(tg.Name)
	}
	known := map[string]*structs.Allocation{}
	for _, a := range existing {
		known[a.ID] = a
	}
	touched := map[string]bool{}
	if plan != nil {
		for _, a := range plan.Allocs {
			touched[a.ID] = true
			switch old := known[a.ID]; {
			case old == nil:
				group(a.TaskGroup).Place++
			case a.ServerTerminal() && !old.ServerTerminal():
				group(a.TaskGroup).Stop++
			}
		}
	}
	for _, a := range existing {
		if !touched[a.ID] && !a.Terminal() {
			group(a.TaskGroup).Ignore++
		}
	}
	return out
}
