package server

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
	"github.com/volplane/volplane/tlsutil"
)

// TestRPCAccess_EveryEndpoint: every method net/rpc would serve has a row
// in the role table, and the table names no method that does not exist.
func TestRPCAccess_EveryEndpoint(t *testing.T) {
	s := &Server{logger: hclog.NewNullLogger()}
	errType := reflect.TypeFor[error]()
	var served []string
	for name, rcvr := range s.endpoints(nil) {
		typ := reflect.TypeOf(rcvr)
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			// net/rpc's rule: exported, (receiver, args, *reply) error.
			if !m.IsExported() || m.Type.NumIn() != 3 || m.Type.NumOut() != 1 ||
				m.Type.In(2).Kind() != reflect.Pointer || m.Type.Out(0) != errType {
				continue
			}
			method := name + "." + m.Name
			served = append(served, method)
			if _, ok := rpcAccess[method]; !ok {
				t.Errorf("RPC method %s has no row in rpcAccess (server/authz.go)", method)
			}
		}
	}
	for method := range rpcAccess {
		if !slices.Contains(served, method) {
			t.Errorf("rpcAccess names %s, which no endpoint serves", method)
		}
	}
}

// tlsCluster starts n servers with server certificates from files.
func tlsCluster(t *testing.T, files *testutil.TLSFiles, n int) []*Server {
	return TestCluster(t, n, func(i int, c *Config) {
		c.TLS = files.Configurator(t, files.Server)
	})
}

func tlsClientPool(t *testing.T, c *tlsutil.Configurator) *rpc.ConnPool {
	p := rpc.NewPool(rpc.PoolConfig{Logger: hclog.NewNullLogger(), DialTimeout: 5 * time.Second,
		CallTimeout: 10 * time.Second, TLS: c.OutgoingRPC})
	t.Cleanup(func() { p.Close() })
	return p
}

func TestTLS_ClusterAndRoles(t *testing.T) {
	files := testutil.NewTLSFiles(t)
	servers := tlsCluster(t, files, 3)
	leader := WaitForLeader(t, servers...)
	follower := servers[0]
	if follower == leader {
		follower = servers[1]
	}

	// A client agent's certificate registers its node, through a follower
	// that forwards to the leader over TLS.
	client := tlsClientPool(t, files.Configurator(t, files.Client))
	node := mock.NodeWithController("dev")
	var reg structs.NodeUpdateResponse
	must.NoError(t, client.RPC(follower.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: node}, &reg))
	must.SliceLen(t, 3, reg.Servers)

	denied := func(t *testing.T, err error) {
		t.Helper()
		must.Error(t, err)
		must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err))
		must.StrContains(t, err.Error(), "Permission denied")
	}
	t.Run("client certificate calls server-only endpoints", func(t *testing.T) {
		for method, args := range map[string]any{
			"ClientCSI.ControllerDetachVolume": &structs.ClientCSIControllerDetachVolumeRequest{PluginID: "dev"},
			"ClientCSI.NodeDetachVolume":       &structs.ClientCSINodeDetachVolumeRequest{},
			"Operator.RaftRemovePeer":          &structs.RaftPeerRequest{ID: string(follower.NodeID())},
			"Status.Join":                      &structs.StatusJoinRequest{Member: structs.ServerMember{ID: "x", RPCAddr: "127.0.0.1:1"}},
			"CSIVolume.Register":               &structs.CSIVolumeRegisterRequest{},
			"Job.Register":                     &structs.JobRegisterRequest{},
		} {
			denied(t, client.RPC(leader.RPCAddr(), method, args, &struct{}{}))
		}
		// Nothing happened: the peer is still there.
		f := leader.Raft().GetConfiguration()
		must.NoError(t, f.Error())
		must.SliceLen(t, 3, f.Configuration().Servers)
	})
	t.Run("client certificate poses as a forwarding server", func(t *testing.T) {
		args := &structs.NodeRegisterRequest{Node: node}
		args.SetForwarded()
		denied(t, client.RPC(leader.RPCAddr(), "Node.Register", args, &reg))
	})
	t.Run("CLI certificate on the RPC port", func(t *testing.T) {
		cli := tlsClientPool(t, files.Configurator(t, files.CLI))
		denied(t, cli.RPC(leader.RPCAddr(), "Node.Register", &structs.NodeRegisterRequest{Node: mock.Node("dev")}, &reg))
	})
	t.Run("plaintext", func(t *testing.T) {
		plain := rpc.NewPool(rpc.PoolConfig{Logger: hclog.NewNullLogger(), DialTimeout: 2 * time.Second, CallTimeout: 2 * time.Second})
		defer plain.Close()
		err := plain.RPC(leader.RPCAddr(), "Status.Ping", &structs.GenericRequest{}, &struct{}{})
		must.True(t, rpc.IsConnError(err))
	})
	t.Run("raft stream without a server certificate", func(t *testing.T) {
		for name, c := range map[string]*tlsutil.Configurator{
			"client": files.Configurator(t, files.Client),
			"cli":    files.Configurator(t, files.CLI),
		} {
			layer := rpc.NewRaftLayer(&net.TCPAddr{}, c.OutgoingRPC)
			conn, err := layer.Dial(raft.ServerAddress(follower.RPCAddr()), 5*time.Second)
			must.NoError(t, err, must.Sprint(name))
			must.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
			_, err = conn.Read(make([]byte, 1))
			must.Error(t, err, must.Sprintf("%s: the server must close a Raft stream it refuses", name))
			var ne net.Error
			must.False(t, errors.As(err, &ne) && ne.Timeout(), must.Sprintf("%s: the connection was left open", name))
			conn.Close()
		}
	})
	// The cluster still works after every refusal.
	var vols structs.CSIVolumeListResponse
	must.NoError(t, follower.RPC("CSIVolume.List", &structs.CSIVolumeListRequest{}, &vols))
	for _, s := range servers {
		f := s.Raft().GetConfiguration()
		must.NoError(t, f.Error())
		must.SliceLen(t, 3, f.Configuration().Servers, must.Sprint(fmt.Sprintf("server %s", s.config.NodeName)))
	}
}
