package fsm

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.JobRegisterRequestType, applyJobRegister)
	register(structs.JobDeregisterRequestType, applyJobDeregister)
	register(structs.PlanApplyRequestType, applyPlan)

	registerRecord(structs.JobSnapshot,
		func(snap *state.StateSnapshot) (memdb.ResultIterator, error) { return snap.Jobs(nil) },
		(*state.StateRestore).JobRestore)
}

func applyJobRegister(_ *FSM, st *state.StateStore, index uint64, req *structs.JobRegisterRequest) error {
	if req.Job == nil {
		return structs.ErrInvalid("job register: missing job")
	}
	return st.UpsertJob(index, req.Timestamp, req.Job)
}

func applyJobDeregister(_ *FSM, st *state.StateStore, index uint64, req *structs.JobDeregisterRequest) error {
	return st.DeregisterJob(index, req.Timestamp, req.RequestNamespace(), req.JobID, req.Purge)
}

// applyPlan stamps the leader's time on what the plan changes.
func applyPlan(_ *FSM, st *state.StateStore, index uint64, req *structs.PlanApplyRequest) error {
	for _, a := range req.Allocs {
		if a == nil {
			return structs.ErrInvalid("plan for job %q: empty allocation", req.JobID)
		}
		a.ModifyTime = req.Timestamp
		if a.CreateTime == 0 {
			a.CreateTime = req.Timestamp
		}
	}
	for name, p := range req.Placement {
		if p == nil {
			return structs.ErrInvalid("plan for job %q: empty placement of group %q", req.JobID, name)
		}
		p.UpdatedAt = req.Timestamp
	}
	return st.ApplyPlan(index, req)
}
