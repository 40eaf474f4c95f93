package structs

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// CSIPluginType says which services of a plugin an instance runs.
type CSIPluginType string

const (
	CSIPluginTypeNode       CSIPluginType = "node"
	CSIPluginTypeController CSIPluginType = "controller"
	CSIPluginTypeMonolith   CSIPluginType = "monolith"
)

// Valid reports whether t is a known plugin type.
func (t CSIPluginType) Valid() bool {
	return t == CSIPluginTypeNode || t == CSIPluginTypeController || t == CSIPluginTypeMonolith
}

// CSIInfo is one plugin instance's fingerprint on one node, for either its
// controller or its node service.
type CSIInfo struct {
	PluginID          string
	AllocID           string
	Healthy           bool
	HealthDescription string
	UpdateTime        time.Time

	Provider        string
	ProviderVersion string

	// RequiresControllerPlugin is true when the plugin offers the controller
	// service; RequiresTopologies when it reports accessibility constraints.
	RequiresControllerPlugin bool
	RequiresTopologies       bool

	ControllerInfo *CSIControllerInfo
	NodeInfo       *CSINodeInfo
}

// Copy returns a deep copy.
func (i *CSIInfo) Copy() *CSIInfo {
	if i == nil {
		return nil
	}
	c := *i
	if i.ControllerInfo != nil {
		ci := *i.ControllerInfo
		c.ControllerInfo = &ci
	}
	c.NodeInfo = i.NodeInfo.Copy()
	return &c
}

// Equal compares two fingerprints, ignoring UpdateTime, so that a heartbeat
// that changes nothing else writes nothing.
func (i *CSIInfo) Equal(o *CSIInfo) bool {
	if i == nil || o == nil {
		return i == o
	}
	a, b := *i, *o
	a.UpdateTime, b.UpdateTime = time.Time{}, time.Time{}
	a.ControllerInfo, b.ControllerInfo = nil, nil
	a.NodeInfo, b.NodeInfo = nil, nil
	if a != b {
		return false
	}
	if (i.ControllerInfo == nil) != (o.ControllerInfo == nil) ||
		(i.ControllerInfo != nil && *i.ControllerInfo != *o.ControllerInfo) {
		return false
	}
	return i.NodeInfo.Equal(o.NodeInfo)
}

// Validate checks a fingerprint as a client reports it.
func (i *CSIInfo) Validate() error {
	var m MultiError
	if err := ValidateID("plugin id", i.PluginID); err != nil {
		m.AddErr(err)
	}
	if i.ControllerInfo == nil && i.NodeInfo == nil {
		m.Add("fingerprint has neither controller nor node info")
	}
	if i.NodeInfo != nil && i.NodeInfo.MaxVolumes < 0 {
		m.Add("max volumes must not be negative")
	}
	return m.ErrorOrNil(fmt.Sprintf("plugin %q fingerprint", i.PluginID))
}

// CSIControllerInfo is what a controller service can do.
type CSIControllerInfo struct {
	SupportsCreateDelete             bool
	SupportsAttachDetach             bool
	SupportsListVolumes              bool
	SupportsGetCapacity              bool
	SupportsCreateDeleteSnapshot     bool
	SupportsListSnapshots            bool
	SupportsClone                    bool
	SupportsReadOnlyAttach           bool
	SupportsExpand                   bool
	SupportsListVolumesAttachedNodes bool
	SupportsCondition                bool
	SupportsGet                      bool
	// VolumeExpansion is the plugin's VolumeExpansion capability
	// (GetPluginCapabilities): CSIVolumeExpansionOnline when volumes can
	// grow while published, CSIVolumeExpansionOffline when only while
	// published nowhere, "" when the plugin says neither, which counts as
	// offline.
	VolumeExpansion string
}

// The plugin's VolumeExpansion capability.
const (
	CSIVolumeExpansionOnline  = "online"
	CSIVolumeExpansionOffline = "offline"
)

// CSIControllerCapability is a controller capability, by the CSI spec's
// name, for the checks made before a controller call and for errors.
type CSIControllerCapability string

const (
	CSIControllerCreateDeleteVolume   CSIControllerCapability = "CREATE_DELETE_VOLUME"
	CSIControllerPublishUnpublish     CSIControllerCapability = "PUBLISH_UNPUBLISH_VOLUME"
	CSIControllerListVolumes          CSIControllerCapability = "LIST_VOLUMES"
	CSIControllerCreateDeleteSnapshot CSIControllerCapability = "CREATE_DELETE_SNAPSHOT"
	CSIControllerListSnapshots        CSIControllerCapability = "LIST_SNAPSHOTS"
	CSIControllerCloneVolume          CSIControllerCapability = "CLONE_VOLUME"
	CSIControllerExpandVolume         CSIControllerCapability = "EXPAND_VOLUME"
)

// Has reports whether the controller advertises the capability.
func (c *CSIControllerInfo) Has(capability CSIControllerCapability) bool {
	if c == nil {
		return false
	}
	switch capability {
	case CSIControllerCreateDeleteVolume:
		return c.SupportsCreateDelete
	case CSIControllerPublishUnpublish:
		return c.SupportsAttachDetach
	case CSIControllerListVolumes:
		return c.SupportsListVolumes
	case CSIControllerCreateDeleteSnapshot:
		return c.SupportsCreateDeleteSnapshot
	case CSIControllerListSnapshots:
		return c.SupportsListSnapshots
	case CSIControllerCloneVolume:
		return c.SupportsClone
	case CSIControllerExpandVolume:
		return c.SupportsExpand
	}
	return false
}

// CSINodeCapability is a node capability, by the CSI spec's name.
type CSINodeCapability string

const (
	CSINodeStageUnstageVolume CSINodeCapability = "STAGE_UNSTAGE_VOLUME"
	CSINodeExpandVolume       CSINodeCapability = "EXPAND_VOLUME"
)

// Has reports whether the node service advertises the capability.
func (n *CSINodeInfo) Has(capability CSINodeCapability) bool {
	if n == nil {
		return false
	}
	switch capability {
	case CSINodeStageUnstageVolume:
		return n.RequiresNodeStageVolume
	case CSINodeExpandVolume:
		return n.SupportsExpand
	}
	return false
}

// CSINodeInfo is what a node service reported about its node.
type CSINodeInfo struct {
	// ID is the storage provider's ID for this node (NodeGetInfo).
	ID string
	// MaxVolumes is max_volumes_per_node; 0 means no limit.
	MaxVolumes              int64
	AccessibleTopology      *CSITopology
	RequiresNodeStageVolume bool
	SupportsStats           bool
	SupportsExpand          bool
	SupportsCondition       bool
}

// Copy returns a deep copy.
func (n *CSINodeInfo) Copy() *CSINodeInfo {
	if n == nil {
		return nil
	}
	c := *n
	c.AccessibleTopology = n.AccessibleTopology.Copy()
	return &c
}

// Equal compares every field.
func (n *CSINodeInfo) Equal(o *CSINodeInfo) bool {
	if n == nil || o == nil {
		return n == o
	}
	a, b := *n, *o
	a.AccessibleTopology, b.AccessibleTopology = nil, nil
	return a == b && n.AccessibleTopology.Equal(o.AccessibleTopology)
}

// CSIPlugin is derived from the fingerprints of the nodes that run the
// plugin; nobody registers it by hand.
type CSIPlugin struct {
	ID                 string
	Provider           string
	Version            string
	ControllerRequired bool

	// Instances by node ID.
	Controllers map[string]*CSIInfo
	Nodes       map[string]*CSIInfo

	ControllersHealthy  int
	ControllersExpected int
	NodesHealthy        int
	NodesExpected       int

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  int64
	ModifyTime  int64
}

// NewCSIPlugin returns an empty plugin row.
func NewCSIPlugin(id string, index uint64) *CSIPlugin {
	return &CSIPlugin{
		ID:          id,
		Controllers: map[string]*CSIInfo{},
		Nodes:       map[string]*CSIInfo{},
		CreateIndex: index,
		ModifyIndex: index,
	}
}

// Copy returns a deep copy.
func (p *CSIPlugin) Copy() *CSIPlugin {
	if p == nil {
		return nil
	}
	c := *p
	c.Controllers = copyInfos(p.Controllers)
	c.Nodes = copyInfos(p.Nodes)
	return &c
}

func copyInfos(m map[string]*CSIInfo) map[string]*CSIInfo {
	out := make(map[string]*CSIInfo, len(m))
	for k, v := range m {
		out[k] = v.Copy()
	}
	return out
}

// IsEmpty reports whether no node runs any instance of the plugin.
func (p *CSIPlugin) IsEmpty() bool {
	return len(p.Controllers) == 0 && len(p.Nodes) == 0
}

// SetInstances replaces the instances a node runs (nil to remove one side)
// and recomputes the derived fields.
func (p *CSIPlugin) SetInstances(nodeID string, controller, node *CSIInfo) {
	// A plugin built as a literal or decoded from the wire may have nil maps;
	// writing to one would panic inside the FSM.
	if p.Controllers == nil {
		p.Controllers = map[string]*CSIInfo{}
	}
	if p.Nodes == nil {
		p.Nodes = map[string]*CSIInfo{}
	}
	if controller != nil {
		p.Controllers[nodeID] = controller.Copy()
	} else {
		delete(p.Controllers, nodeID)
	}
	if node != nil {
		p.Nodes[nodeID] = node.Copy()
	} else {
		delete(p.Nodes, nodeID)
	}
	p.Recount()
}

// Recount derives the health counts, ControllerRequired and the provider
// from the instances. ControllerRequired comes from node fingerprints as well
// as controller ones, so volumes of a plugin whose controller has not
// fingerprinted yet are not mistaken for schedulable.
func (p *CSIPlugin) Recount() {
	p.ControllersHealthy, p.NodesHealthy = 0, 0
	p.ControllersExpected, p.NodesExpected = len(p.Controllers), len(p.Nodes)
	p.ControllerRequired = false
	p.Provider, p.Version = "", ""
	for _, m := range []map[string]*CSIInfo{p.Controllers, p.Nodes} {
		for _, id := range sortedKeys(m) {
			info := m[id]
			if info.RequiresControllerPlugin {
				p.ControllerRequired = true
			}
			if info.Provider != "" && p.Provider == "" {
				p.Provider, p.Version = info.Provider, info.ProviderVersion
			}
		}
	}
	for _, info := range p.Controllers {
		if info.Healthy {
			p.ControllersHealthy++
		}
	}
	for _, info := range p.Nodes {
		if info.Healthy {
			p.NodesHealthy++
		}
	}
}

// SupportsAttachDetach reports whether any controller offers
// PUBLISH_UNPUBLISH_VOLUME; instances of one plugin are expected to agree.
func (p *CSIPlugin) SupportsAttachDetach() bool {
	return p.ControllerSupports(CSIControllerPublishUnpublish)
}

// ControllerSupports reports whether any controller instance advertises
// the capability; instances of one plugin are expected to agree.
func (p *CSIPlugin) ControllerSupports(capability CSIControllerCapability) bool {
	for _, c := range p.Controllers {
		if c != nil && c.ControllerInfo.Has(capability) {
			return true
		}
	}
	return false
}

// RequireController returns nil when the plugin has a controller that
// advertises the capability, and otherwise an invalid-request error
// naming the plugin and what is missing; what says what the caller was
// about to do ("create snapshots").
func (p *CSIPlugin) RequireController(capability CSIControllerCapability, what string) error {
	if len(p.Controllers) == 0 {
		return ErrInvalid("plugin %q has no controller, so it cannot %s (controller capability %s)", p.ID, what, capability)
	}
	if !p.ControllerSupports(capability) {
		return ErrInvalid("plugin %q cannot %s: its controller does not advertise the %s capability", p.ID, what, capability)
	}
	return nil
}

// VolumeExpansion is the VolumeExpansion capability the plugin's
// controllers report: online if any says online.
func (p *CSIPlugin) VolumeExpansion() string {
	out := ""
	for _, c := range p.Controllers {
		if c == nil || c.ControllerInfo == nil {
			continue
		}
		switch c.ControllerInfo.VolumeExpansion {
		case CSIVolumeExpansionOnline:
			return CSIVolumeExpansionOnline
		case CSIVolumeExpansionOffline:
			out = CSIVolumeExpansionOffline
		}
	}
	return out
}

// UnschedulableReason says why the plugin's volumes cannot be claimed, or
// "" when they can: no healthy node plugin, or no healthy controller where
// one is required. A plugin row with no instances at all is kept only
// while volumes name it; the reason then says so.
func (p *CSIPlugin) UnschedulableReason() string {
	switch {
	case len(p.Nodes) == 0 && len(p.Controllers) == 0:
		return fmt.Sprintf("plugin %q has no healthy node plugins (0/0): no node runs it", p.ID)
	case p.NodesHealthy == 0:
		return fmt.Sprintf("plugin %q has no healthy node plugins (0/%d)", p.ID, p.NodesExpected)
	case p.ControllerRequired && p.ControllersHealthy == 0:
		return fmt.Sprintf("plugin %q requires a controller and has no healthy controllers (0/%d)", p.ID, p.ControllersExpected)
	}
	return ""
}

// Stub returns the list view.
func (p *CSIPlugin) Stub() *CSIPluginListStub {
	return &CSIPluginListStub{
		ID:                  p.ID,
		Provider:            p.Provider,
		Version:             p.Version,
		ControllerRequired:  p.ControllerRequired,
		ControllersHealthy:  p.ControllersHealthy,
		ControllersExpected: p.ControllersExpected,
		NodesHealthy:        p.NodesHealthy,
		NodesExpected:       p.NodesExpected,
		CreateIndex:         p.CreateIndex,
		ModifyIndex:         p.ModifyIndex,
	}
}

// CSIPluginListStub is the list view of a plugin.
type CSIPluginListStub struct {
	ID                  string
	Provider            string
	Version             string
	ControllerRequired  bool
	ControllersHealthy  int
	ControllersExpected int
	NodesHealthy        int
	NodesExpected       int
	CreateIndex         uint64
	ModifyIndex         uint64
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
