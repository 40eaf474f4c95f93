package structs

// Snapshots and the storage provider's own list of volumes live in the
// plugin, not in volplane's state: the servers ask a controller for them
// and pass the answer on. The types follow Nomad's (CSISnapshot,
// CSIVolumeExternalStub and their requests), so Nomad's API client reads
// them unchanged.

// CSISnapshot is a snapshot of a volume as the storage provider reports it.
type CSISnapshot struct {
	// ID is the storage provider's ID of the snapshot.
	ID string
	// ExternalSourceVolumeID is the provider's ID of the volume it was
	// taken of; SourceVolumeID is volplane's ID of that volume, when it is
	// registered.
	ExternalSourceVolumeID string
	SourceVolumeID         string
	SizeBytes              int64
	// CreateTime is in Unix seconds, as Nomad's.
	CreateTime int64
	IsReady    bool
	PluginID   string

	// Used only to create a snapshot, never returned: the name the plugin
	// keys the creation on (a repeat with the same name is the same
	// snapshot), and the secrets and parameters of the call. The secrets
	// are used for the call only: never stored, logged or answered.
	Name       string            `json:",omitempty"`
	Secrets    CSISecrets        `json:",omitempty"`
	Parameters map[string]string `json:",omitempty"`
}

// CSISnapshotCreateRequest snapshots volumes, each through a controller of
// its plugin.
type CSISnapshotCreateRequest struct {
	Snapshots []*CSISnapshot
	WriteRequest
}

// CSISnapshotCreateResponse carries the snapshots the plugins made.
type CSISnapshotCreateResponse struct {
	Snapshots []*CSISnapshot
	QueryMeta
}

// CSISnapshotDeleteRequest deletes snapshots by plugin and snapshot ID.
type CSISnapshotDeleteRequest struct {
	Snapshots []*CSISnapshot
	WriteRequest
}

// CSISnapshotDeleteResponse answers a snapshot delete.
type CSISnapshotDeleteResponse struct {
	QueryMeta
}

// CSISnapshotListRequest lists a plugin's snapshots, a page at a time
// (QueryOptions.PerPage and NextToken, passed to the plugin as they are).
type CSISnapshotListRequest struct {
	PluginID string
	// Secrets are for the call only.
	Secrets CSISecrets
	QueryOptions
}

// CSISnapshotListResponse carries one page of snapshots; NextToken (in
// QueryMeta) is the plugin's token for the next page.
type CSISnapshotListResponse struct {
	Snapshots []*CSISnapshot
	QueryMeta
}

// CSIVolumeExternalStub is one volume as the storage provider lists it
// (ListVolumes). VolumeID and Namespace name the volplane volume registered
// with this external ID, empty when there is none.
type CSIVolumeExternalStub struct {
	ExternalID               string
	CapacityBytes            int64
	VolumeContext            map[string]string
	CloneID                  string
	SnapshotID               string
	PublishedExternalNodeIDs []string
	IsAbnormal               bool
	Status                   string

	VolumeID  string `json:",omitempty"`
	Namespace string `json:",omitempty"`
}

// CSIVolumeExternalListRequest lists the volumes a plugin's storage
// provider holds, a page at a time.
type CSIVolumeExternalListRequest struct {
	PluginID string
	QueryOptions
}

// CSIVolumeExternalListResponse carries one page; NextToken (in QueryMeta)
// is the plugin's token for the next one.
type CSIVolumeExternalListResponse struct {
	Volumes []*CSIVolumeExternalStub
	QueryMeta
}
