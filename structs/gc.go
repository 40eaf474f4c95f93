package structs

import "time"

// DefaultNodeGCThreshold is how long a node stays down before the node GC
// removes it (server.node_gc_threshold), as Nomad's.
const DefaultNodeGCThreshold = 24 * time.Hour

// NodeGCRequest removes nodes the leader found down for at least Threshold
// at Timestamp (its clock), with no claim on them left. The FSM checks
// every node again against the state as it is then, and removes nodes and
// their plugin instances all or nothing.
type NodeGCRequest struct {
	NodeIDs   []string
	Threshold time.Duration
	Timestamp int64
	WriteRequest
}

// CSIPluginGCRequest removes plugin rows that no node runs and no volume
// names any more. The FSM skips a plugin that is gone already and refuses
// one that is not empty.
type CSIPluginGCRequest struct {
	PluginIDs []string
	WriteRequest
}

// GCRequest asks the leader to run the garbage collection now.
type GCRequest struct {
	WriteRequest
}

// GCResponse says what a garbage collection removed, and what it had to
// leave.
type GCResponse struct {
	// Nodes and Plugins are the IDs removed.
	Nodes   []string
	Plugins []string
	// Waiting are down nodes past the threshold that were kept because
	// claims on them are still being released, each with why.
	Waiting []string
	WriteMeta
}
