package client

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/clienttest"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// The storage lifecycle over a client's real session and the development
// plugin's real socket: snapshots, clones, expansion, listings, and plugins
// that lack capabilities.

// newLifecycleEnv is newOneClientEnv with the plugin instance lacking the
// capabilities in disable (devplugin.Config.Disable).
func newLifecycleEnv(t *testing.T, disable ...string) (*server.Server, *allocEnv, *Client) {
	t.Helper()
	servers := testCluster(t, 1)
	e := &allocEnv{t: t, servers: servers, stateDir: t.TempDir()}
	p, err := devplugin.New(devplugin.Config{
		Endpoint: "unix://" + pluginSocket(t, "dev"), StateDir: e.stateDir, NodeID: "storage-0",
		Disable: disable, Logger: testLogger(t, "devplugin", nil),
	})
	must.NoError(t, err)
	must.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	e.plugins = []*devplugin.Plugin{p}
	dir := t.TempDir()
	e.dataDirs = []string{dir}
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	c := e.startClient(0, nil)
	e.waitNodesHealthy(servers[0], 1)
	return servers[0], e, c
}

// copyJob is a batch job of one allocation that copies the file "hello" of
// its volume into its allocation directory, then waits to be told it is
// done.
func copyJob(id, source string) *structs.Job {
	job := writerJob(id, 1, source, false, `cp "$VOLPLANE_VOLUME_DATA/hello" "$VOLPLANE_ALLOC_DIR/read" && `+
		`while [ ! -e "$VOLPLANE_ALLOC_DIR/done" ]; do sleep 0.05; done`)
	job.Type = structs.JobTypeBatch
	return job
}

// runCopy runs copyJob on source and returns what its task read.
func runCopy(t *testing.T, srv *server.Server, c *Client, id, source string) string {
	t.Helper()
	registerJob(t, srv, copyJob(id, source))
	a := waitAllocs(t, srv, id, 1, clientStatus(structs.AllocClientStatusRunning))[id+".g[0]"]
	must.NotNil(t, a)
	var got []byte
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(c.allocDir(a.ID), "read"))
		got = b
		return err == nil && len(b) > 0, fmt.Errorf("the task has read nothing yet: %v", err)
	})
	finishTask(t, c, a.ID)
	waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusComplete))
	return string(got)
}

// createFrom creates volume id from a snapshot or as a clone.
func createFrom(t *testing.T, srv *server.Server, id, snapshotID, cloneID string) string {
	t.Helper()
	vol := mock.CSIVolume("dev")
	vol.ID, vol.Name, vol.ExternalID, vol.Parameters = id, id, "", nil
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	vol.SnapshotID, vol.CloneID = snapshotID, cloneID
	var resp structs.CSIVolumeCreateResponse
	retryWrite(t, "creating volume "+id, func() error {
		return srv.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{vol}}, &resp)
	})
	must.Len(t, 1, resp.Volumes)
	return resp.Volumes[0].ExternalID
}

// TestLifecycle_SnapshotAndCloneKeepTheData: a task writes a file, the
// volume is snapshotted, a volume created from the snapshot and mounted by
// another task reads the same bytes, though the source changed since; a
// clone made later reads the source as it is then.
func TestLifecycle_SnapshotAndCloneKeepTheData(t *testing.T) {
	t.Parallel()
	srv, e, c := newLifecycleEnv(t)
	ext := e.createVolume(srv, "src")
	job := writerJob("writer", 1, "src", false, taskScript)
	job.Type = structs.JobTypeBatch
	registerJob(t, srv, job)
	w := waitAllocs(t, srv, "writer", 1, clientStatus(structs.AllocClientStatusRunning))["writer.g[0]"]
	must.Eq(t, "writer.g[0]", readHello(t, e.stateDir, ext))

	// Snapshotted while the writer still has it published.
	var snaps structs.CSISnapshotCreateResponse
	retryWrite(t, "snapshotting src", func() error {
		return srv.RPC("CSIVolume.CreateSnapshot", &structs.CSISnapshotCreateRequest{
			Snapshots: []*structs.CSISnapshot{{SourceVolumeID: "src", Name: "before-change"}}}, &snaps)
	})
	must.Len(t, 1, snaps.Snapshots)
	snap := snaps.Snapshots[0]
	must.Eq(t, "src", snap.SourceVolumeID)
	must.Eq(t, ext, snap.ExternalSourceVolumeID)
	must.True(t, snap.IsReady)
	finishTask(t, c, w.ID)
	waitAlloc(t, srv, w.ID, clientStatus(structs.AllocClientStatusComplete))

	// The source changes after the snapshot.
	must.NoError(t, os.WriteFile(filepath.Join(devplugin.VolumeDataDir(e.stateDir, ext), "hello"), []byte("changed\n"), 0o644))

	restored := createFrom(t, srv, "restored", snap.ID, "")
	must.NotEq(t, ext, restored)
	must.Eq(t, "writer.g[0]\n", runCopy(t, srv, c, "reader-restored", "restored"),
		must.Sprint("the restored volume has the data as it was when snapshotted"))

	cloned := createFrom(t, srv, "cloned", "", ext)
	must.NotEq(t, ext, cloned)
	must.Eq(t, "changed\n", runCopy(t, srv, c, "reader-cloned", "cloned"), must.Sprint("a clone has the source's data as it is"))

	// The snapshot is listed with its volume, then deleted.
	var list structs.CSISnapshotListResponse
	must.NoError(t, srv.RPC("CSIVolume.ListSnapshots", &structs.CSISnapshotListRequest{PluginID: "dev"}, &list))
	i := slices.IndexFunc(list.Snapshots, func(s *structs.CSISnapshot) bool { return s.ID == snap.ID })
	must.NonNegative(t, i)
	must.Eq(t, "src", list.Snapshots[i].SourceVolumeID)
	must.NoError(t, srv.RPC("CSIVolume.DeleteSnapshot", &structs.CSISnapshotDeleteRequest{
		Snapshots: []*structs.CSISnapshot{{PluginID: "dev", ID: snap.ID}}}, &structs.CSISnapshotDeleteResponse{}))
	must.NoError(t, srv.RPC("CSIVolume.ListSnapshots", &structs.CSISnapshotListRequest{PluginID: "dev"}, &list))
	must.False(t, slices.ContainsFunc(list.Snapshots, func(s *structs.CSISnapshot) bool { return s.ID == snap.ID }))
}

// TestLifecycle_ExpandPublishedVolume: a volume in use is grown online by
// its controller and then, as the controller asks, on the node that has it
// published, at the allocation's paths; the capacity is stored and the
// node sees the new size.
func TestLifecycle_ExpandPublishedVolume(t *testing.T) {
	t.Parallel()
	srv, e, c := newLifecycleEnv(t)
	ext := e.createVolume(srv, "grow")
	registerJob(t, srv, writerJob("user", 1, "grow", false, taskScript))
	a := waitAllocs(t, srv, "user", 1, clientStatus(structs.AllocClientStatusRunning))["user.g[0]"]
	readHello(t, e.stateDir, ext)

	vol := mock.CSIVolume("dev")
	vol.ID, vol.Name, vol.ExternalID, vol.Parameters = "grow", "grow", ext, nil
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	vol.RequestedCapacityMin = 3 << 30
	var resp structs.CSIVolumeRegisterResponse
	must.NoError(t, srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}}, &resp))
	must.Len(t, 1, resp.Warnings)
	must.StrContains(t, resp.Warnings[0], "expanded online")

	got, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "grow")
	must.NoError(t, err)
	must.Eq(t, int64(3<<30), got.Capacity)
	ctrl := callsFor(t, e.stateDir, "ControllerExpandVolume", ext)
	must.Len(t, 1, ctrl)
	must.Eq(t, int64(3<<30), ctrl[0].CapacityBytes)
	must.Eq(t, "SINGLE_NODE_WRITER", ctrl[0].AccessMode, must.Sprint("a volume in use is expanded with its capability"))
	node := callsFor(t, e.stateDir, "NodeExpandVolume", ext)
	must.Len(t, 1, node)
	u, ok := c.Usage().Get(a.ID, "grow")
	must.True(t, ok)
	must.Eq(t, u.TargetPath, node[0].VolumePath)
	must.Eq(t, u.StagingPath, node[0].StagingPath)
	must.Eq(t, int64(3<<30), node[0].CapacityBytes)

	// Shrinking is refused, naming the capacity.
	vol.RequestedCapacityMin, vol.RequestedCapacityMax = 0, 1<<30
	err = srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}}, &resp)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), fmt.Sprintf("current capacity of %d bytes", 3<<30))
	finishTask(t, c, a.ID)
}

// TestLifecycle_OfflineExpansionWaitsForRelease: a plugin that expands
// offline is not asked to grow a volume in use (409, saying so); once the
// volume is released it is.
func TestLifecycle_OfflineExpansionWaitsForRelease(t *testing.T) {
	t.Parallel()
	srv, e, c := newLifecycleEnv(t, devplugin.CapabilityOnlineExpansion)
	ext := e.createVolume(srv, "cold")
	job := writerJob("user", 1, "cold", false, taskScript)
	job.Type = structs.JobTypeBatch
	registerJob(t, srv, job)
	a := waitAllocs(t, srv, "user", 1, clientStatus(structs.AllocClientStatusRunning))["user.g[0]"]

	vol := mock.CSIVolume("dev")
	vol.ID, vol.Name, vol.ExternalID, vol.Parameters = "cold", "cold", ext, nil
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	vol.RequestedCapacityMin = 2 << 30
	register := func() error {
		return srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}},
			&structs.CSIVolumeRegisterResponse{})
	}
	err := register()
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "OFFLINE")
	must.SliceEmpty(t, callsFor(t, e.stateDir, "ControllerExpandVolume", ext))

	finishTask(t, c, a.ID)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		v, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "cold")
		return err == nil && !v.InUse(), fmt.Errorf("volume still claimed: %v", err)
	})
	must.NoError(t, register())
	v, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "cold")
	must.NoError(t, err)
	must.Eq(t, int64(2<<30), v.Capacity)
	must.SliceEmpty(t, callsFor(t, e.stateDir, "NodeExpandVolume", ext), must.Sprint("published nowhere: no node to grow it on"))
}

// TestLifecycle_NodePluginWithoutStaging: a node plugin without
// STAGE_UNSTAGE_VOLUME is published to unstaged, and released without an
// unstage; the task still writes into the volume.
func TestLifecycle_NodePluginWithoutStaging(t *testing.T) {
	t.Parallel()
	srv, e, c := newLifecycleEnv(t, devplugin.CapabilityStageUnstage)
	waitPlugin(t, srv, "dev", func(p *structs.CSIPlugin) error {
		for _, n := range p.Nodes {
			if n.NodeInfo.Has(structs.CSINodeStageUnstageVolume) {
				return fmt.Errorf("the node plugin still advertises staging")
			}
		}
		return nil
	})
	ext := e.createVolume(srv, "flat")
	job := writerJob("flat", 1, "flat", false, taskScript)
	job.Type = structs.JobTypeBatch
	registerJob(t, srv, job)
	a := waitAllocs(t, srv, "flat", 1, clientStatus(structs.AllocClientStatusRunning))["flat.g[0]"]
	must.Eq(t, "flat.g[0]", readHello(t, e.stateDir, ext))
	pub := callsFor(t, e.stateDir, "NodePublishVolume", ext)
	must.Len(t, 1, pub)
	must.Eq(t, "", pub[0].StagingPath)
	finishTask(t, c, a.ID)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		methods := methodsFor(t, e.stateDir, ext)
		return slices.Contains(methods, "ControllerUnpublishVolume"), fmt.Errorf("calls: %v", methods)
	})
	for _, m := range methodsFor(t, e.stateDir, ext) {
		must.False(t, strings.Contains(m, "Stage"), must.Sprintf("%s called on a plugin without staging", m))
	}
}

// TestLifecycle_CapabilitiesOff: against a plugin that lacks them,
// snapshots, listings, expansion and clones are refused before any plugin
// call, naming the plugin and the capability.
func TestLifecycle_CapabilitiesOff(t *testing.T) {
	t.Parallel()
	srv, e, _ := newLifecycleEnv(t, devplugin.CapabilityCreateDeleteSnapshot, devplugin.CapabilityListSnapshots,
		devplugin.CapabilityListVolumes, devplugin.CapabilityControllerExpand, devplugin.CapabilityCloneVolume)
	ext := e.createVolume(srv, "plain")
	before, err := devplugin.ReadCallLog(e.stateDir)
	must.NoError(t, err)

	check := func(err error, capability string) {
		t.Helper()
		must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
		must.StrContains(t, err.Error(), `plugin "dev"`)
		must.StrContains(t, err.Error(), capability)
	}
	check(srv.RPC("CSIVolume.CreateSnapshot", &structs.CSISnapshotCreateRequest{
		Snapshots: []*structs.CSISnapshot{{SourceVolumeID: "plain"}}}, &structs.CSISnapshotCreateResponse{}), "CREATE_DELETE_SNAPSHOT")
	check(srv.RPC("CSIVolume.ListSnapshots", &structs.CSISnapshotListRequest{PluginID: "dev"}, &structs.CSISnapshotListResponse{}),
		"LIST_SNAPSHOTS")
	check(srv.RPC("CSIVolume.ListExternal", &structs.CSIVolumeExternalListRequest{PluginID: "dev"}, &structs.CSIVolumeExternalListResponse{}),
		"LIST_VOLUMES")
	vol := mock.CSIVolume("dev")
	vol.ID, vol.Name, vol.ExternalID, vol.Parameters = "plain", "plain", ext, nil
	vol.MountOptions = &structs.CSIMountOptions{FSType: "ext4"}
	vol.RequestedCapacityMin = 4 << 30
	check(srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}},
		&structs.CSIVolumeRegisterResponse{}), "EXPAND_VOLUME")
	clone := vol.Copy()
	clone.ID, clone.Name, clone.ExternalID, clone.CloneID, clone.RequestedCapacityMin = "copy", "copy", "", ext, 0
	check(srv.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{clone}},
		&structs.CSIVolumeCreateResponse{}), "CLONE_VOLUME")

	after, err := devplugin.ReadCallLog(e.stateDir)
	must.NoError(t, err)
	var extra []string
	// The client's fingerprints (every 50ms here) reach the plugin too.
	fingerprint := map[string]bool{"GetPluginInfo": true, "GetPluginCapabilities": true, "Probe": true,
		"ControllerGetCapabilities": true, "NodeGetCapabilities": true, "NodeGetInfo": true}
	for _, c := range after[len(before):] {
		if c.Method != "ValidateVolumeCapabilities" && !fingerprint[c.Method] {
			extra = append(extra, c.Method)
		}
	}
	must.SliceEmpty(t, extra, must.Sprint("nothing reached the plugin but validations", extra))
}

// TestLifecycle_ListExternalPages: the provider's volumes come a page at a
// time with the plugin's own tokens, the registered ones named; a token the
// plugin did not hand out is a bad request.
func TestLifecycle_ListExternalPages(t *testing.T) {
	t.Parallel()
	srv, e, _ := newLifecycleEnv(t)
	exts := map[string]string{}
	for _, id := range []string{"one", "two", "three"} {
		exts[e.createVolume(srv, id)] = id
	}
	seen := map[string]string{}
	req := &structs.CSIVolumeExternalListRequest{PluginID: "dev"}
	req.PerPage = 2
	pages := 0
	for {
		var resp structs.CSIVolumeExternalListResponse
		must.NoError(t, srv.RPC("CSIVolume.ListExternal", req, &resp))
		must.LessEq(t, 2, len(resp.Volumes))
		for _, v := range resp.Volumes {
			seen[v.ExternalID] = v.VolumeID
		}
		pages++
		if resp.NextToken == "" {
			break
		}
		req.NextToken = resp.NextToken
	}
	must.Eq(t, 2, pages)
	must.Eq(t, exts, seen)

	req.NextToken = "garbage"
	err := srv.RPC("CSIVolume.ListExternal", req, &structs.CSIVolumeExternalListResponse{})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
	must.StrContains(t, err.Error(), "garbage")
	err = srv.RPC("CSIVolume.ListSnapshots", &structs.CSISnapshotListRequest{PluginID: "dev",
		QueryOptions: structs.QueryOptions{NextToken: "garbage"}}, &structs.CSISnapshotListResponse{})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
}
