package server

import (
	"testing"
	"time"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
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
		// The fixture's plugin has a controller, which validates volumes
		// at registration: its agent is connected, as a real one is.
		connectAgent(t, f, fx.Node, &agentEndpoint{})
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

// TestHTTP_CreateDeleteWithNomadClient creates and deletes a volume through
// a controller with Nomad's client: PUT .../create and DELETE .../delete
// with the secrets header.
func TestHTTP_CreateDeleteWithNomadClient(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	ep := &agentEndpoint{}
	connectAgent(t, s, mock.NodeWithController("dev"), ep)

	cfg := nomad.DefaultConfig()
	cfg.Address = "http://" + s.HTTPAddr()
	client, err := nomad.NewClient(cfg)
	must.NoError(t, err)

	vols, wm, err := client.CSIVolumes().Create(&nomad.CSIVolume{
		ID: "web", Name: "web", PluginID: "dev",
		RequestedCapacityMin: 1 << 20,
		RequestedCapabilities: []*nomad.CSIVolumeCapability{{
			AccessMode: nomad.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: nomad.CSIVolumeAttachmentModeFilesystem,
		}},
		Secrets: nomad.CSISecrets{"token": "create-secret"},
	}, nil)
	must.NoError(t, err)
	must.Positive(t, wm.LastIndex)
	must.Len(t, 1, vols)
	must.Eq(t, "plugin-web", vols[0].ExternalID)
	must.MapLen(t, 0, vols[0].Secrets)

	must.NoError(t, client.CSIVolumes().DeleteOpts(&nomad.CSIVolumeDeleteRequest{
		ExternalVolumeID: "web", Secrets: nomad.CSISecrets{"token": "override"},
	}, nil))
	must.Nil(t, getVolume(t, s, "web", false))
	ep.mu.Lock()
	defer ep.mu.Unlock()
	must.Eq(t, []string{"create:web", "delete:plugin-web:override"}, ep.calls)
}

// TestHTTP_NomadCLICompat runs what the nomad CLI calls, with Nomad's Go
// client, against a real 3-server cluster through a follower: a job that
// claims a volume is run, inspected, planned, validated and stopped; its
// allocation is claimed and reported running as the node's client would.
func TestHTTP_NomadCLICompat(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	var node *structs.Node

	httpapitest.RunNomadCLICompat(t, "http://"+f.HTTPAddr(), func(t *testing.T, fx *httpapitest.Fixture) {
		node = fx.Node
		connectAgent(t, f, fx.Node, &agentEndpoint{})
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			n, err := f.State().NodeByID(nil, fx.Node.ID)
			return n != nil, err
		})
		fx.Leader = leader.RPCAddr()
		for _, s := range servers {
			fx.Peers = append(fx.Peers, s.RPCAddr())
		}
	}, httpapitest.CLIHooks{
		Claim: func(t *testing.T, allocID, volumeID string) {
			a, err := f.State().AllocByID(nil, allocID)
			must.NoError(t, err)
			must.NotNil(t, a)
			req := &structs.VolumeRequest{AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
				AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
			// A 3-server cluster on a loaded machine may change leaders:
			// retry what a client would retry.
			testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
				_, err := claimFor(t, f, node, a, volumeID, req)
				return err == nil, err
			})
		},
		Run: func(t *testing.T, allocID string, startedAt time.Time) {
			update := &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID, Allocs: []*structs.AllocClientUpdate{{
				ID: allocID, ClientStatus: structs.AllocClientStatusRunning,
				TaskStates: map[string]*structs.TaskState{"t": {State: structs.TaskStateRunning, StartedAt: startedAt.UnixNano()}},
			}}}
			testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
				err := f.RPC("Node.UpdateAlloc", update, &structs.GenericResponse{})
				return err == nil, err
			})
		},
	})
}
