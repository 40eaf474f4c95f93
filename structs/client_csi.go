package structs

import "time"

// The ClientCSI calls are made by servers to client agents, over the
// yamux session the client holds with a server. The same method names exist
// on the servers, which pick the node (for controller calls, a healthy
// controller instance) and forward the call to whichever server holds that
// node's session.

// ClientCSITarget names the node a ClientCSI call runs on. Servers fill it
// in; once set, a server that receives the call only tries that node.
type ClientCSITarget struct {
	// NodeID is volplane's ID of the node whose agent serves the call.
	NodeID string
	// Timeout is how long the server making the call still waits for its
	// answer, less a margin for the answer's way back; the agent ends the
	// plugin call when it passes, and a server the call is forwarded to
	// waits no longer either. Zero leaves their own limits.
	Timeout time.Duration
}

// CallTimeout is the request's Timeout.
func (t *ClientCSITarget) CallTimeout() time.Duration { return t.Timeout }

// SetCallTimeout sets the request's Timeout.
func (t *ClientCSITarget) SetCallTimeout(d time.Duration) { t.Timeout = d }

// ClientCSIControllerAttachVolumeRequest asks a controller instance to
// ControllerPublish a volume to a node.
type ClientCSIControllerAttachVolumeRequest struct {
	PluginID string
	// VolumeID is the storage provider's ID (the volume's RemoteID).
	VolumeID string
	// ClientCSINodeID is the storage provider's ID of the node the volume
	// is published to (from that node plugin's NodeGetInfo).
	ClientCSINodeID string
	AccessMode      CSIVolumeAccessMode
	AttachmentMode  CSIVolumeAttachmentMode
	MountOptions    *CSIMountOptions
	ReadOnly        bool
	Secrets         CSISecrets
	VolumeContext   map[string]string
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerAttachVolumeResponse carries the publish context the
// node plugin needs.
type ClientCSIControllerAttachVolumeResponse struct {
	PublishContext map[string]string
}

// ClientCSIControllerDetachVolumeRequest asks a controller instance to
// ControllerUnpublish a volume from a node.
type ClientCSIControllerDetachVolumeRequest struct {
	PluginID        string
	VolumeID        string
	ClientCSINodeID string
	Secrets         CSISecrets
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerValidateVolumeRequest asks a controller instance to
// confirm that a volume supports the capabilities.
type ClientCSIControllerValidateVolumeRequest struct {
	PluginID      string
	VolumeID      string
	Capabilities  []*CSIVolumeCapability
	MountOptions  *CSIMountOptions
	Secrets       CSISecrets
	Parameters    map[string]string
	VolumeContext map[string]string
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerCreateVolumeRequest asks a controller instance to
// create a volume.
type ClientCSIControllerCreateVolumeRequest struct {
	PluginID            string
	Name                string
	Capabilities        []*CSIVolumeCapability
	MountOptions        *CSIMountOptions
	CapacityMin         int64
	CapacityMax         int64
	Parameters          map[string]string
	Secrets             CSISecrets
	RequestedTopologies *CSITopologyRequest
	SnapshotID, CloneID string
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerCreateVolumeResponse is what the plugin created.
type ClientCSIControllerCreateVolumeResponse struct {
	ExternalVolumeID string
	CapacityBytes    int64
	VolumeContext    map[string]string
	Topologies       []*CSITopology
}

// ClientCSIControllerDeleteVolumeRequest asks a controller instance to
// delete a volume; a volume already gone is not an error.
type ClientCSIControllerDeleteVolumeRequest struct {
	PluginID string
	VolumeID string
	Secrets  CSISecrets
	ClientCSITarget
	WriteRequest
}

// ClientCSINodeDetachVolumeRequest asks the node an allocation ran on to
// NodeUnpublish the allocation's volume, and NodeUnstage it when no other
// allocation on the node still uses it.
type ClientCSINodeDetachVolumeRequest struct {
	PluginID string
	// VolumeID is volplane's volume ID; ExternalID the provider's.
	VolumeID       string
	ExternalID     string
	AllocID        string
	AccessMode     CSIVolumeAccessMode
	AttachmentMode CSIVolumeAttachmentMode
	ReadOnly       bool
	ClientCSITarget
	WriteRequest
}

// ClientCSIEmptyResponse is the reply of calls that return nothing.
type ClientCSIEmptyResponse struct{}
