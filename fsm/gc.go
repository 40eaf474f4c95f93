package fsm

import (
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

func init() {
	register(structs.NodeGCRequestType, applyNodeGC)
	register(structs.CSIPluginGCRequestType, applyCSIPluginGC)
}

// applyNodeGC removes nodes the leader collected; the store checks again
// that each is down beyond the threshold at the entry's time and has no
// claim left.
func applyNodeGC(_ *FSM, st *state.StateStore, index uint64, req *structs.NodeGCRequest) error {
	return st.GCNodes(index, req)
}

// applyCSIPluginGC removes plugin rows nothing runs or names.
func applyCSIPluginGC(_ *FSM, st *state.StateStore, index uint64, req *structs.CSIPluginGCRequest) error {
	return st.GCPlugins(index, req.PluginIDs)
}
