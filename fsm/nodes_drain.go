package fsm

import (
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.NodeUpdateDrainRequestType, applyNodeUpdateDrain)
	register(structs.NodeUpdateEligibilityRequestType, applyNodeUpdateEligibility)
	register(structs.AllocDrainStopRequestType, applyAllocDrainStop)
}

func applyNodeUpdateDrain(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeUpdateDrainRequest) error {
	return st.UpdateNodeDrain(index, req)
}

func applyNodeUpdateEligibility(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeUpdateEligibilityRequest) error {
	return st.UpdateNodeEligibility(index, req)
}

func applyAllocDrainStop(_ *FSM, st *state.StateStore, index uint64, req *structs.AllocDrainStopRequest) error {
	return st.DrainStopAllocs(index, req)
}
