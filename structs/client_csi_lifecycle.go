package structs

// The ClientCSI calls beyond a claim's publish and release: snapshots,
// listing, and expansion (see client_csi.go for how they travel).

// ClientCSIControllerCreateSnapshotRequest asks a controller instance to
// snapshot a volume (CreateSnapshot).
type ClientCSIControllerCreateSnapshotRequest struct {
	PluginID string
	// VolumeID is the storage provider's ID of the source volume.
	VolumeID string
	// Name is the idempotency key of the snapshot.
	Name       string
	Secrets    CSISecrets
	Parameters map[string]string
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerCreateSnapshotResponse is the snapshot the plugin
// made; only its provider fields are set.
type ClientCSIControllerCreateSnapshotResponse struct {
	Snapshot *CSISnapshot
}

// ClientCSIControllerDeleteSnapshotRequest asks a controller instance to
// delete a snapshot (DeleteSnapshot); one already gone is deleted.
type ClientCSIControllerDeleteSnapshotRequest struct {
	PluginID   string
	SnapshotID string
	Secrets    CSISecrets
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerListSnapshotsRequest asks a controller instance for a
// page of snapshots (ListSnapshots).
type ClientCSIControllerListSnapshotsRequest struct {
	PluginID      string
	MaxEntries    int32
	StartingToken string
	Secrets       CSISecrets
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerListSnapshotsResponse is one page of snapshots.
type ClientCSIControllerListSnapshotsResponse struct {
	Entries   []*CSISnapshot
	NextToken string
}

// ClientCSIControllerListVolumesRequest asks a controller instance for a
// page of the provider's volumes (ListVolumes).
type ClientCSIControllerListVolumesRequest struct {
	PluginID      string
	MaxEntries    int32
	StartingToken string
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerListVolumesResponse is one page of volumes.
type ClientCSIControllerListVolumesResponse struct {
	Entries   []*CSIVolumeExternalStub
	NextToken string
}

// ClientCSIControllerExpandVolumeRequest asks a controller instance to grow
// a volume (ControllerExpandVolume) to at least CapacityMin bytes and at
// most CapacityMax (0: no limit).
type ClientCSIControllerExpandVolumeRequest struct {
	PluginID    string
	VolumeID    string
	CapacityMin int64
	CapacityMax int64
	Secrets     CSISecrets
	// Capability, when the volume is in use, is how it is used; nil
	// otherwise.
	Capability   *CSIVolumeCapability
	MountOptions *CSIMountOptions
	ClientCSITarget
	WriteRequest
}

// ClientCSIControllerExpandVolumeResponse is the volume's new size, and
// whether each node it is published on must grow it too.
type ClientCSIControllerExpandVolumeResponse struct {
	CapacityBytes         int64
	NodeExpansionRequired bool
}

// ClientCSINodeExpandVolumeRequest asks the node an allocation runs on to
// grow the volume there too (NodeExpandVolume), at the paths the
// allocation's use of the volume was published at.
type ClientCSINodeExpandVolumeRequest struct {
	PluginID string
	// VolumeID is volplane's volume ID; ExternalID the provider's.
	VolumeID       string
	ExternalID     string
	AllocID        string
	CapacityMin    int64
	CapacityMax    int64
	AccessMode     CSIVolumeAccessMode
	AttachmentMode CSIVolumeAttachmentMode
	MountOptions   *CSIMountOptions
	Secrets        CSISecrets
	ClientCSITarget
	WriteRequest
}

// ClientCSINodeExpandVolumeResponse is the size the node sees.
type ClientCSINodeExpandVolumeResponse struct {
	CapacityBytes int64
}
