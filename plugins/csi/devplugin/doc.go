// Package devplugin is volplane's own development CSI plugin: a real gRPC
// server (Identity, Controller, GroupController and Node services) on a unix
// socket that keeps its storage in a directory and enforces the CSI spec's
// rules, so that `volplane agent -dev` and the tests of other packages can
// drive a plugin that behaves like a storage system instead of a mock. It
// passes the csi-test sanity suite.
//
// It implements every controller and node capability of CSI 1.13 that a
// directory can honestly provide: volumes (mount access type only; block
// is refused), publication, listing with published nodes, capacity,
// snapshots, group snapshots and clones (copies of the data directory),
// expansion (online; the controller grows the volume and each node where
// it is staged or published sees the new size once NodeExpandVolume ran
// there), modification (the mutable parameter "tier", standard or fast,
// recorded only), volume statistics and health, and the
// SINGLE_NODE_SINGLE_WRITER and SINGLE_NODE_MULTI_WRITER access modes. A
// volume's context is its creation parameters. It does not claim
// SNAPSHOT_ACCESSIBILITY_CONSTRAINTS: a snapshot is a copy in the shared
// state directory, usable from every topology. Any capability can be
// switched off per instance (Config.Disable, see disable.go), so that a CO's
// tests cover plugins without it, node plugins without STAGE_UNSTAGE_VOLUME
// among them.
//
// # Instances sharing a state directory
//
// Every instance is started with a state directory and a node ID. Instances
// started with the same state directory share one storage system, as the
// controller and node plugins of a real one do: a volume created through one
// instance can be controller-published through another and staged through a
// third. Each instance is a node of that storage system under its own node ID
// (NodeGetInfo reports it); ControllerPublishVolume accepts only node IDs of
// instances that have been started on the state directory (others are
// NOT_FOUND, as the spec asks for a node that does not exist). With
// Config.CreateOnDemand, ControllerPublishVolume creates a volume it does not
// know under the requested ID, for volumes registered by hand.
//
// An instance with a Topology advertises VOLUME_ACCESSIBILITY_CONSTRAINTS. A
// new volume is placed in the first preferred (then requisite) topology that
// some started node is in (RESOURCE_EXHAUSTED when none is), or in the
// creating instance's topology when the request has no requirements, and is
// controller-published only to nodes in that topology (FAILED_PRECONDITION).
//
// # The state directory
//
//	state.json   volumes, snapshots, nodes, controller publications per node,
//	             and each node's stagings and publications
//	state.lock   flock(2) target: every read holds a shared lock, every
//	             change an exclusive one, across processes
//	volumes/<id>/    a volume's data
//	snapshots/<id>/  a snapshot's copy of its source volume's data
//	calls.log    one JSON line per RPC (see Call and ReadCallLog)
//	faults.json  faults to inject (see below)
//
// state.json is rewritten whole on every change (written to a temporary file
// in the same directory, then renamed over the old one), so a reader never
// sees half a file and a killed process never leaves one. It is not fsynced:
// it survives the death of a process, not of the machine. A state file that
// cannot be decoded is reported as an error naming the file, never repaired.
// Secrets are never stored; mount flags only as a hash, so that a repeated
// call with different flags is still told apart.
//
// # How a volume reaches a workload
//
// NodeStageVolume records the staging (the CO creates the staging
// directory; the plugin writes nothing in it, so the CO can remove it after
// NodeUnstageVolume). NodePublishVolume creates target_path itself (the CO
// creates only its parent) as a symbolic link to the volume's data
// directory, so a file a task writes at target/x lands in
// state-dir/volumes/<id>/x and every later publication of the volume, on
// any node of the same state directory, sees it. NodeUnpublishVolume removes
// the link. A symbolic link needs neither root nor CAP_SYS_ADMIN and leaves
// nothing mounted behind when a test dies, which a bind mount would; the
// price is that a read-only publication is recorded (and checked against the
// controller publication) but not enforced by the file system.
//
// # Rules enforced
//
// Beyond argument checking: ControllerPublishVolume before NodeStageVolume
// before NodePublishVolume on the same node (FAILED_PRECONDITION otherwise),
// with the publish_context the controller returned; NodeUnstageVolume only
// once no publication from that staging path is left (FAILED_PRECONDITION);
// single-node access modes published to one node at a time and, for
// MULTI_NODE_SINGLE_WRITER, one writable publication at a time
// (FAILED_PRECONDITION); a second NodePublishVolume of a volume on one node
// at another target only for MULTI_NODE_* and SINGLE_NODE_MULTI_WRITER;
// max_volumes_per_node (RESOURCE_EXHAUSTED); DeleteVolume refused while
// controller-published (FAILED_PRECONDITION); identical repeats succeed with
// the same answer and incompatible ones get ALREADY_EXISTS.
//
// # Faults
//
// faults.json is read on every call, so a test in another process can
// change it at any time (SetFault and ClearFaults write it under the lock).
// It maps a method name (as in the CSI service, e.g. "NodeStageVolume") to a
// fault:
//
//	{
//	  "NodeStageVolume":         {"code": "UNAVAILABLE", "times": 2},
//	  "ControllerPublishVolume": {"code": "INTERNAL", "message": "disk on fire"},
//	  "NodeUnpublishVolume":     {"hang": true},
//	  "Probe":                   {"not_ready": true}
//	}
//
// code is a gRPC code by its spec name ("FAILED_PRECONDITION"), its Go name
// ("FailedPrecondition") or its number; the call fails with it before doing
// anything. hang blocks the call until its context ends (or the plugin
// stops) and then fails with the context's error. not_ready, for Probe only,
// answers ready=false. times > 0 applies the fault to that many calls (of any
// instance sharing the state directory) and then removes it; 0 or absent
// means every call. A call that met a fault is still written to calls.log,
// marked "injected".
package devplugin
