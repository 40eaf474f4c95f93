package server

import (
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

// lifecycleNode is a node running plugin id as controller and node, with
// every lifecycle capability unless edit takes some away.
func lifecycleNode(id string, edit func(c *structs.CSIControllerInfo, n *structs.CSINodeInfo)) *structs.Node {
	node := mock.NodeWithController(id)
	ci := node.CSIControllerPlugins[id].ControllerInfo
	ci.SupportsCreateDeleteSnapshot, ci.SupportsListSnapshots, ci.SupportsListVolumes = true, true, true
	ci.SupportsClone, ci.SupportsExpand = true, true
	ni := node.CSINodePlugins[id].NodeInfo
	ni.SupportsExpand = true
	if edit != nil {
		edit(ci, ni)
	}
	return node
}

// bareNode runs plugin id with attach and create only.
func bareNode(id string) *structs.Node { return mock.NodeWithController(id) }

// TestCSIVolume_Snapshots creates, lists, pages and deletes snapshots
// through a controller, with the request's secrets over the volume's, and
// refuses what cannot work: an unknown volume or plugin, a plugin without
// the capability (naming it), a garbage page token.
func TestCSIVolume_Snapshots(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	ep := &agentEndpoint{}
	connectAgent(t, s, lifecycleNode("dev", nil), ep)
	connectAgent(t, s, bareNode("bare"), &agentEndpoint{})
	registerVolume(t, s, namedVolume("src"))
	other := namedVolume("other")
	registerVolume(t, s, other)
	bareVol := namedVolume("bare-vol")
	bareVol.PluginID = "bare"
	registerVolume(t, s, bareVol)

	create := func(snaps ...*structs.CSISnapshot) (*structs.CSISnapshotCreateResponse, error) {
		var resp structs.CSISnapshotCreateResponse
		err := s.RPC("CSIVolume.CreateSnapshot", &structs.CSISnapshotCreateRequest{Snapshots: snaps}, &resp)
		return &resp, err
	}
	resp, err := create(&structs.CSISnapshot{SourceVolumeID: "src", Name: "nightly", Secrets: structs.CSISecrets{"token": "call-secret"}})
	must.NoError(t, err)
	must.Len(t, 1, resp.Snapshots)
	got := resp.Snapshots[0]
	must.Eq(t, &structs.CSISnapshot{ID: "snap-nightly", ExternalSourceVolumeID: "ext-src", SourceVolumeID: "src", PluginID: "dev",
		SizeBytes: 1 << 20, CreateTime: 1700000000, IsReady: true}, got)
	must.Eq(t, []string{"snapshot:ext-src:nightly:call-secret"}, ep.callsWith("snapshot:"),
		must.Sprint("the request's secrets win over the volume's"))

	// Without a name the volume's own secrets go, under a generated name.
	resp, err = create(&structs.CSISnapshot{SourceVolumeID: "other"})
	must.NoError(t, err)
	must.StrHasPrefix(t, "snap-other-", resp.Snapshots[0].ID)
	must.StrHasSuffix(t, ":s3cr3t-token", ep.callsWith("snapshot:ext-other")[0])

	_, err = create(&structs.CSISnapshot{SourceVolumeID: "missing"})
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	_, err = create(&structs.CSISnapshot{SourceVolumeID: "src", PluginID: "bare"})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	_, err = create(&structs.CSISnapshot{SourceVolumeID: "bare-vol"})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), `plugin "bare"`)
	must.StrContains(t, err.Error(), "CREATE_DELETE_SNAPSHOT")
	_, err = create(nil)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	_, err = create()
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	// One fails, the other is made; the error says both.
	_, err = create(&structs.CSISnapshot{SourceVolumeID: "src", Name: "second"}, &structs.CSISnapshot{SourceVolumeID: "missing"})
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "1 snapshots created (snap-second of volume src)")

	list := func(pluginID, token string, perPage int32) (*structs.CSISnapshotListResponse, error) {
		var resp structs.CSISnapshotListResponse
		req := &structs.CSISnapshotListRequest{PluginID: pluginID, Secrets: structs.CSISecrets{"token": "list-secret"}}
		req.NextToken, req.PerPage = token, perPage
		err := s.RPC("CSIVolume.ListSnapshots", req, &resp)
		return &resp, err
	}
	var ids []string
	token := ""
	for range 5 {
		page, err := list("dev", token, 2)
		must.NoError(t, err)
		must.LessEq(t, 2, len(page.Snapshots))
		for _, snap := range page.Snapshots {
			ids = append(ids, snap.ID)
			if snap.ID == "snap-nightly" {
				must.Eq(t, "src", snap.SourceVolumeID, must.Sprint("a snapshot names the registered volume it was taken of"))
			}
		}
		if token = page.NextToken; token == "" {
			break
		}
	}
	must.Len(t, 3, ids)
	must.SliceContains(t, ids, "snap-nightly")
	must.SliceContains(t, ids, "snap-second")
	must.SliceContains(t, ep.callsWith("list-snapshots"), "list-snapshots:list-secret")

	_, err = list("dev", "garbage", 0)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "garbage")
	_, err = list("nope", "", 0)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	_, err = list("", "", 0)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	_, err = list("dev", "", -1)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	_, err = list("bare", "", 0)
	must.StrContains(t, err.Error(), "LIST_SNAPSHOTS")

	del := func(pluginID, id string) error {
		return s.RPC("CSIVolume.DeleteSnapshot", &structs.CSISnapshotDeleteRequest{Snapshots: []*structs.CSISnapshot{
			{PluginID: pluginID, ID: id, Secrets: structs.CSISecrets{"token": "del-secret"}}}}, &structs.CSISnapshotDeleteResponse{})
	}
	must.NoError(t, del("dev", "snap-nightly"))
	must.Eq(t, []string{"delete-snapshot:snap-nightly:del-secret"}, ep.callsWith("delete-snapshot"))
	page, err := list("dev", "", 0)
	must.NoError(t, err)
	must.Len(t, 2, page.Snapshots)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(del("", "snap-x")))
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(del("nope", "snap-x")))
	must.StrContains(t, del("bare", "snap-x").Error(), "CREATE_DELETE_SNAPSHOT")
}

// TestCSIVolume_ListExternal lists the provider's volumes a page at a time,
// naming the registered volume of each external ID.
func TestCSIVolume_ListExternal(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	ep := &agentEndpoint{}
	connectAgent(t, s, lifecycleNode("dev", nil), ep)
	connectAgent(t, s, bareNode("bare"), &agentEndpoint{})
	registerVolume(t, s, namedVolume("a"))
	ep.addProviderVolume("ext-unregistered")

	list := func(pluginID, token string, perPage int32) (*structs.CSIVolumeExternalListResponse, error) {
		var resp structs.CSIVolumeExternalListResponse
		req := &structs.CSIVolumeExternalListRequest{PluginID: pluginID}
		req.NextToken, req.PerPage = token, perPage
		err := s.RPC("CSIVolume.ListExternal", req, &resp)
		return &resp, err
	}
	first, err := list("dev", "", 1)
	must.NoError(t, err)
	must.Len(t, 1, first.Volumes)
	must.Eq(t, "ext-a", first.Volumes[0].ExternalID)
	must.Eq(t, "a", first.Volumes[0].VolumeID)
	must.Eq(t, structs.DefaultNamespace, first.Volumes[0].Namespace)
	must.NotEq(t, "", first.NextToken)
	second, err := list("dev", first.NextToken, 1)
	must.NoError(t, err)
	must.Len(t, 1, second.Volumes)
	must.Eq(t, "ext-unregistered", second.Volumes[0].ExternalID)
	must.Eq(t, "", second.Volumes[0].VolumeID)
	must.Eq(t, "", second.NextToken)

	_, err = list("dev", "garbage", 0)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	_, err = list("nope", "", 0)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	_, err = list("bare", "", 0)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "LIST_VOLUMES")
	_, err = list("dev", "", structs.MaxPerPage+1)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
}

// TestCSIVolume_ExpandOnRegister: registering a volume again with a larger
// capacity_min grows it through its controller once, and the capacity is
// stored; the same request again calls nothing; a capacity_max below the
// capacity is refused, naming it; a capacity in the update is not taken;
// a plugin without EXPAND_VOLUME is refused, naming it.
func TestCSIVolume_ExpandOnRegister(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	ep := &agentEndpoint{}
	connectAgent(t, s, lifecycleNode("dev", nil), ep)
	connectAgent(t, s, bareNode("bare"), &agentEndpoint{})
	vol := namedVolume("grow")
	registerVolume(t, s, vol)

	register := func(v *structs.CSIVolume) (*structs.CSIVolumeRegisterResponse, error) {
		var resp structs.CSIVolumeRegisterResponse
		err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{v}}, &resp)
		return &resp, err
	}
	update := vol.Copy()
	update.RequestedCapacityMin, update.RequestedCapacityMax = 2<<30, 4<<30
	resp, err := register(update)
	must.NoError(t, err)
	must.SliceEmpty(t, resp.Warnings, must.Sprint("not in use: nothing to warn about"))
	must.Eq(t, []string{"expand:ext-grow:2147483648"}, ep.callsWith("expand:"))
	got := getVolume(t, s, "grow", false)
	must.Eq(t, int64(2<<30), got.Capacity)
	must.Eq(t, []int64{2 << 30, 4 << 30}, []int64{got.RequestedCapacityMin, got.RequestedCapacityMax})

	_, err = register(update)
	must.NoError(t, err)
	must.Len(t, 1, ep.callsWith("expand:"), must.Sprint("the same request again expands nothing"))

	inflated := update.Copy()
	inflated.Capacity = 1 << 40
	_, err = register(inflated)
	must.NoError(t, err)
	must.Eq(t, int64(2<<30), getVolume(t, s, "grow", false).Capacity, must.Sprint("the capacity is the plugin's to say"))

	shrink := update.Copy()
	shrink.RequestedCapacityMin, shrink.RequestedCapacityMax = 0, 1<<30
	_, err = register(shrink)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "current capacity of 2147483648 bytes")

	bareVol := namedVolume("bare-vol")
	bareVol.PluginID = "bare"
	registerVolume(t, s, bareVol)
	bareVol.RequestedCapacityMin = 1 << 30
	_, err = register(bareVol)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), `plugin "bare"`)
	must.StrContains(t, err.Error(), "EXPAND_VOLUME")
	must.Zero(t, getVolume(t, s, "bare-vol", false).RequestedCapacityMin, must.Sprint("a refused expansion stores nothing"))

	// Create of a volume that exists expands it as register does; a spec
	// without the external ID means the registered one, which is the one
	// validated.
	bigger := update.Copy()
	bigger.ExternalID = ""
	bigger.RequestedCapacityMin, bigger.RequestedCapacityMax = 3<<30, 4<<30
	must.NoError(t, s.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{bigger}},
		&structs.CSIVolumeCreateResponse{}))
	must.Eq(t, int64(3<<30), getVolume(t, s, "grow", false).Capacity)
	must.SliceNotContains(t, ep.callsWith("validate:"), "validate:grow")
}

// TestCSIVolume_ExpandInUse: a volume in use is not expanded by a plugin
// that expands offline (the refusal says so); once the plugin says ONLINE,
// it is, with a warning, and, when the controller says node expansion is
// required, on the node that uses it.
func TestCSIVolume_ExpandInUse(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	node := lifecycleNode("dev", func(c *structs.CSIControllerInfo, _ *structs.CSINodeInfo) {
		c.VolumeExpansion = structs.CSIVolumeExpansionOffline
	})
	ep := &agentEndpoint{}
	connectAgent(t, s, node, ep)
	keepAlive(t, s, node)
	vol := namedVolume("busy")
	registerVolume(t, s, vol)
	req := &structs.VolumeRequest{Source: "busy", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	must.NoError(t, registerJob(t, s, volumeJob("holder", 1, &structs.VolumeRequest{Source: "busy",
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter})))
	var alloc *structs.Allocation
	for _, a := range waitPlaced(t, s, "holder", 1) {
		alloc = a
	}
	_, err := claimFor(t, s, node, alloc, "busy", req)
	must.NoError(t, err)

	update := vol.Copy()
	update.RequestedCapacityMin = 2 << 30
	register := func() (*structs.CSIVolumeRegisterResponse, error) {
		var resp structs.CSIVolumeRegisterResponse
		err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{update}}, &resp)
		return &resp, err
	}
	_, err = register()
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "OFFLINE")
	must.StrContains(t, err.Error(), alloc.ID)
	must.SliceEmpty(t, ep.callsWith("expand:"))

	// The plugin now says ONLINE.
	ctrl := node.CSIControllerPlugins["dev"].Copy()
	ctrl.ControllerInfo.VolumeExpansion = structs.CSIVolumeExpansionOnline
	must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: node.ID, SecretID: node.SecretID,
		Status: structs.NodeStatusReady, CSIControllerPlugins: map[string]*structs.CSIInfo{"dev": ctrl}}, &structs.NodeUpdateResponse{}))
	ep.setNodeExpansion(true)
	resp, err := register()
	must.NoError(t, err)
	must.Len(t, 1, resp.Warnings)
	must.StrContains(t, resp.Warnings[0], "expanded online")
	must.Eq(t, []string{"expand:ext-busy:2147483648:single-node-writer"}, ep.callsWith("expand:"),
		must.Sprint("a volume in use is expanded with its capability"))
	must.Eq(t, []string{"node-expand:ext-busy:" + alloc.ID + ":2147483648"}, ep.callsWith("node-expand:"))
	must.Eq(t, int64(2<<30), getVolume(t, s, "busy", false).Capacity)

	// A node plugin without EXPAND_VOLUME, where node expansion is
	// required, fails the update, naming the node and the capability.
	ni := node.CSINodePlugins["dev"].Copy()
	ni.NodeInfo.SupportsExpand = false
	must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: node.ID, SecretID: node.SecretID,
		Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{"dev": ni}}, &structs.NodeUpdateResponse{}))
	update.RequestedCapacityMin = 3 << 30
	_, err = register()
	must.Error(t, err)
	must.True(t, strings.Contains(err.Error(), node.ID) && strings.Contains(err.Error(), "EXPAND_VOLUME"), must.Sprint(err))
	must.Eq(t, int64(2<<30), getVolume(t, s, "busy", false).Capacity, must.Sprint("recorded once every node grew it"))
}
