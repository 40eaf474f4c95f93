package server

import (
	"net"
	netrpc "net/rpc"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

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
}

func (a *agentEndpoint) record(m string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, m)
	if a.fail != "" {
		return structs.NewError(a.fail, "told to fail")
	}
	return nil
}

func (a *agentEndpoint) ControllerAttachVolume(args *structs.ClientCSIControllerAttachVolumeRequest, reply *structs.ClientCSIControllerAttachVolumeResponse) error {
	reply.PublishContext = map[string]string{"served-by": args.NodeID}
	return a.record("attach:" + args.NodeID)
}

func (a *agentEndpoint) NodeDetachVolume(args *structs.ClientCSINodeDetachVolumeRequest, reply *structs.ClientCSIEmptyResponse) error {
	return a.record("node-detach:" + args.VolumeID)
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
	srv := netrpc.NewServer()
	must.NoError(t, srv.RegisterName("ClientCSI", ep))
	pool := rpc.NewPool(rpc.PoolConfig{
		Logger: hclog.NewNullLogger(),
		AcceptStreams: func(conn net.Conn) {
			srv.ServeCodec(rpc.NewServerCodec(conn, 0))
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
	node := testutil.Node("dev")
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

	// A node call, made on the leader, reaches the same agent.
	err = leader.RPC("ClientCSI.NodeDetachVolume", &structs.ClientCSINodeDetachVolumeRequest{
		PluginID: "dev", VolumeID: "vol-1", AllocID: "a1", ClientCSITarget: structs.ClientCSITarget{NodeID: node.ID},
	}, &structs.ClientCSIEmptyResponse{})
	must.NoError(t, err)
	must.Eq(t, 2, ep.count())
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
	connectAgent(t, s, testutil.Node("dev"), retry)
	good := testutil.Node("dev")
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
