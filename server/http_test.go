package server

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestHTTP_NomadClientCompat runs Nomad's official Go client against the
// HTTP API of a real 3-server cluster, through a follower, so forwarding,
// Raft and the state store are all in the path.
func TestHTTP_NomadClientCompat(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]

	httpapitest.RunNomadClientCompat(t, "http://"+f.HTTPAddr(), func(t *testing.T, fx *httpapitest.Fixture) {
		var resp structs.NodeUpdateResponse
		must.NoError(t, f.RPC("Node.Register", &structs.NodeRegisterRequest{Node: fx.Node}, &resp))
		// The suite reads the node with ?stale from this follower.
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			n, err := f.State().NodeByID(nil, fx.Node.ID)
			return n != nil, err
		})
		fx.Leader = leader.RPCAddr()
		for _, s := range servers {
			fx.Peers = append(fx.Peers, s.RPCAddr())
		}
	})
}
