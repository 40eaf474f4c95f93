package server

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

func TestNodeEndpoint_RegisterDerivesPlugins(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	n1 := mock.NodeWithController("dev")
	n2 := mock.NodeWithController("dev")
	for _, n := range []*structs.Node{n1, n2} {
		var resp structs.NodeUpdateResponse
		must.NoError(t, s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: n}, &resp))
	}

	var plug structs.CSIPluginGetResponse
	must.NoError(t, s.RPC("CSIPlugin.Get", &structs.CSIPluginGetRequest{ID: "dev"}, &plug))
	must.NotNil(t, plug.Plugin)
	must.Eq(t, 2, plug.Plugin.NodesHealthy)
	must.Eq(t, 2, plug.Plugin.ControllersHealthy)
	must.True(t, plug.Plugin.ControllerRequired)

	// The node plugin on n1 turns unhealthy: counts follow.
	ctrl := mock.ControllerInfo("dev", true)
	node := mock.NodeInfo("dev", n1.ID, false)
	var resp structs.NodeUpdateResponse
	must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{
		NodeID: n1.ID, SecretID: n1.SecretID, Status: structs.NodeStatusReady,
		CSIControllerPlugins: map[string]*structs.CSIInfo{"dev": ctrl},
		CSINodePlugins:       map[string]*structs.CSIInfo{"dev": node},
	}, &resp))
	must.Eq(t, 10*time.Second, resp.HeartbeatTTL)
	must.NoError(t, s.RPC("CSIPlugin.Get", &structs.CSIPluginGetRequest{ID: "dev"}, &plug))
	must.Eq(t, 1, plug.Plugin.NodesHealthy)
	must.Eq(t, 2, plug.Plugin.NodesExpected)

	// A heartbeat that changes nothing writes nothing.
	before, _ := s.State().LatestIndex()
	must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{
		NodeID: n1.ID, SecretID: n1.SecretID, Status: structs.NodeStatusReady,
	}, &resp))
	after, _ := s.State().LatestIndex()
	must.Eq(t, before, after)

	var list structs.CSIPluginListResponse
	must.NoError(t, s.RPC("CSIPlugin.List", &structs.CSIPluginListRequest{}, &list))
	must.Len(t, 1, list.Plugins)
}

func TestNodeEndpoint_WrongSecret(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	n := registerNode(t, s, "dev")

	var resp structs.NodeUpdateResponse
	err := s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: n.ID, SecretID: "wrong"}, &resp)
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err))

	again := n.Copy()
	again.SecretID = "another"
	err = s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: again}, &resp)
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err))

	err = s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: "nope", SecretID: "x"}, &resp)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))

	var got structs.SingleNodeResponse
	must.NoError(t, s.RPC("Node.GetNode", &structs.NodeSpecificRequest{NodeID: n.ID}, &got))
	must.Eq(t, n.Name, got.Node.Name)
}

func TestCSIVolumeEndpoint_RegisterErrors(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	registerNode(t, s, "dev")

	cases := []struct {
		name string
		mod  func(v *structs.CSIVolume)
		code structs.ErrorCode
		msg  string
	}{
		{"no capability", func(v *structs.CSIVolume) { v.RequestedCapabilities = nil }, structs.ErrCodeInvalid, "must include at least one capability block"},
		{"unknown plugin", func(v *structs.CSIVolume) { v.PluginID = "nope" }, structs.ErrCodeNotFound, `no CSI plugin named "nope"`},
		{"bad access mode", func(v *structs.CSIVolume) { v.RequestedCapabilities[0].AccessMode = "everyone" }, structs.ErrCodeInvalid, `unknown access mode "everyone"`},
		{"slash in id", func(v *structs.CSIVolume) { v.ID = "a/b" }, structs.ErrCodeInvalid, "must not contain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.State().LatestIndex()
			vol := mock.CSIVolume("dev")
			tc.mod(vol)
			var resp structs.CSIVolumeRegisterResponse
			err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}}, &resp)
			must.Error(t, err)
			must.Eq(t, tc.code, structs.CodeOf(err))
			must.StrContains(t, err.Error(), tc.msg)
			after, _ := s.State().LatestIndex()
			must.Eq(t, before, after, must.Sprint("a refused register costs no raft entry"))
		})
	}

	t.Run("all or nothing", func(t *testing.T) {
		good, bad := mock.CSIVolume("dev"), mock.CSIVolume("nope")
		var resp structs.CSIVolumeRegisterResponse
		err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{good, bad}}, &resp)
		must.Error(t, err)
		must.Nil(t, getVolume(t, s, good.ID, false))
	})

	t.Run("immutable fields", func(t *testing.T) {
		vol := mock.CSIVolume("dev")
		registerVolume(t, s, vol)
		upd := vol.Copy()
		upd.ExternalID = "other"
		upd.Parameters = map[string]string{"class": "slow"}
		var resp structs.CSIVolumeRegisterResponse
		err := s.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{upd}}, &resp)
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
		must.StrContains(t, err.Error(), "external ID cannot be updated")
		must.StrContains(t, err.Error(), "parameters cannot be updated")
	})
}

func TestCSIVolumeEndpoint_DeregisterAndList(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	node := registerNode(t, s, "dev")
	a, b := mock.CSIVolume("dev"), mock.CSIVolume("dev")
	registerVolume(t, s, a)
	registerVolume(t, s, b)

	// Put a claim on a through the state store, as the claim endpoint will.
	alloc := &structs.Allocation{ID: mock.UniqueID("alloc"), Namespace: "default", Name: "j.g[0]",
		NodeID: node.ID, DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning}
	idx, _ := s.State().LatestIndex()
	must.NoError(t, s.State().UpsertAllocs(idx+1, []*structs.Allocation{alloc}))
	must.NoError(t, s.State().CSIVolumeClaim(idx+2, time.Now().UnixNano(), "default", a.ID, &structs.CSIVolumeClaim{
		AllocationID: alloc.ID, NodeID: node.ID, Mode: structs.CSIVolumeClaimWrite,
		AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}))

	var resp structs.CSIVolumeDeregisterResponse
	err := s.RPC("CSIVolume.Deregister", &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{a.ID}}, &resp)
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err))
	must.StrContains(t, err.Error(), alloc.ID)

	err = s.RPC("CSIVolume.Deregister", &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{a.ID}, Force: true}, &resp)
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err), must.Sprint("force needs the claiming allocation terminal"))

	err = s.RPC("CSIVolume.Deregister", &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{"missing"}}, &resp)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))

	var list structs.CSIVolumeListResponse
	must.NoError(t, s.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{NodeID: node.ID}, &list))
	must.Len(t, 1, list.Volumes)
	must.Eq(t, a.ID, list.Volumes[0].ID)
	must.Eq(t, 1, list.Volumes[0].CurrentWriters)

	must.NoError(t, s.RPC("CSIVolume.Deregister", &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{b.ID}}, &resp))
	must.Nil(t, getVolume(t, s, b.ID, false))

	// The allocation ends; now force works, with a warning.
	done := alloc.Copy()
	done.ClientStatus = structs.AllocClientStatusComplete
	idx, _ = s.State().LatestIndex()
	must.NoError(t, s.State().UpsertAllocs(idx+1, []*structs.Allocation{done}))
	must.NoError(t, s.RPC("CSIVolume.Deregister", &structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{a.ID}, Force: true}, &resp))
	must.Len(t, 1, resp.Warnings)
}

func TestOperatorEndpoint_RaftPeers(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)

	var cfg structs.RaftConfigurationResponse
	must.NoError(t, f[0].RPC("Operator.RaftListPeers", &structs.GenericRequest{}, &cfg))
	must.Len(t, 3, cfg.Servers)
	leaders := 0
	for _, srv := range cfg.Servers {
		if srv.Leader {
			leaders++
			must.Eq(t, leader.RPCAddr(), srv.Address)
		}
		must.NotEq(t, "", srv.Node)
	}
	must.Eq(t, 1, leaders)

	var resp structs.GenericResponse
	err := leader.RPC("Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: "nope"}, &resp)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))

	gone := f[1]
	must.NoError(t, gone.Shutdown())
	must.NoError(t, f[0].RPC("Operator.RaftRemovePeer", &structs.RaftPeerRequest{ID: gone.NodeID()}, &resp))
	must.NoError(t, leader.RPC("Operator.RaftListPeers", &structs.GenericRequest{}, &cfg))
	must.Len(t, 2, cfg.Servers)
}
