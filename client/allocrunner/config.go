// Package allocrunner runs the allocations the servers place on a client
// node, as Nomad's client/allocrunner does: for each one it claims, stages
// and publishes its CSI volumes, starts and supervises its tasks (a task
// with a csi_plugin block is a CSI plugin, supervised and registered with
// the node's plugin manager: see plugin_supervisor.go), reports every
// change to the servers and keeps its progress in the client's state file,
// so that a restarted agent takes its allocations over where they were.
//
// The package knows the rest of the agent only through Config: the calls
// it makes on the servers (Servers), the node's CSI plugins (Plugins), the
// per-volume lock it shares with the servers' node detaches (VolumeLocker),
// the local state (state.DB, state.UsageRegistry, state.CSIPaths), and the
// node's identity and timings.
//
// Its API is the Manager:
//
//   - New and Start build it from the state file's records and set it going;
//   - CheckDetach and VolumeDetached let the servers' node detach (and the
//     client's own, for orphaned volumes) ask whether a volume may be
//     released and tell that it was;
//   - StopAll and Running serve an agent that exits for good;
//   - AllocIDs, AllocState, TaskLog and Reconciled tell what it runs.
package allocrunner

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
)

// Servers are the calls the runners make on the servers
// (serverconn.Conn has them).
type Servers interface {
	NodeGetClientAllocs(*structs.NodeClientAllocsRequest, *structs.NodeClientAllocsResponse) error
	NodeUpdateAlloc(*structs.NodeUpdateAllocRequest, *structs.GenericResponse) error
	CSIVolumeClaim(*structs.CSIVolumeClaimRequest, *structs.CSIVolumeClaimResponse) error
}

// Plugins is the node's CSI plugin manager (csimanager.Manager has it):
// the node plugin a volume is staged and published with, and the dynamic
// registry the plugin supervisor puts its plugin tasks' instances in.
type Plugins interface {
	Node(pluginID string) (*csi.Client, *structs.CSIInfo, error)
	Register(key string, p csimanager.PluginConfig, onHealth csimanager.HealthChange) error
	Deregister(key string)
	MarkUnhealthy(key, reason string)
}

// VolumeLocker serialises, per volume, a runner's stage and publish with
// the servers' node detaches, so that a detach never unstages a volume
// another allocation is being published from. The runner and the detach
// must name a volume alike.
type VolumeLocker interface {
	LockVolume(ctx context.Context, pluginID, namespace, volumeID string) (unlock func(), err error)
}

// Config is what a Manager needs from the agent. Every field is required
// unless its comment says otherwise.
type Config struct {
	Logger hclog.Logger
	// DataDir is the client's data dir: the allocations' directories and
	// the plugin tasks' sockets are under it.
	DataDir string
	// NodeID and SecretID are the node's identity; the servers
	// authenticate the node's calls by SecretID.
	NodeID   string
	SecretID string
	NodeName string
	// Registered is closed once the servers accepted the node: the calls
	// that need its secret wait for it.
	Registered <-chan struct{}

	Servers Servers
	Plugins Plugins
	Locks   VolumeLocker
	// State is the client's state file, Restored what it held when it was
	// opened (state.OpenDB); the caller closes State once the Manager's
	// goroutines returned.
	State    *state.DB
	Restored map[string]*state.AllocBundle
	// Usage records which allocation has which volume published on the
	// node; Paths lays out the staging and target paths.
	Usage *state.UsageRegistry
	Paths state.CSIPaths

	// GoFunc runs a goroutine the agent waits for on shutdown, and reports
	// whether it did (false once the agent is shutting down).
	GoFunc func(func()) bool
	// AllocsChanged, when set, is called after each answer of the
	// allocation query and each end of an allocation: the client sweeps
	// the volumes the servers released without the node step then.
	AllocsChanged func()

	Timing
	// ServerRetryMin and ServerRetryMax bound the pause between failed
	// rounds of the allocation query and of the status reports.
	ServerRetryMin time.Duration
	ServerRetryMax time.Duration
}

// Timing are the runners' waits, pauses and bounds: the client agent's
// settings.
type Timing struct {
	// AllocWatchWait is how long one blocking query for the node's
	// allocations waits for a change before it is asked again.
	AllocWatchWait time.Duration
	// ClaimBackoffMin and ClaimBackoffMax bound the pause between two
	// attempts of a volume claim (or node stage or publish) that failed in
	// a way that may pass: it starts at Min and doubles, with jitter, up to
	// Max. The allocation waits as long as it takes, until it is stopped.
	ClaimBackoffMin time.Duration
	ClaimBackoffMax time.Duration
	// TaskKillTimeout is how long a stopped task has between SIGTERM and
	// SIGKILL.
	TaskKillTimeout time.Duration
	// TaskPollInterval is how often the processes of running tasks are
	// checked for their exit.
	TaskPollInterval time.Duration
	// TaskRestartDelay is the pause before the first restart of a plugin
	// task that died (Nomad's restart delay); it doubles with each restart
	// within the restart policy's interval.
	TaskRestartDelay time.Duration
	// FinishedAllocsKept is how many finished allocations (whose volumes
	// were released) the client keeps, with their task logs, the newest
	// first; it forgets the others, and any the servers no longer list.
	FinishedAllocsKept int
}
