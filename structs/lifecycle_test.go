package structs

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// TestMerge_Capacity: an update never lowers the capacity, takes a higher
// one (an expansion's answer), and is refused when its capacity_max is
// below the capacity, naming it.
func TestMerge_Capacity(t *testing.T) {
	v := testVolume()
	v.Capacity = 2048
	upd := testVolume()

	upd.Capacity = 0
	got, err := v.Merge(upd)
	must.NoError(t, err)
	must.Eq(t, int64(2048), got.Capacity, must.Sprint("an update without a capacity keeps it"))

	upd.Capacity = 4096
	got, err = v.Merge(upd)
	must.NoError(t, err)
	must.Eq(t, int64(4096), got.Capacity)

	upd.Capacity, upd.RequestedCapacityMin, upd.RequestedCapacityMax = 0, 0, 1024
	_, err = v.Merge(upd)
	must.Eq(t, ErrCodeInvalid, CodeOf(err))
	must.StrContains(t, err.Error(), "current capacity of 2048 bytes")

	upd.RequestedCapacityMax = 2048
	got, err = v.Merge(upd)
	must.NoError(t, err, must.Sprint("a maximum equal to the capacity is fine"))
	must.Eq(t, int64(2048), got.RequestedCapacityMax)
}

func TestCSIPlugin_Capabilities(t *testing.T) {
	p := NewCSIPlugin("dev", 1)
	err := p.RequireController(CSIControllerCreateDeleteSnapshot, "create snapshots")
	must.Eq(t, ErrCodeInvalid, CodeOf(err))
	must.StrContains(t, err.Error(), `plugin "dev" has no controller`)
	must.StrContains(t, err.Error(), "CREATE_DELETE_SNAPSHOT")

	p.SetInstances("n1", &CSIInfo{PluginID: "dev", Healthy: true, ControllerInfo: &CSIControllerInfo{SupportsListVolumes: true,
		VolumeExpansion: CSIVolumeExpansionOffline}}, nil)
	must.NoError(t, p.RequireController(CSIControllerListVolumes, "list its volumes"))
	err = p.RequireController(CSIControllerExpandVolume, "expand volumes")
	must.StrContains(t, err.Error(), "does not advertise the EXPAND_VOLUME capability")
	must.Eq(t, CSIVolumeExpansionOffline, p.VolumeExpansion())
	p.SetInstances("n2", &CSIInfo{PluginID: "dev", ControllerInfo: &CSIControllerInfo{VolumeExpansion: CSIVolumeExpansionOnline}}, nil)
	must.Eq(t, CSIVolumeExpansionOnline, p.VolumeExpansion(), must.Sprint("online if any controller says so"))

	for c, set := range map[CSIControllerCapability]func(*CSIControllerInfo){
		CSIControllerCreateDeleteVolume:   func(i *CSIControllerInfo) { i.SupportsCreateDelete = true },
		CSIControllerPublishUnpublish:     func(i *CSIControllerInfo) { i.SupportsAttachDetach = true },
		CSIControllerListVolumes:          func(i *CSIControllerInfo) { i.SupportsListVolumes = true },
		CSIControllerCreateDeleteSnapshot: func(i *CSIControllerInfo) { i.SupportsCreateDeleteSnapshot = true },
		CSIControllerListSnapshots:        func(i *CSIControllerInfo) { i.SupportsListSnapshots = true },
		CSIControllerCloneVolume:          func(i *CSIControllerInfo) { i.SupportsClone = true },
		CSIControllerExpandVolume:         func(i *CSIControllerInfo) { i.SupportsExpand = true },
	} {
		info := &CSIControllerInfo{}
		must.False(t, info.Has(c), must.Sprint(c))
		set(info)
		must.True(t, info.Has(c), must.Sprint(c))
	}
	var none *CSIControllerInfo
	must.False(t, none.Has(CSIControllerListVolumes))
	must.True(t, (&CSINodeInfo{RequiresNodeStageVolume: true}).Has(CSINodeStageUnstageVolume))
	must.True(t, (&CSINodeInfo{SupportsExpand: true}).Has(CSINodeExpandVolume))
	var noNode *CSINodeInfo
	must.False(t, noNode.Has(CSINodeExpandVolume))
}

func TestCSIPlugin_UnschedulableReason(t *testing.T) {
	p := NewCSIPlugin("dev", 1)
	must.Eq(t, `plugin "dev" has no healthy node plugins (0/0): no node runs it`, p.UnschedulableReason())
	p.SetInstances("n1", nil, &CSIInfo{PluginID: "dev", NodeInfo: &CSINodeInfo{ID: "x"}})
	must.Eq(t, `plugin "dev" has no healthy node plugins (0/1)`, p.UnschedulableReason())
	p.SetInstances("n1", nil, &CSIInfo{PluginID: "dev", Healthy: true, RequiresControllerPlugin: true, NodeInfo: &CSINodeInfo{ID: "x"}})
	must.Eq(t, `plugin "dev" requires a controller and has no healthy controllers (0/0)`, p.UnschedulableReason())
	p.SetInstances("n1", &CSIInfo{PluginID: "dev", Healthy: true, ControllerInfo: &CSIControllerInfo{}},
		&CSIInfo{PluginID: "dev", Healthy: true, RequiresControllerPlugin: true, NodeInfo: &CSINodeInfo{ID: "x"}})
	must.Eq(t, "", p.UnschedulableReason())
}

func TestNode_DueForGC(t *testing.T) {
	at := time.Unix(1700000000, 0)
	n := &Node{Status: NodeStatusReady, StatusUpdatedAt: at.UnixNano()}
	must.True(t, n.DueForGC(time.Hour).IsZero())
	n.Status = NodeStatusDown
	must.Eq(t, at.Add(time.Hour), n.DueForGC(time.Hour))
	must.True(t, n.DueForGC(0).IsZero(), must.Sprint("no threshold, no schedule"))
}
