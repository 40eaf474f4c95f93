package server

import (
	"net"
	netrpc "net/rpc"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/clientrpc"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// agentEndpoint stands in for a client agent's ClientCSI endpoint: these
// tests are about the servers finding the agent, not about the plugin.
type agentEndpoint struct {
	mu    sync.Mutex
	calls []string
	fail  structs.ErrorCode
	// failOnly, when set, limits fail to calls whose record starts with it.
	failOnly string
	// provider is the storage the lifecycle calls see (lifecycle_test.go).
	provider fakeProvider
}

func (a *agentEndpoint) record(m string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, m)
	if a.fail != "" && strings.HasPrefix(m, a.failOnly) {
		return structs.NewError(a.fail, "told to fail")
	}
	return nil
}

func (a *agentEndpoint) setFail(code structs.ErrorCode, only string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fail, a.failOnly = code, only
}

func (a *agentEndpoint) callsWith(prefix string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, c := range a.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func (a *agentEndpoint) ControllerDetachVolume(args *structs.ClientCSIControllerDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	return a.record("controller-detach:" + args.VolumeID + ":" + args.ClientCSINodeID)
}

func (a *agentEndpoint) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	reply.PublishContext = map[string]string{"served-by": args.NodeID}
	return a.record("attach:" + args.NodeID)
}

func (a *agentEndpoint) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	return a.record("node-detach:" + args.VolumeID)
}

func (a *agentEndpoint) ControllerValidateVolume(args *structs.ClientCSIControllerValidateVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	if err := a.record("validate:" + args.VolumeID); err != nil {
		return err
	}
	// The provider holds what it validated (ListVolumes lists it).
	a.addProviderVolume(args.VolumeID)
	return nil
}

func (a *agentEndpoint) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// connectAgent registers node through server s over a yamux session whose
// streams from the server are served by ep, as a client agent's are.
func connectAgent(t *testing.T, s *Server, node *structs.Node, ep *agentEndpoint) *rpc.ConnPool {
	t.Helper()
	return connectAgentServing(t, s, node, ep, nil)
}

// connectAgentServing is connectAgent with any ClientCSI endpoint; with
// calls set, the streams give the calls their contexts, as a client
// agent's do.
func connectAgentServing(t *testing.T, s *Server, node *structs.Node, ep any, calls *clientrpc.Calls) *rpc.ConnPool {
	t.Helper()
	srv := netrpc.NewServer()
	must.NoError(t, srv.RegisterName("ClientCSI", ep))
	pool := rpc.NewPool(rpc.PoolConfig{
		Logger: hclog.NewNullLogger(),
		AcceptStreams: func(conn net.Conn) {
			codec := rpc.NewServerCodec(conn, 0)
			if calls != nil {
				codec = calls.ServerCodec(codec)
			}
			srv.ServeCodec(codec)
		},
	})
	t.Cleanup(func() { pool.Close() })
	var resp structs.NodeUpdateResponse
	must.NoError(t, pool.RPC(s.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: node}, &resp))
	return pool
}

func TestClientCSI_CallReachesAgentThroughAnotherServer(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)
	agentServer, caller := f[0], f[1]

	ep := &agentEndpoint{}
	node := mock.NodeWithController("dev")
	connectAgent(t, agentServer, node, ep)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		p, err := caller.State().CSIPluginByID(nil, "dev")
		return p != nil && p.ControllersHealthy == 1, err
	})

	var resp structs.ClientCSIControllerAttachVolumeResponse
	err := caller.RPC("ClientCSI.ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: "ext-1", ClientCSINodeID: "ext-node",
	}, &resp)
	must.NoError(t, err)
	must.Eq(t, node.ID, resp.PublishContext["served-by"])

	// An error comes back through both servers named once.
	ep.fail = structs.ErrCodeInvalid
	err = caller.RPC("ClientCSI.ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: "ext-1", ClientCSINodeID: "ext-node",
	}, &resp)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.Eq(t, 1, strings.Count(err.Error(), "controller attach volume"), must.Sprint(err.Error()))
	ep.mu.Lock()
	ep.fail = ""
	ep.calls = nil
	ep.mu.Unlock()

	// A node call, made on the leader, reaches the same agent.
	err = leader.RPC("ClientCSI.NodeDetachVolume", &structs.ClientCSINodeDetachVolumeRequest{
		PluginID: "dev", VolumeID: "vol-1", AllocID: "a1", ClientCSITarget: structs.ClientCSITarget{NodeID: node.ID},
	}, &structs.ClientCSIEmptyResponse{})
	must.NoError(t, err)
	must.Eq(t, 1, ep.count())
}

func TestClientCSI_NoPathAndControllerOrder(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)

	// A node known to state but whose agent holds no session anywhere.
	ghost := registerNode(t, s, "dev")
	err := s.RPC("ClientCSI.NodeDetachVolume", &structs.ClientCSINodeDetachVolumeRequest{
		PluginID: "dev", VolumeID: "v", AllocID: "a", ClientCSITarget: structs.ClientCSITarget{NodeID: ghost.ID},
	}, &structs.ClientCSIEmptyResponse{})
	must.Eq(t, structs.ErrCodeNoNodeConn, structs.CodeOf(err))
	must.StrContains(t, err.Error(), ghost.ID)

	// Two connected agents: one asks to retry, the other serves. Whatever
	// the order, the call lands on the one that serves.
	retry, serve := &agentEndpoint{fail: structs.ErrCodeRetryable}, &agentEndpoint{}
	connectAgent(t, s, mock.NodeWithController("dev"), retry)
	good := mock.NodeWithController("dev")
	connectAgent(t, s, good, serve)

	var resp structs.ClientCSIControllerAttachVolumeResponse
	must.NoError(t, s.RPC("ClientCSI.ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: "ext-1", ClientCSINodeID: "ext-node",
	}, &resp))
	must.Eq(t, good.ID, resp.PublishContext["served-by"])

	// A final error from the controller is returned as it is.
	serve.fail = structs.ErrCodeInvalid
	retry.fail = structs.ErrCodeInvalid
	err = s.RPC("ClientCSI.ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "dev", VolumeID: "ext-1", ClientCSINodeID: "ext-node",
	}, &resp)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "controller attach volume")

	err = s.RPC("ClientCSI.ControllerAttachVolume", &structs.ClientCSIControllerAttachVolumeRequest{
		PluginID: "nope", VolumeID: "ext-1", ClientCSINodeID: "ext-node",
	}, &resp)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
}

func (a *agentEndpoint) ControllerCreateVolume(args *structs.ClientCSIControllerCreateVolumeRequest, reply *structs.ClientCSIControllerCreateVolumeResponse) error {
	if err := a.record("create:" + args.Name); err != nil {
		return err
	}
	reply.ExternalVolumeID = "plugin-" + args.Name
	reply.CapacityBytes = args.CapacityMin
	reply.VolumeContext = map[string]string{"created": "yes"}
	return nil
}

func (a *agentEndpoint) ControllerDeleteVolume(args *structs.ClientCSIControllerDeleteVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	return a.record("delete:" + args.VolumeID + ":" + args.Secrets["token"])
}

func TestCSIVolume_CreateAndDelete(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	ep := &agentEndpoint{}
	connectAgent(t, s, mock.NodeWithController("dev"), ep)

	good := mock.CSIVolume("dev")
	good.ExternalID = ""
	good.RequestedCapacityMin = 1 << 30
	bad := mock.CSIVolume("nope")
	var resp structs.CSIVolumeCreateResponse
	err := s.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{good, bad}}, &resp)
	must.Error(t, err, must.Sprint("the volume of an unknown plugin fails"))
	must.StrContains(t, err.Error(), "1 of 2 volumes created")
	must.StrContains(t, err.Error(), bad.ID)
	must.StrContains(t, err.Error(), "("+good.ID+")")

	got := getVolume(t, s, good.ID, false)
	must.NotNil(t, got)
	must.Eq(t, "plugin-"+good.Name, got.ExternalID)
	must.Eq(t, int64(1<<30), got.Capacity)
	must.Eq(t, "yes", got.Context["created"])
	must.Nil(t, getVolume(t, s, bad.ID, false))

	// Without failures the reply carries the created volume, sanitized.
	more := mock.CSIVolume("dev")
	must.NoError(t, s.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{more}}, &resp))
	must.Len(t, 1, resp.Volumes)
	must.Nil(t, resp.Volumes[0].Secrets)
	must.NoError(t, s.RPC("CSIVolume.Delete", &structs.CSIVolumeDeleteRequest{VolumeIDs: []string{more.ID}}, &structs.CSIVolumeDeleteResponse{}))
	ep.mu.Lock()
	ep.calls = nil
	ep.mu.Unlock()

	var del structs.CSIVolumeDeleteResponse
	must.NoError(t, s.RPC("CSIVolume.Delete", &structs.CSIVolumeDeleteRequest{VolumeIDs: []string{good.ID}}, &del))
	must.Nil(t, getVolume(t, s, good.ID, false))
	ep.mu.Lock()
	must.Eq(t, []string{"delete:plugin-" + good.Name + ":s3cr3t-token"}, ep.calls)
	ep.mu.Unlock()

	err = s.RPC("CSIVolume.Delete", &structs.CSIVolumeDeleteRequest{VolumeIDs: []string{good.ID}}, &del)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))

	// The plugin failing the delete leaves the volume registered.
	vol := mock.CSIVolume("dev")
	registerVolume(t, s, vol)
	ep.fail = structs.ErrCodeInternal
	err = s.RPC("CSIVolume.Delete", &structs.CSIVolumeDeleteRequest{VolumeIDs: []string{vol.ID}}, &del)
	must.Error(t, err)
	must.NotNil(t, getVolume(t, s, vol.ID, false))
}
