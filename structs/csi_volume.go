package structs

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// VolumeTypeCSI is the only volume type volplane manages.
const VolumeTypeCSI = "csi"

// CSIVolumeAccessMode is the CSI access mode of a volume capability.
type CSIVolumeAccessMode string

const (
	CSIVolumeAccessModeUnknown               CSIVolumeAccessMode = ""
	CSIVolumeAccessModeSingleNodeReader      CSIVolumeAccessMode = "single-node-reader-only"
	CSIVolumeAccessModeSingleNodeWriter      CSIVolumeAccessMode = "single-node-writer"
	CSIVolumeAccessModeMultiNodeReader       CSIVolumeAccessMode = "multi-node-reader-only"
	CSIVolumeAccessModeMultiNodeSingleWriter CSIVolumeAccessMode = "multi-node-single-writer"
	CSIVolumeAccessModeMultiNodeMultiWriter  CSIVolumeAccessMode = "multi-node-multi-writer"
)

// Valid reports whether m is one of the five known modes.
func (m CSIVolumeAccessMode) Valid() bool {
	switch m {
	case CSIVolumeAccessModeSingleNodeReader, CSIVolumeAccessModeSingleNodeWriter,
		CSIVolumeAccessModeMultiNodeReader, CSIVolumeAccessModeMultiNodeSingleWriter,
		CSIVolumeAccessModeMultiNodeMultiWriter:
		return true
	}
	return false
}

// IsWriter reports whether m lets a claim write.
func (m CSIVolumeAccessMode) IsWriter() bool {
	switch m {
	case CSIVolumeAccessModeSingleNodeWriter, CSIVolumeAccessModeMultiNodeSingleWriter,
		CSIVolumeAccessModeMultiNodeMultiWriter:
		return true
	}
	return false
}

// IsSingleNode reports whether m restricts the volume to one node.
func (m CSIVolumeAccessMode) IsSingleNode() bool {
	return m == CSIVolumeAccessModeSingleNodeReader || m == CSIVolumeAccessModeSingleNodeWriter
}

// CSIVolumeAttachmentMode is how a volume is presented to a workload.
type CSIVolumeAttachmentMode string

const (
	CSIVolumeAttachmentModeUnknown     CSIVolumeAttachmentMode = ""
	CSIVolumeAttachmentModeBlockDevice CSIVolumeAttachmentMode = "block-device"
	CSIVolumeAttachmentModeFilesystem  CSIVolumeAttachmentMode = "file-system"
)

// Valid reports whether m is one of the two known modes.
func (m CSIVolumeAttachmentMode) Valid() bool {
	return m == CSIVolumeAttachmentModeBlockDevice || m == CSIVolumeAttachmentModeFilesystem
}

// CSIVolumeCapability is one access mode and attachment mode pair a volume may
// be claimed with.
type CSIVolumeCapability struct {
	_struct        bool `codec:",omitempty"`
	AccessMode     CSIVolumeAccessMode
	AttachmentMode CSIVolumeAttachmentMode
}

func (c *CSIVolumeCapability) String() string {
	return string(c.AccessMode) + "/" + string(c.AttachmentMode)
}

// CSIMountOptions are the file system type and mount flags of a volume. The
// flags may hold credentials, so they are never printed, and the servers
// keep them sealed (SealedFlags) rather than in MountFlags.
type CSIMountOptions struct {
	_struct    bool `codec:",omitempty"`
	FSType     string
	MountFlags []string
	// SealedFlags are the mount flags sealed by the leader with the
	// cluster keyring, as the replicated state keeps them.
	SealedFlags *Sealed `json:"-"`
}

// Copy returns a deep copy.
func (o *CSIMountOptions) Copy() *CSIMountOptions {
	if o == nil {
		return nil
	}
	return &CSIMountOptions{FSType: o.FSType, MountFlags: slices.Clone(o.MountFlags), SealedFlags: o.SealedFlags.Copy()}
}

// Equal compares every field; sealed flags are equal when they are the same
// sealed value (see Sealed.Equal).
func (o *CSIMountOptions) Equal(p *CSIMountOptions) bool {
	if o == nil || p == nil {
		return o == p
	}
	return o.FSType == p.FSType && slices.Equal(o.MountFlags, p.MountFlags) && o.SealedFlags.Equal(p.SealedFlags)
}

// HasFlags reports whether there are mount flags, in clear or sealed.
func (o *CSIMountOptions) HasFlags() bool {
	return o != nil && (len(o.MountFlags) > 0 || o.SealedFlags != nil)
}

// Redacted returns a copy whose mount flags are replaced by a marker.
func (o *CSIMountOptions) Redacted() *CSIMountOptions {
	if o == nil {
		return nil
	}
	c := &CSIMountOptions{FSType: o.FSType}
	if o.HasFlags() {
		c.MountFlags = []string{RedactedValue}
	}
	return c
}

// String never shows the flags. It has a value receiver so that a
// CSIMountOptions printed by value (not through a pointer) is redacted too;
// fmt prints a nil *CSIMountOptions as <nil>.
func (o CSIMountOptions) String() string {
	return fmt.Sprintf("fs_type=%q mount_flags=%s", o.FSType, RedactedValue)
}

// GoString keeps %#v from printing the flags either.
func (o CSIMountOptions) GoString() string { return o.String() }

// RedactedValue replaces every secret value that has to be shown at all.
const RedactedValue = "[REDACTED]"

// CSISecrets are passed to the plugin and never shown.
type CSISecrets map[string]string

// String never shows the values.
func (s CSISecrets) String() string {
	keys := slices.Sorted(maps.Keys(s))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + RedactedValue
	}
	return "map[" + strings.Join(parts, " ") + "]"
}

// GoString keeps %#v from printing the values either.
func (s CSISecrets) GoString() string { return s.String() }

// CSITopology is one set of topology segments, for example a zone.
type CSITopology struct {
	_struct  bool `codec:",omitempty"`
	Segments map[string]string
}

// Copy returns a deep copy.
func (t *CSITopology) Copy() *CSITopology {
	if t == nil {
		return nil
	}
	return &CSITopology{Segments: maps.Clone(t.Segments)}
}

// Equal compares the segments.
func (t *CSITopology) Equal(o *CSITopology) bool {
	if t == nil || o == nil {
		return t == o
	}
	return maps.Equal(t.Segments, o.Segments)
}

// Contains reports whether every segment of o is in t with the same value.
func (t *CSITopology) Contains(o *CSITopology) bool {
	if t == nil || o == nil {
		return false
	}
	for k, v := range o.Segments {
		if tv, ok := t.Segments[k]; !ok || tv != v {
			return false
		}
	}
	return true
}

// CSITopologyRequest is the topology an operator asks for when creating or
// registering a volume.
type CSITopologyRequest struct {
	_struct   bool `codec:",omitempty"`
	Required  []*CSITopology
	Preferred []*CSITopology
}

// Copy returns a deep copy.
func (r *CSITopologyRequest) Copy() *CSITopologyRequest {
	if r == nil {
		return nil
	}
	return &CSITopologyRequest{Required: copyTopologies(r.Required), Preferred: copyTopologies(r.Preferred)}
}

// Equal compares both lists element by element.
func (r *CSITopologyRequest) Equal(o *CSITopologyRequest) bool {
	if r == nil || o == nil {
		return r == o
	}
	return slices.EqualFunc(r.Required, o.Required, (*CSITopology).Equal) &&
		slices.EqualFunc(r.Preferred, o.Preferred, (*CSITopology).Equal)
}

func copyTopologies(ts []*CSITopology) []*CSITopology {
	if ts == nil {
		return nil
	}
	out := make([]*CSITopology, len(ts))
	for i, t := range ts {
		out[i] = t.Copy()
	}
	return out
}

// CSIVolume is a registered volume and its claims.
type CSIVolume struct {
	_struct    bool `codec:",omitempty"`
	ID         string
	Namespace  string
	Name       string
	ExternalID string

	PluginID        string
	Provider        string
	ProviderVersion string

	// RequestedCapabilities are the pairs a claim may use.
	RequestedCapabilities []*CSIVolumeCapability
	// AccessMode and AttachmentMode are the current modes, set by the first
	// claim and reset when the last claim is freed.
	AccessMode     CSIVolumeAccessMode
	AttachmentMode CSIVolumeAttachmentMode

	MountOptions *CSIMountOptions
	// Secrets are in clear only in requests and in what a server hands to
	// a plugin or to the claiming node; the replicated state keeps them
	// sealed (SealedSecrets).
	Secrets       CSISecrets
	SealedSecrets *Sealed `json:"-"`
	Parameters    map[string]string
	Context       map[string]string

	Capacity             int64
	RequestedCapacityMin int64
	RequestedCapacityMax int64
	CloneID              string
	SnapshotID           string

	RequestedTopologies *CSITopologyRequest
	Topologies          []*CSITopology

	// Claims by allocation ID. PastClaims are claims being released.
	ReadClaims  map[string]*CSIVolumeClaim
	WriteClaims map[string]*CSIVolumeClaim
	PastClaims  map[string]*CSIVolumeClaim

	// Derived on read from the plugin; never stored. UnschedulableReason
	// says why a volume is not schedulable.
	Schedulable         bool
	UnschedulableReason string `json:",omitempty"`
	ControllerRequired  bool
	ControllersHealthy  int
	ControllersExpected int
	NodesHealthy        int
	NodesExpected       int

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  int64
	ModifyTime  int64
}

// RemoteID is the storage provider's ID for the volume.
func (v *CSIVolume) RemoteID() string {
	if v.ExternalID != "" {
		return v.ExternalID
	}
	return v.ID
}

// InUse reports whether any allocation holds or is releasing a claim.
func (v *CSIVolume) InUse() bool {
	return len(v.ReadClaims) > 0 || len(v.WriteClaims) > 0 || len(v.PastClaims) > 0
}

// DescribeClaims lists who holds the volume, for "in use" errors.
func (v *CSIVolume) DescribeClaims() string {
	var parts []string
	add := func(kind string, m map[string]*CSIVolumeClaim) {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			c := m[id]
			parts = append(parts, fmt.Sprintf("%s claim of allocation %q on node %q (%s)", kind, id, c.NodeID, c.State))
		}
	}
	add("read", v.ReadClaims)
	add("write", v.WriteClaims)
	add("past", v.PastClaims)
	return strings.Join(parts, ", ")
}

// HasCapability reports whether the pair is among the requested capabilities.
func (v *CSIVolume) HasCapability(access CSIVolumeAccessMode, attach CSIVolumeAttachmentMode) bool {
	for _, c := range v.RequestedCapabilities {
		if c != nil && c.AccessMode == access && c.AttachmentMode == attach {
			return true
		}
	}
	return false
}

// Copy returns a deep copy.
func (v *CSIVolume) Copy() *CSIVolume {
	if v == nil {
		return nil
	}
	c := *v
	// Keep nil as nil and every element in place, so that a copy compares
	// equal to its original and Validate reports the same capability numbers.
	if v.RequestedCapabilities != nil {
		c.RequestedCapabilities = make([]*CSIVolumeCapability, len(v.RequestedCapabilities))
		for i, cap := range v.RequestedCapabilities {
			if cap != nil {
				cc := *cap
				c.RequestedCapabilities[i] = &cc
			}
		}
	}
	c.MountOptions = v.MountOptions.Copy()
	c.Secrets = maps.Clone(v.Secrets)
	c.SealedSecrets = v.SealedSecrets.Copy()
	c.Parameters = maps.Clone(v.Parameters)
	c.Context = maps.Clone(v.Context)
	c.RequestedTopologies = v.RequestedTopologies.Copy()
	c.Topologies = copyTopologies(v.Topologies)
	c.ReadClaims = copyClaims(v.ReadClaims)
	c.WriteClaims = copyClaims(v.WriteClaims)
	c.PastClaims = copyClaims(v.PastClaims)
	return &c
}

// CopyClaims returns a copy of v for a write that changes only its claims
// and the fields beside them (access and attachment modes, derived health,
// modify index and time). The claim maps and every claim in them are
// copied, so the copy's claims may be changed, added or removed. The rest
// (capabilities, mount options, secrets, parameters, context, topologies)
// is shared with v and must not be changed through the copy; so is each
// claim's publish context, which is only ever replaced, never changed in
// place. The claim writes of the state store use it: a full Copy of every
// volume they touch was a seventh of what releasing claims allocated.
func (v *CSIVolume) CopyClaims() *CSIVolume {
	if v == nil {
		return nil
	}
	c := *v
	c.ReadClaims = shallowCopyClaims(v.ReadClaims)
	c.WriteClaims = shallowCopyClaims(v.WriteClaims)
	c.PastClaims = shallowCopyClaims(v.PastClaims)
	return &c
}

// Sanitize returns a copy fit for an API response: no secrets, no mount
// flags, no publish contexts (they can carry credentials too).
func (v *CSIVolume) Sanitize() *CSIVolume {
	if v == nil {
		return nil
	}
	c := v.Copy()
	c.Secrets, c.SealedSecrets = nil, nil
	c.MountOptions = v.MountOptions.Redacted()
	for _, m := range []map[string]*CSIVolumeClaim{c.ReadClaims, c.WriteClaims, c.PastClaims} {
		for _, cl := range m {
			cl.PublishContext = nil
		}
	}
	return c
}

// Stub returns the list view of the volume.
func (v *CSIVolume) Stub() *CSIVolListStub {
	return &CSIVolListStub{
		ID:                  v.ID,
		Namespace:           v.Namespace,
		Name:                v.Name,
		ExternalID:          v.ExternalID,
		Topologies:          copyTopologies(v.Topologies),
		AccessMode:          v.AccessMode,
		AttachmentMode:      v.AttachmentMode,
		CurrentReaders:      len(v.ReadClaims),
		CurrentWriters:      len(v.WriteClaims),
		PastClaims:          len(v.PastClaims),
		Schedulable:         v.Schedulable,
		UnschedulableReason: v.UnschedulableReason,
		PluginID:            v.PluginID,
		Provider:            v.Provider,
		ControllerRequired:  v.ControllerRequired,
		ControllersHealthy:  v.ControllersHealthy,
		ControllersExpected: v.ControllersExpected,
		NodesHealthy:        v.NodesHealthy,
		NodesExpected:       v.NodesExpected,
		CreateIndex:         v.CreateIndex,
		ModifyIndex:         v.ModifyIndex,
	}
}

// CSIVolListStub is the list view of a volume: identity, modes, claim
// counts and plugin health; no secrets, no claims.
type CSIVolListStub struct {
	ID                  string
	Namespace           string
	Name                string
	ExternalID          string
	Topologies          []*CSITopology
	AccessMode          CSIVolumeAccessMode
	AttachmentMode      CSIVolumeAttachmentMode
	CurrentReaders      int
	CurrentWriters      int
	PastClaims          int
	Schedulable         bool
	UnschedulableReason string `json:",omitempty"`
	PluginID            string
	Provider            string
	ControllerRequired  bool
	ControllersHealthy  int
	ControllersExpected int
	NodesHealthy        int
	NodesExpected       int
	CreateIndex         uint64
	ModifyIndex         uint64
}

// Limits on identifiers, so that a key cannot grow without bound or break a
// URL path.
const (
	MaxIDLength   = 128
	MaxNameLength = 256
)

// ValidateID checks an identifier used as a key and in URL paths. Its error
// has the invalid code, so an endpoint can return it as it is.
func ValidateID(kind, id string) error {
	switch {
	case id == "":
		return ErrInvalid("missing %s", kind)
	case len(id) > MaxIDLength:
		return ErrInvalid("%s %q is longer than %d characters", kind, id[:32]+"...", MaxIDLength)
	case strings.ContainsAny(id, "/?#%\\"):
		return ErrInvalid("%s %q must not contain any of / ? # %% \\", kind, id)
	}
	for _, r := range id {
		if r <= ' ' || r == 0x7f {
			return ErrInvalid("%s %q must not contain spaces or control characters", kind, id)
		}
	}
	return nil
}

// Validate checks a volume as an operator submits it, and returns one error
// that lists every problem.
func (v *CSIVolume) Validate() error {
	var m MultiError
	if err := ValidateID("volume id", v.ID); err != nil {
		m.AddErr(err)
	}
	if v.PluginID == "" {
		m.Add("missing plugin id")
	} else if err := ValidateID("plugin id", v.PluginID); err != nil {
		m.AddErr(err)
	}
	if v.Namespace == "" {
		m.Add("missing namespace")
	}
	if len(v.Name) > MaxNameLength {
		m.Add("name is longer than %d characters", MaxNameLength)
	}
	if v.SnapshotID != "" && v.CloneID != "" {
		m.Add("only one of snapshot_id and clone_id is allowed")
	}
	if len(v.RequestedCapabilities) == 0 {
		m.Add("must include at least one capability block")
	}
	blockOnly := len(v.RequestedCapabilities) > 0
	for i, c := range v.RequestedCapabilities {
		if c == nil {
			m.Add("capability %d is empty", i+1)
			continue
		}
		if !c.AccessMode.Valid() {
			m.Add("capability %d: unknown access mode %q", i+1, c.AccessMode)
		}
		if !c.AttachmentMode.Valid() {
			m.Add("capability %d: unknown attachment mode %q", i+1, c.AttachmentMode)
		}
		if c.AttachmentMode != CSIVolumeAttachmentModeBlockDevice {
			blockOnly = false
		}
	}
	if blockOnly && v.MountOptions != nil && (v.MountOptions.FSType != "" || v.MountOptions.HasFlags()) {
		m.Add("block devices cannot have mount options")
	}
	if v.RequestedCapacityMax > 0 && v.RequestedCapacityMax < v.RequestedCapacityMin {
		m.Add("capacity_max (%d) is less than capacity_min (%d)", v.RequestedCapacityMax, v.RequestedCapacityMin)
	}
	if v.RequestedCapacityMin < 0 || v.RequestedCapacityMax < 0 {
		m.Add("capacity must not be negative")
	}
	if r := v.RequestedTopologies; r != nil {
		for _, t := range r.Required {
			if t == nil || len(t.Segments) == 0 {
				m.Add("required topology is missing segments field")
			}
		}
		for _, t := range r.Preferred {
			if t == nil || len(t.Segments) == 0 {
				m.Add("preferred topology is missing segments field")
			}
		}
	}
	if len(v.ReadClaims)+len(v.WriteClaims)+len(v.PastClaims) > 0 {
		m.Add("claims cannot be set by registration")
	}
	subject := "volume"
	if v.ID != "" {
		subject = fmt.Sprintf("volume %q", v.ID)
	}
	return m.ErrorOrNil(subject + " validation failed")
}

// Merge applies an operator's re-registration (update) onto a copy of the
// stored volume v, following the rules of what may change. It returns the
// merged copy, or one error listing every refused change: invalid when the
// update changes what can never change, conflict when it is refused only
// because of the volume's claims (it may be sent again once they are
// released).
//
// It is the one rule for volume updates: the leader calls it against its
// snapshot, to keep a refused update out of the Raft log, and the state
// store calls it again inside the write, against the volume as it is then,
// with what the leader merged as the update; a merged volume merges onto
// its own source unchanged, so only what changed in between can refuse it.
func (v *CSIVolume) Merge(update *CSIVolume) (*CSIVolume, error) {
	var m, inUse MultiError
	out := v.Copy()
	if update.Name != "" && update.Name != v.Name {
		m.Add("volume name cannot be updated")
	}
	if update.ExternalID != "" && update.ExternalID != v.ExternalID {
		m.Add("volume external ID cannot be updated")
	}
	if update.PluginID != v.PluginID {
		m.Add("volume plugin ID cannot be updated")
	}
	if update.CloneID != "" && update.CloneID != v.CloneID {
		m.Add("volume clone ID cannot be updated")
	}
	if update.SnapshotID != "" && update.SnapshotID != v.SnapshotID {
		m.Add("volume snapshot ID cannot be updated")
	}
	if v.AccessMode != CSIVolumeAccessModeUnknown || v.AttachmentMode != CSIVolumeAttachmentModeUnknown {
		if !update.HasCapability(v.AccessMode, v.AttachmentMode) {
			inUse.Add("volume requested capabilities update was not compatible with existing capability in use (%s/%s)",
				v.AccessMode, v.AttachmentMode)
		}
	}
	if len(v.Topologies) > 0 && update.RequestedTopologies != nil &&
		!update.RequestedTopologies.Equal(v.RequestedTopologies) {
		m.Add("volume topology request update was not compatible with existing topology")
	}
	if v.InUse() && update.MountOptions != nil && !update.MountOptions.Equal(v.MountOptions) {
		inUse.Add("can not update mount options while volume is in use")
	}
	if len(update.Parameters) > 0 && !maps.Equal(update.Parameters, v.Parameters) {
		m.Add("volume parameters cannot be updated")
	}
	if update.RequestedCapacityMax > 0 && update.RequestedCapacityMax < v.Capacity {
		m.Add("capacity_max of %d bytes is less than the volume's current capacity of %d bytes: volumes cannot shrink",
			update.RequestedCapacityMax, v.Capacity)
	}
	// Every problem in one message; the code says whether waiting for the
	// claims to go could ever help.
	refused := m.Len()
	m.Errors = append(m.Errors, inUse.Errors...)
	if err := m.ErrorOrNil(fmt.Sprintf("volume %q cannot be updated", v.ID)); err != nil {
		if refused == 0 {
			return nil, &Error{Code: ErrCodeConflict, Message: MessageOf(err)}
		}
		return nil, err
	}

	out.RequestedCapabilities = update.Copy().RequestedCapabilities
	if update.MountOptions != nil {
		out.MountOptions = update.MountOptions.Copy()
	}
	out.Secrets = maps.Clone(update.Secrets)
	out.SealedSecrets = update.SealedSecrets.Copy()
	if len(update.Context) > 0 {
		out.Context = maps.Clone(update.Context)
	}
	if update.RequestedTopologies != nil {
		out.RequestedTopologies = update.RequestedTopologies.Copy()
	}
	if update.RequestedCapacityMin != 0 || update.RequestedCapacityMax != 0 {
		out.RequestedCapacityMin = update.RequestedCapacityMin
		out.RequestedCapacityMax = update.RequestedCapacityMax
	}
	// The capacity is the plugin's answer to an expansion, which only
	// grows a volume: an update that says less (an operator's spec that
	// leaves it out, or a write that an expansion overtook) keeps it.
	out.Capacity = max(v.Capacity, update.Capacity)
	// The provider is the plugin's, as the leader last read it.
	if update.Provider != "" {
		out.Provider, out.ProviderVersion = update.Provider, update.ProviderVersion
	}
	return out, nil
}

// AllocSuffix returns the trailing "[N]" of an allocation name such as
// "job.group[N]", or "" when there is none.
func AllocSuffix(allocName string) string {
	i := strings.LastIndexByte(allocName, '[')
	if i < 0 || !strings.HasSuffix(allocName, "]") {
		return ""
	}
	return allocName[i:]
}

// VolumeIDForAlloc is the one function that computes which volume a request
// means for an allocation: source itself, or, with per_alloc, source[N] where
// N is the allocation's index. Scheduler, server and client all call it.
func VolumeIDForAlloc(source string, perAlloc bool, allocName string) string {
	if !perAlloc {
		return source
	}
	return source + AllocSuffix(allocName)
}

// NowNano is how endpoints stamp times before a Raft apply.
func NowNano() int64 { return time.Now().UnixNano() }

// HasPlaintextSecrets reports whether the volume carries secrets or mount
// flags in clear, which the replicated state never keeps.
func (v *CSIVolume) HasPlaintextSecrets() bool {
	return len(v.Secrets) > 0 || (v.MountOptions != nil && len(v.MountOptions.MountFlags) > 0)
}
