package csi

import (
	"maps"
	"path/filepath"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volplane/volplane/structs"
)

// VolumeCapability is how a volume is to be used: the access mode, the
// attachment mode and, for a file system, the mount options. It becomes the
// CSI VolumeCapability: Mount{FsType, MountFlags} for a file system, Block
// for a block device.
type VolumeCapability struct {
	AccessMode     structs.CSIVolumeAccessMode
	AttachmentMode structs.CSIVolumeAttachmentMode
	// MountOptions are for file systems only; their flags never appear in a
	// log line or an error.
	MountOptions *structs.CSIMountOptions
}

// ControllerPublishRequest attaches a volume to a node (ControllerPublishVolume).
type ControllerPublishRequest struct {
	// ExternalID is the storage provider's ID of the volume (its RemoteID).
	ExternalID string
	// NodeID is the storage provider's ID of the node (from NodeGetInfo).
	NodeID        string
	Capability    *VolumeCapability
	ReadOnly      bool
	Secrets       structs.CSISecrets
	VolumeContext map[string]string
}

// ControllerUnpublishRequest detaches a volume from a node
// (ControllerUnpublishVolume). NodeID is required: the spec reads an empty
// node ID as "from every node", which a release must never ask by accident.
type ControllerUnpublishRequest struct {
	ExternalID string
	NodeID     string
	// Secrets should be those the volume was published with.
	Secrets structs.CSISecrets
}

// ControllerValidateVolumeRequest asks whether an existing volume supports
// the capabilities (ValidateVolumeCapabilities).
type ControllerValidateVolumeRequest struct {
	ExternalID    string
	Capabilities  []*VolumeCapability
	Parameters    map[string]string
	VolumeContext map[string]string
	Secrets       structs.CSISecrets
}

// CreateVolumeRequest provisions a volume (CreateVolume).
type CreateVolumeRequest struct {
	// Name is the idempotency key of the creation: a retried call with the
	// same name must not create a second volume.
	Name string
	// CapacityMin and CapacityMax are the required and limit bytes; 0 means
	// unset.
	CapacityMin  int64
	CapacityMax  int64
	Capabilities []*VolumeCapability
	Parameters   map[string]string
	Secrets      structs.CSISecrets
	// SnapshotID or CloneID (at most one) names the content source.
	SnapshotID string
	CloneID    string
	// Topology is the accessibility requirement, if any.
	Topology *structs.CSITopologyRequest
}

// CreateVolumeResponse is what the plugin reported about the new volume.
type CreateVolumeResponse struct {
	ExternalID    string
	CapacityBytes int64
	Context       map[string]string
	Topologies    []*structs.CSITopology
}

// NodeStageRequest stages a volume at a node-wide path (NodeStageVolume).
type NodeStageRequest struct {
	ExternalID string
	// StagingPath is the absolute node-wide staging path.
	StagingPath string
	Capability  *VolumeCapability
	// PublishContext is what ControllerPublishVolume returned, if the
	// controller publishes.
	PublishContext map[string]string
	VolumeContext  map[string]string
	Secrets        structs.CSISecrets
}

// NodePublishRequest makes a volume available at a workload's target path
// (NodePublishVolume).
type NodePublishRequest struct {
	ExternalID string
	// StagingPath is set when the node plugin stages (STAGE_UNSTAGE_VOLUME).
	StagingPath string
	// TargetPath is absolute; the plugin creates it, the caller creates only
	// its parent.
	TargetPath     string
	Capability     *VolumeCapability
	ReadOnly       bool
	PublishContext map[string]string
	VolumeContext  map[string]string
	Secrets        structs.CSISecrets
}

// checkCapability adds the problems of one capability to m, naming it by
// field.
func checkCapability(m *structs.MultiError, field string, c *VolumeCapability) {
	if c == nil {
		m.Add("missing %s", field)
		return
	}
	if !c.AccessMode.Valid() {
		m.Add("%s: unknown access mode %q", field, c.AccessMode)
	}
	if !c.AttachmentMode.Valid() {
		m.Add("%s: unknown attachment mode %q", field, c.AttachmentMode)
	}
	if c.AttachmentMode == structs.CSIVolumeAttachmentModeBlockDevice && c.MountOptions != nil &&
		(c.MountOptions.FSType != "" || len(c.MountOptions.MountFlags) > 0) {
		m.Add("%s: block devices take no mount options", field)
	}
}

func checkRequired(m *structs.MultiError, field, value string) {
	if value == "" {
		m.Add("missing %s", field)
	}
}

// checkPath requires an absolute path; an empty one is reported missing
// unless optional. The spec requires absolute staging and target paths, and
// a relative one would resolve against the plugin's working directory.
func checkPath(m *structs.MultiError, field, path string, optional bool) {
	switch {
	case path == "" && optional:
	case path == "":
		m.Add("missing %s", field)
	case !filepath.IsAbs(path):
		m.Add("%s %q is not an absolute path", field, path)
	}
}

func (r *ControllerPublishRequest) validate() error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	checkRequired(&m, "node id", r.NodeID)
	checkCapability(&m, "capability", r.Capability)
	return invalidRequest(MethodControllerPublishVolume, r.ExternalID, &m)
}

func (r *ControllerUnpublishRequest) validate() error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	checkRequired(&m, "node id", r.NodeID)
	return invalidRequest(MethodControllerUnpublishVolume, r.ExternalID, &m)
}

func (r *ControllerValidateVolumeRequest) validate() error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	if len(r.Capabilities) == 0 {
		m.Add("missing capabilities")
	}
	for _, c := range r.Capabilities {
		checkCapability(&m, "capability", c)
	}
	return invalidRequest(MethodValidateVolumeCapabilities, r.ExternalID, &m)
}

func (r *CreateVolumeRequest) validate() error {
	var m structs.MultiError
	checkRequired(&m, "name", r.Name)
	if len(r.Capabilities) == 0 {
		m.Add("missing capabilities")
	}
	for _, c := range r.Capabilities {
		checkCapability(&m, "capability", c)
	}
	if r.CapacityMin < 0 || r.CapacityMax < 0 {
		m.Add("capacity must not be negative")
	}
	if r.CapacityMax > 0 && r.CapacityMax < r.CapacityMin {
		m.Add("capacity max (%d) is less than capacity min (%d)", r.CapacityMax, r.CapacityMin)
	}
	if r.SnapshotID != "" && r.CloneID != "" {
		m.Add("only one of snapshot id and clone id is allowed")
	}
	return invalidRequest(MethodCreateVolume, "", &m)
}

func (r *NodeStageRequest) validate() error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	checkPath(&m, "staging path", r.StagingPath, false)
	checkCapability(&m, "capability", r.Capability)
	return invalidRequest(MethodNodeStageVolume, r.ExternalID, &m)
}

func (r *NodePublishRequest) validate() error {
	var m structs.MultiError
	checkRequired(&m, "external volume id", r.ExternalID)
	checkPath(&m, "staging path", r.StagingPath, true)
	checkPath(&m, "target path", r.TargetPath, false)
	checkCapability(&m, "capability", r.Capability)
	return invalidRequest(MethodNodePublishVolume, r.ExternalID, &m)
}

var toCSIAccessMode = map[structs.CSIVolumeAccessMode]csipb.VolumeCapability_AccessMode_Mode{
	structs.CSIVolumeAccessModeSingleNodeReader:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
	structs.CSIVolumeAccessModeSingleNodeWriter:      csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	structs.CSIVolumeAccessModeMultiNodeReader:       csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	structs.CSIVolumeAccessModeMultiNodeSingleWriter: csipb.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER,
	structs.CSIVolumeAccessModeMultiNodeMultiWriter:  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
}

// toCSI converts a validated capability.
func (c *VolumeCapability) toCSI() *csipb.VolumeCapability {
	out := &csipb.VolumeCapability{
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: toCSIAccessMode[c.AccessMode]},
	}
	if c.AttachmentMode == structs.CSIVolumeAttachmentModeBlockDevice {
		out.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return out
	}
	mount := &csipb.VolumeCapability_MountVolume{}
	if o := c.MountOptions; o != nil {
		mount.FsType = o.FSType
		mount.MountFlags = append([]string(nil), o.MountFlags...)
	}
	out.AccessType = &csipb.VolumeCapability_Mount{Mount: mount}
	return out
}

func capabilitiesToCSI(cs []*VolumeCapability) []*csipb.VolumeCapability {
	out := make([]*csipb.VolumeCapability, len(cs))
	for i, c := range cs {
		out[i] = c.toCSI()
	}
	return out
}

// confirms reports whether the plugin's confirmed capability c covers the
// requested one: the same access mode and the same kind of access (a
// confirmed file system type, if the plugin names one, must match too).
func confirms(c *csipb.VolumeCapability, want *VolumeCapability) bool {
	if c.GetAccessMode().GetMode() != toCSIAccessMode[want.AccessMode] {
		return false
	}
	if want.AttachmentMode == structs.CSIVolumeAttachmentModeBlockDevice {
		return c.GetBlock() != nil
	}
	mount := c.GetMount()
	if mount == nil {
		return false
	}
	return mount.GetFsType() == "" || want.MountOptions == nil || mount.GetFsType() == want.MountOptions.FSType
}

func topologiesToCSI(ts []*structs.CSITopology) []*csipb.Topology {
	var out []*csipb.Topology
	for _, t := range ts {
		if t != nil {
			out = append(out, &csipb.Topology{Segments: maps.Clone(t.Segments)})
		}
	}
	return out
}

func topologyFromCSI(t *csipb.Topology) *structs.CSITopology {
	if t == nil || len(t.GetSegments()) == 0 {
		return nil
	}
	return &structs.CSITopology{Segments: maps.Clone(t.GetSegments())}
}

func (r *CreateVolumeRequest) toCSI() *csipb.CreateVolumeRequest {
	out := &csipb.CreateVolumeRequest{
		Name:               r.Name,
		VolumeCapabilities: capabilitiesToCSI(r.Capabilities),
		Parameters:         r.Parameters,
		Secrets:            r.Secrets,
	}
	if r.CapacityMin > 0 || r.CapacityMax > 0 {
		out.CapacityRange = &csipb.CapacityRange{RequiredBytes: r.CapacityMin, LimitBytes: r.CapacityMax}
	}
	switch {
	case r.SnapshotID != "":
		out.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{
			Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: r.SnapshotID},
		}}
	case r.CloneID != "":
		out.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{
			Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: r.CloneID},
		}}
	}
	if t := r.Topology; t != nil && (len(t.Required) > 0 || len(t.Preferred) > 0) {
		out.AccessibilityRequirements = &csipb.TopologyRequirement{
			Requisite: topologiesToCSI(t.Required),
			Preferred: topologiesToCSI(t.Preferred),
		}
	}
	return out
}
