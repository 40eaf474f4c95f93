// Package httpapitest holds test helpers for the HTTP API that are shared
// between packages: the Nomad client compatibility suite runs against the
// handler over a fake backend (in server/httpapi) and against a real
// in-process server. Only test code imports this package, so Nomad's client
// never reaches a volplane binary.
package httpapitest

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// Fixture is the cluster state the compatibility suite needs. The suite
// fills in the first group, then calls the seed hook, which must make it
// visible through the API and fill in the second group.
type Fixture struct {
	// PluginID is a CSI plugin that Node runs as both controller and node,
	// both healthy, with attach/detach support.
	PluginID string
	// Node is a ready client node; its SecretID must never be shown.
	Node *structs.Node

	// Leader is the RPC address the cluster reports as its leader, and
	// Peers the addresses of every Raft peer.
	Leader string
	Peers  []string
	// Token, when set, is sent as X-Nomad-Token with every request.
	Token string
}

// Names used by the suite, so a seed hook can refer to them.
const (
	CompatPluginID   = "nomad-compat.csi.example"
	CompatNodeID     = "8f5b6a3e-4c1d-4e8f-9a2b-c0ffee000001"
	CompatNodeSecret = "compat-node-secret-2f9c0a71"
	compatVolSecret  = "compat-volume-secret-5d21be09"
	compatFlagSecret = "password=compat-flag-secret-77e4"
	compatSnapSecret = "compat-snapshot-secret-31aa07"
)

// NewFixture returns the suite's node and plugin, before seeding.
func NewFixture() *Fixture {
	now := time.Now().UTC().Truncate(time.Second)
	info := func(controller bool) *structs.CSIInfo {
		i := &structs.CSIInfo{
			PluginID:                 CompatPluginID,
			Healthy:                  true,
			HealthDescription:        "healthy",
			UpdateTime:               now,
			Provider:                 "compat.csi.example",
			ProviderVersion:          "1.2.3",
			RequiresControllerPlugin: true,
		}
		if controller {
			i.ControllerInfo = &structs.CSIControllerInfo{SupportsAttachDetach: true, SupportsListVolumes: true,
				SupportsCreateDeleteSnapshot: true, SupportsListSnapshots: true}
		} else {
			i.NodeInfo = &structs.CSINodeInfo{ID: "compat-ext-node-1", MaxVolumes: 8, RequiresNodeStageVolume: true}
		}
		return i
	}
	return &Fixture{
		PluginID: CompatPluginID,
		Node: &structs.Node{
			ID:                   CompatNodeID,
			Name:                 "compat-node-1",
			SecretID:             CompatNodeSecret,
			Datacenter:           "dc1",
			Address:              "127.0.0.1",
			Attributes:           map[string]string{"kernel.name": "linux"},
			Status:               structs.NodeStatusReady,
			CSIControllerPlugins: map[string]*structs.CSIInfo{CompatPluginID: info(true)},
			CSINodePlugins:       map[string]*structs.CSIInfo{CompatPluginID: info(false)},
		},
	}
}

// RunNomadClientCompat drives the HTTP API at addr (a base URL such as
// "http://127.0.0.1:4646") with Nomad's official Go client and checks that
// what it reads back is what was written. seed must make fx.Node (and so
// fx.PluginID) known to the cluster and set fx.Leader and fx.Peers. The
// suite registers and deregisters volumes whose IDs start with
// "nomad-compat-vol".
func RunNomadClientCompat(t *testing.T, addr string, seed func(t *testing.T, fx *Fixture)) {
	t.Helper()
	fx := NewFixture()
	seed(t, fx)

	cfg := nomad.DefaultConfig()
	cfg.Address = addr
	cfg.SecretID = fx.Token
	client, err := nomad.NewClient(cfg)
	must.NoError(t, err)
	c := &compat{t: t, addr: addr, fx: fx, client: client}

	t.Run("status", c.status)
	t.Run("operator raft configuration", c.raftConfiguration)
	t.Run("nodes", c.nodes)
	t.Run("plugins", c.plugins)
	t.Run("volumes", c.volumes)
	t.Run("snapshots", c.snapshots)
	t.Run("external volumes", c.externalVolumes)
	t.Run("system gc", c.systemGC)
	t.Run("not found", c.notFound)
	t.Run("node drain and eligibility", c.nodeDrain)
}

type compat struct {
	t      *testing.T
	addr   string
	fx     *Fixture
	client *nomad.Client
}

func (c *compat) status(t *testing.T) {
	leader, err := c.client.Status().Leader()
	must.NoError(t, err)
	must.Eq(t, c.fx.Leader, leader)

	peers, err := c.client.Status().Peers()
	must.NoError(t, err)
	must.SliceContainsAll(t, c.fx.Peers, peers)
}

func (c *compat) raftConfiguration(t *testing.T) {
	cfg, err := c.client.Operator().RaftGetConfiguration(nil)
	must.NoError(t, err)
	must.Len(t, len(c.fx.Peers), cfg.Servers)
	leaders := 0
	for _, s := range cfg.Servers {
		must.SliceContains(t, c.fx.Peers, s.Address)
		if s.Leader {
			leaders++
			must.Eq(t, c.fx.Leader, s.Address)
		}
	}
	must.Eq(t, 1, leaders)
}

func (c *compat) nodes(t *testing.T) {
	want := c.fx.Node
	stubs, qm, err := c.client.Nodes().List(nil)
	must.NoError(t, err)
	must.Positive(t, qm.LastIndex)
	i := slices.IndexFunc(stubs, func(s *nomad.NodeListStub) bool { return s.ID == want.ID })
	must.NonNegative(t, i, must.Sprint("node missing from the list"))
	must.Eq(t, want.Name, stubs[i].Name)
	must.Eq(t, want.Datacenter, stubs[i].Datacenter)
	must.Eq(t, want.Status, stubs[i].Status)

	node, qm, err := c.client.Nodes().Info(want.ID, &nomad.QueryOptions{AllowStale: true})
	must.NoError(t, err)
	must.GreaterEq(t, node.ModifyIndex, qm.LastIndex)
	must.Eq(t, want.ID, node.ID)
	must.Eq(t, want.Name, node.Name)
	must.Eq(t, want.Attributes["kernel.name"], node.Attributes["kernel.name"])
	ctrl := node.CSIControllerPlugins[c.fx.PluginID]
	must.NotNil(t, ctrl)
	must.True(t, ctrl.Healthy)
	must.NotNil(t, ctrl.ControllerInfo)
	must.True(t, ctrl.ControllerInfo.SupportsAttachDetach)
	np := node.CSINodePlugins[c.fx.PluginID]
	must.NotNil(t, np)
	must.NotNil(t, np.NodeInfo)
	must.Eq(t, "compat-ext-node-1", np.NodeInfo.ID)
	must.Eq(t, 8, np.NodeInfo.MaxVolumes)

	c.noSecrets(t, "/v1/nodes", "/v1/node/"+want.ID)
}

func (c *compat) plugins(t *testing.T) {
	stubs, qm, err := c.client.CSIPlugins().List(nil)
	must.NoError(t, err)
	must.Positive(t, qm.LastIndex)
	i := slices.IndexFunc(stubs, func(s *nomad.CSIPluginListStub) bool { return s.ID == c.fx.PluginID })
	must.NonNegative(t, i, must.Sprint("plugin missing from the list"))
	checkHealth(t, stubs[i].ControllersHealthy, stubs[i].ControllersExpected, stubs[i].NodesHealthy, stubs[i].NodesExpected)
	must.True(t, stubs[i].ControllerRequired)
	must.Eq(t, "compat.csi.example", stubs[i].Provider)

	plug, qm, err := c.client.CSIPlugins().Info(c.fx.PluginID, nil)
	must.NoError(t, err)
	must.Positive(t, qm.LastIndex)
	must.Eq(t, c.fx.PluginID, plug.ID)
	checkHealth(t, plug.ControllersHealthy, plug.ControllersExpected, plug.NodesHealthy, plug.NodesExpected)
	must.MapContainsKey(t, plug.Controllers, c.fx.Node.ID)
	must.MapContainsKey(t, plug.Nodes, c.fx.Node.ID)
	must.True(t, plug.Nodes[c.fx.Node.ID].Healthy)
}

// checkHealth asserts the fixture's one healthy controller and node.
func checkHealth(t *testing.T, ctrlHealthy, ctrlExpected, nodesHealthy, nodesExpected int) {
	t.Helper()
	must.Eq(t, []int{1, 1, 1, 1}, []int{ctrlHealthy, ctrlExpected, nodesHealthy, nodesExpected},
		must.Sprint("controllers healthy/expected, nodes healthy/expected"))
}

func (c *compat) volumes(t *testing.T) {
	volA := &nomad.CSIVolume{
		ID:         "nomad-compat-vol-a",
		Name:       "compat volume a",
		ExternalID: "ext-compat-a",
		PluginID:   c.fx.PluginID,
		RequestedCapabilities: []*nomad.CSIVolumeCapability{
			{AccessMode: nomad.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: nomad.CSIVolumeAttachmentModeFilesystem},
			{AccessMode: nomad.CSIVolumeAccessModeMultiNodeReader, AttachmentMode: nomad.CSIVolumeAttachmentModeFilesystem},
		},
		MountOptions: &nomad.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime", compatFlagSecret}},
		Secrets:      nomad.CSISecrets{"password": compatVolSecret},
		Parameters:   map[string]string{"tier": "gold"},
		Context:      map[string]string{"zone": "z1"},
	}
	wm, err := c.client.CSIVolumes().Register(volA, nil)
	must.NoError(t, err)
	must.Positive(t, wm.LastIndex)
	t.Cleanup(func() { _ = c.client.CSIVolumes().Deregister(volA.ID, true, nil) })

	// RegisterOpts sends Nomad's request-level fields too.
	volB := &nomad.CSIVolume{
		ID:       "nomad-compat-vol-b",
		PluginID: c.fx.PluginID,
		RequestedCapabilities: []*nomad.CSIVolumeCapability{
			{AccessMode: nomad.CSIVolumeAccessModeMultiNodeMultiWriter, AttachmentMode: nomad.CSIVolumeAttachmentModeBlockDevice},
		},
	}
	_, wmB, err := c.client.CSIVolumes().RegisterOpts(&nomad.CSIVolumeRegisterRequest{
		Volumes: []*nomad.CSIVolume{volB}, PolicyOverride: true,
	}, nil)
	must.NoError(t, err)
	must.Greater(t, wm.LastIndex, wmB.LastIndex)
	t.Cleanup(func() { _ = c.client.CSIVolumes().Deregister(volB.ID, true, nil) })

	// A stale blocking query waits until the server it reaches has applied
	// the write, then answers.
	got, qm, err := c.client.CSIVolumes().Info(volA.ID, &nomad.QueryOptions{
		WaitIndex: wm.LastIndex - 1, WaitTime: 10 * time.Second, AllowStale: true,
	})
	must.NoError(t, err)
	must.GreaterEq(t, wm.LastIndex, qm.LastIndex)
	must.Eq(t, wm.LastIndex, got.ModifyIndex, must.Sprint("the write's index is the volume's modify index"))
	must.Eq(t, volA.ID, got.ID)
	must.Eq(t, structs.DefaultNamespace, got.Namespace)
	must.Eq(t, volA.Name, got.Name)
	must.Eq(t, volA.ExternalID, got.ExternalID)
	must.Eq(t, volA.PluginID, got.PluginID)
	must.Eq(t, volA.RequestedCapabilities, got.RequestedCapabilities)
	must.NotNil(t, got.MountOptions)
	must.Eq(t, "ext4", got.MountOptions.FSType)
	must.SliceNotContains(t, got.MountOptions.MountFlags, compatFlagSecret)
	must.MapNotContainsKey(t, got.Secrets, "password")
	must.Eq(t, volA.Parameters, got.Parameters)
	must.Eq(t, volA.Context, got.Context)
	must.True(t, got.Schedulable)
	checkHealth(t, got.ControllersHealthy, got.ControllersExpected, got.NodesHealthy, got.NodesExpected)
	must.MapEmpty(t, got.ReadAllocs)
	must.MapEmpty(t, got.WriteAllocs)

	stubs, qm, err := c.client.CSIVolumes().List(&nomad.QueryOptions{Prefix: "nomad-compat-vol"})
	must.NoError(t, err)
	must.GreaterEq(t, wmB.LastIndex, qm.LastIndex)
	ids := stubIDs(stubs)
	must.SliceContainsAll(t, []string{volA.ID, volB.ID}, ids)
	stub := stubs[slices.Index(ids, volA.ID)]
	must.Eq(t, c.fx.PluginID, stub.PluginID)
	must.True(t, stub.Schedulable)
	must.Eq(t, 0, stub.CurrentReaders+stub.CurrentWriters)
	checkHealth(t, stub.ControllersHealthy, stub.ControllersExpected, stub.NodesHealthy, stub.NodesExpected)

	// Paging: X-Nomad-NextToken carries the next page's token.
	page1, qm, err := c.client.CSIVolumes().List(&nomad.QueryOptions{Prefix: "nomad-compat-vol", PerPage: 1})
	must.NoError(t, err)
	must.Len(t, 1, page1)
	must.NotEq(t, "", qm.NextToken)
	page2, qm, err := c.client.CSIVolumes().List(&nomad.QueryOptions{
		Prefix: "nomad-compat-vol", PerPage: 1, NextToken: qm.NextToken,
	})
	must.NoError(t, err)
	must.Len(t, 1, page2)
	must.Eq(t, "", qm.NextToken)
	must.SliceContainsAll(t, []string{volA.ID, volB.ID}, stubIDs(append(page1, page2...)))

	c.noSecrets(t, "/v1/volumes?type=csi", "/v1/volume/csi/"+volA.ID, "/v1/plugin/csi/"+c.fx.PluginID)

	must.NoError(t, c.client.CSIVolumes().Deregister(volA.ID, false, nil))
	_, _, err = c.client.CSIVolumes().Info(volA.ID, nil)
	mustStatus(t, http.StatusNotFound, err)
	must.NoError(t, c.client.CSIVolumes().Deregister(volB.ID, true, nil))
}

func (c *compat) notFound(t *testing.T) {
	_, _, err := c.client.CSIVolumes().Info("nomad-compat-vol-missing", nil)
	mustStatus(t, http.StatusNotFound, err)
	_, _, err = c.client.CSIPlugins().Info("nomad-compat-plugin-missing", nil)
	mustStatus(t, http.StatusNotFound, err)
	_, _, err = c.client.Nodes().Info("nomad-compat-node-missing", nil)
	mustStatus(t, http.StatusNotFound, err)
}

func stubIDs(stubs []*nomad.CSIVolumeListStub) []string {
	ids := make([]string, len(stubs))
	for i, s := range stubs {
		ids[i] = s.ID
	}
	return ids
}

// mustStatus asserts that err is Nomad's client's error for an answer with
// the given status.
func mustStatus(t *testing.T, status int, err error) {
	t.Helper()
	var ue nomad.UnexpectedResponseError
	var uep *nomad.UnexpectedResponseError
	switch {
	case errors.As(err, &ue):
	case errors.As(err, &uep):
		ue = *uep
	default:
		t.Fatalf("want an UnexpectedResponseError with status %d, got %v", status, err)
	}
	must.Eq(t, status, ue.StatusCode(), must.Sprint(ue.Body()))
}

// noSecrets fetches raw bodies and asserts that no secret of the fixture
// appears in them: not the volume's secrets, not its mount flags, not the
// node's secret ID.
func (c *compat) noSecrets(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(c.addr, "/")+p, nil)
		must.NoError(t, err)
		if c.fx.Token != "" {
			req.Header.Set("X-Nomad-Token", c.fx.Token)
		}
		resp, err := http.DefaultClient.Do(req)
		must.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		must.NoError(t, err)
		must.Eq(t, http.StatusOK, resp.StatusCode, must.Sprintf("GET %s: %s", p, body))
		for _, secret := range []string{compatVolSecret, compatFlagSecret, CompatNodeSecret, compatSnapSecret} {
			must.StrNotContains(t, string(body), secret, must.Sprintf("GET %s leaks a secret", p))
		}
	}
}
