package structs

// CSIVolumeRegisterRequest registers (or updates) one or many volumes, all or
// nothing.
type CSIVolumeRegisterRequest struct {
	_struct bool `codec:",omitempty"`
	Volumes []*CSIVolume
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// CSIVolumeRegisterResponse returns the index of the write.
type CSIVolumeRegisterResponse struct {
	Warnings []string
	QueryMeta
}

// CSIVolumeDeregisterRequest removes volumes from state, all or nothing.
type CSIVolumeDeregisterRequest struct {
	VolumeIDs []string
	// Force allows removing a claimed volume when every claiming allocation
	// is terminal or gone. It changes state only: the plugin is not asked to
	// unpublish anything.
	Force bool
	WriteRequest
}

// CSIVolumeDeregisterResponse returns the index of the write.
type CSIVolumeDeregisterResponse struct {
	Warnings []string
	QueryMeta
}

// CSIVolumeClaimRequest writes a claim (state taken) or a release checkpoint
// (any other state) for one allocation on one volume.
type CSIVolumeClaimRequest struct {
	_struct  bool `codec:",omitempty"`
	VolumeID string
	Claim    *CSIVolumeClaim
	// NodeSecretID authenticates a client's claim.
	NodeSecretID string
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// CSIVolumeClaimResponse returns what the client needs to publish.
type CSIVolumeClaimResponse struct {
	PublishContext map[string]string
	Volume         *CSIVolume
	QueryMeta
}

// CSIVolumeGetRequest reads one volume.
type CSIVolumeGetRequest struct {
	ID string
	QueryOptions
}

// CSIVolumeGetResponse carries one volume (sanitized when it leaves the
// servers), or nil when unknown.
type CSIVolumeGetResponse struct {
	Volume *CSIVolume
	QueryMeta
}

// CSIVolumeListRequest lists volumes in a namespace, optionally those of one
// plugin or with an ID prefix (QueryOptions.Prefix), a page at a time.
type CSIVolumeListRequest struct {
	PluginID string
	NodeID   string
	QueryOptions
}

// CSIVolumeListResponse carries one page of stubs; NextToken in QueryMeta
// names the first volume of the next page.
type CSIVolumeListResponse struct {
	Volumes []*CSIVolListStub
	QueryMeta
}

// CSIPluginListRequest lists plugins, by ID prefix.
type CSIPluginListRequest struct {
	QueryOptions
}

// CSIPluginListResponse carries plugin stubs.
type CSIPluginListResponse struct {
	Plugins []*CSIPluginListStub
	QueryMeta
}

// CSIPluginGetRequest reads one plugin.
type CSIPluginGetRequest struct {
	ID string
	QueryOptions
}

// CSIPluginGetResponse carries one plugin, or nil when unknown.
type CSIPluginGetResponse struct {
	Plugin *CSIPlugin
	QueryMeta
}

// CSIVolumeCreateRequest creates volumes in their plugin through a
// controller, then registers the ones the plugin created.
type CSIVolumeCreateRequest struct {
	Volumes []*CSIVolume
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// CSIVolumeCreateResponse returns the volumes that were created and
// registered (sanitized), even when others failed.
type CSIVolumeCreateResponse struct {
	Volumes  []*CSIVolume
	Warnings []string
	QueryMeta
}

// CSIVolumeDeleteRequest deletes volumes in their plugin, then deregisters
// them.
type CSIVolumeDeleteRequest struct {
	VolumeIDs []string
	// Secrets are merged over each volume's own for the delete call.
	Secrets CSISecrets
	WriteRequest
}

// CSIVolumeDeleteResponse returns the index of the deregistration.
type CSIVolumeDeleteResponse struct {
	QueryMeta
}

// CSIVolumeDetachRequest asks the servers to release now the claims a
// volume has on a node (an operator's escape hatch).
type CSIVolumeDetachRequest struct {
	VolumeID string
	NodeID   string
	WriteRequest
}

// CSIVolumeDetachResponse lists each step the release took.
type CSIVolumeDetachResponse struct {
	Steps []string
	QueryMeta
}
