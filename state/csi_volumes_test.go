package state

import (
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const ns = structs.DefaultNamespace

func TestUpsertCSIVolume_New(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, withPlugin(testNode("n1"), ctrlInfo("p", true), nodeInfo("p", true, true))))

	in := testVolume("vol", "p")
	in.CreateTime, in.ModifyTime = 1000, 1000
	// Registration never sets claims, modes or derived fields.
	in.WriteClaims = map[string]*structs.CSIVolumeClaim{"a1": writeClaim("a1", "n1")}
	in.AccessMode = structs.CSIVolumeAccessModeSingleNodeWriter
	in.Schedulable, in.NodesHealthy = false, 7
	must.NoError(t, s.UpsertCSIVolume(11, []*structs.CSIVolume{in}))
	must.MapLen(t, 1, in.WriteClaims) // the caller's object is untouched

	v, err := s.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.NotNil(t, v)
	must.MapEmpty(t, v.WriteClaims)
	must.Eq(t, structs.CSIVolumeAccessModeUnknown, v.AccessMode)
	must.Eq(t, uint64(11), v.CreateIndex)
	must.Eq(t, uint64(11), v.ModifyIndex)
	must.Eq(t, int64(1000), v.CreateTime)

	// Derived on read from the plugin.
	must.True(t, v.Schedulable)
	must.True(t, v.ControllerRequired)
	must.Eq(t, 1, v.ControllersHealthy)
	must.Eq(t, 1, v.ControllersExpected)
	must.Eq(t, 1, v.NodesHealthy)
	must.Eq(t, 1, v.NodesExpected)

	// ... and never stored.
	iter, err := s.CSIVolumesByNamespace(nil, ns, "")
	must.NoError(t, err)
	raw := iter.Next().(*structs.CSIVolume)
	must.False(t, raw.Schedulable)
	must.Eq(t, 0, raw.NodesHealthy)
	must.False(t, raw.ControllerRequired)

	mustIndex(t, s, TableCSIVolumes, 11)

	// The copy returned is the caller's to change.
	v.Name = "changed"
	again, err := s.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.Eq(t, "vol", again.Name)
}

func TestUpsertCSIVolume_PluginMustExistAllOrNothing(t *testing.T) {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))

	err := s.UpsertCSIVolume(11, []*structs.CSIVolume{testVolume("good", "p"), testVolume("bad", "missing")})
	mustCode(t, err, structs.ErrCodeNotFound)
	must.StrContains(t, err.Error(), `no CSI plugin named "missing" could be found`)
	must.StrContains(t, err.Error(), `"bad"`)

	v, err := s.CSIVolumeByID(nil, ns, "good")
	must.NoError(t, err)
	must.Nil(t, v)
	mustIndex(t, s, TableCSIVolumes, 0)
}

func TestUpsertCSIVolume_IdentityCannotChange(t *testing.T) {
	s := setupVolume(t)
	must.NoError(t, s.UpsertNode(12, healthyNodePlugin("n2", "other")))

	ext := testVolume("vol", "p")
	ext.ExternalID = "new-external"
	err := s.UpsertCSIVolume(13, []*structs.CSIVolume{ext})
	mustCode(t, err, structs.ErrCodeInvalid)
	must.StrContains(t, err.Error(), `volume "vol" cannot be updated: volume external ID cannot be updated`)

	plug := testVolume("vol", "other")
	err = s.UpsertCSIVolume(13, []*structs.CSIVolume{plug})
	mustCode(t, err, structs.ErrCodeInvalid)
	must.StrContains(t, err.Error(), "volume plugin ID cannot be updated")

	mustIndex(t, s, TableCSIVolumes, 11)
}

func TestUpsertCSIVolume_UpdateKeepsClaimsAndCreation(t *testing.T) {
	s := setupVolume(t)
	must.NoError(t, s.UpsertAllocs(12, []*structs.Allocation{testAlloc("a1", "n1")}))
	must.NoError(t, s.CSIVolumeClaim(13, 2000, ns, "vol", writeClaim("a1", "n1")))

	upd := testVolume("vol", "p")
	upd.Context = map[string]string{"k": "v"}
	upd.CreateTime, upd.ModifyTime = 3000, 3000
	// Whatever the request says about claims and modes is ignored.
	upd.WriteClaims = nil
	upd.ReadClaims = map[string]*structs.CSIVolumeClaim{"ghost": readClaim("ghost", "n9")}
	upd.AccessMode = structs.CSIVolumeAccessModeMultiNodeReader
	must.NoError(t, s.UpsertCSIVolume(14, []*structs.CSIVolume{upd}))

	v, err := s.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.Eq(t, map[string]string{"k": "v"}, v.Context)
	must.MapContainsKey(t, v.WriteClaims, "a1")
	must.MapEmpty(t, v.ReadClaims)
	must.Eq(t, structs.CSIVolumeAccessModeSingleNodeWriter, v.AccessMode)
	must.Eq(t, structs.CSIVolumeAttachmentModeFilesystem, v.AttachmentMode)
	must.Eq(t, uint64(11), v.CreateIndex)
	must.Eq(t, uint64(14), v.ModifyIndex)
	must.Eq(t, int64(0), v.CreateTime) // setupVolume registered it at time 0
	must.Eq(t, int64(3000), v.ModifyTime)
}

func TestUpsertCSIVolume_IdenticalIsNoOp(t *testing.T) {
	s := setupVolume(t)
	ws := memdb.NewWatchSet()
	_, err := s.CSIVolumeByID(ws, ns, "vol")
	must.NoError(t, err)

	same := testVolume("vol", "p")
	same.ModifyTime = 99999 // only the time differs
	same.Secrets = structs.CSISecrets{}
	must.NoError(t, s.UpsertCSIVolume(20, []*structs.CSIVolume{same}))

	v, err := s.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.Eq(t, uint64(11), v.ModifyIndex)
	must.Eq(t, int64(0), v.ModifyTime)
	mustIndex(t, s, TableCSIVolumes, 11)
	must.False(t, fired(ws))
}

func TestCSIVolumeDeregister(t *testing.T) {
	s := setupVolume(t)
	must.NoError(t, s.UpsertCSIVolume(12, []*structs.CSIVolume{testVolume("vol2", "p")}))
	must.NoError(t, s.UpsertAllocs(13, []*structs.Allocation{testAlloc("a1", "n1"), testAlloc("a2", "n1")}))
	must.NoError(t, s.CSIVolumeClaim(14, 100, ns, "vol", readClaim("a1", "n1")))
	must.NoError(t, s.CSIVolumeClaim(15, 100, ns, "vol", readClaim("a2", "n1")))

	t.Run("unknown", func(t *testing.T) {
		err := s.CSIVolumeDeregister(20, ns, []string{"vol2", "nope"}, false)
		mustCode(t, err, structs.ErrCodeNotFound)
		must.StrContains(t, err.Error(), `volume "nope" not found`)
		// All or nothing: vol2 is still there.
		v, err := s.CSIVolumeByID(nil, ns, "vol2")
		must.NoError(t, err)
		must.NotNil(t, v)
	})

	t.Run("wrong namespace", func(t *testing.T) {
		mustCode(t, s.CSIVolumeDeregister(20, "other", []string{"vol2"}, false), structs.ErrCodeNotFound)
	})

	t.Run("in use", func(t *testing.T) {
		err := s.CSIVolumeDeregister(20, ns, []string{"vol"}, false)
		mustCode(t, err, structs.ErrCodeConflict)
		must.StrContains(t, err.Error(), `volume "vol"`)
		must.StrContains(t, err.Error(), `"a1"`)
		must.StrContains(t, err.Error(), `"a2"`)
	})

	t.Run("force refused while a claimant runs", func(t *testing.T) {
		done := testAlloc("a1", "n1")
		done.ClientStatus = structs.AllocClientStatusComplete
		must.NoError(t, s.UpsertAllocs(21, []*structs.Allocation{done}))

		err := s.CSIVolumeDeregister(22, ns, []string{"vol"}, true)
		mustCode(t, err, structs.ErrCodeConflict)
		must.StrContains(t, err.Error(), `"a2"`)
		must.StrNotContains(t, err.Error(), `"a1"`)
	})

	t.Run("force when claimants are terminal or gone", func(t *testing.T) {
		// a2 stops on the server side; a3 holds a past claim and is gone
		// (its allocation was garbage collected during the release).
		stopped := testAlloc("a2", "n1")
		stopped.DesiredStatus = structs.AllocDesiredStatusStop
		must.NoError(t, s.UpsertAllocs(23, []*structs.Allocation{stopped}))
		past := readClaim("a3", "n1")
		past.State = structs.CSIVolumeClaimStateNodeDetached
		restoreVolumeClaims(t, s, "vol", past)

		must.NoError(t, s.CSIVolumeDeregister(25, ns, []string{"vol", "vol2"}, true))
		v, err := s.CSIVolumeByID(nil, ns, "vol")
		must.NoError(t, err)
		must.Nil(t, v)
		mustIndex(t, s, TableCSIVolumes, 25)
		// The plugin still has n1's instance, so it stays.
		p, err := s.CSIPluginByID(nil, "p")
		must.NoError(t, err)
		must.NotNil(t, p)
		mustIndex(t, s, TableCSIPlugins, 10)
	})
}

func TestCSIVolumeClaim(t *testing.T) {
	s := setupVolume(t)
	must.NoError(t, s.UpsertAllocs(12, []*structs.Allocation{testAlloc("a1", "n1"), testAlloc("a2", "n1")}))

	t.Run("unknown volume", func(t *testing.T) {
		err := s.CSIVolumeClaim(20, 100, ns, "nope", writeClaim("a1", "n1"))
		mustCode(t, err, structs.ErrCodeNotFound)
		must.StrContains(t, err.Error(), `volume "nope" not found`)
	})

	t.Run("unknown allocation", func(t *testing.T) {
		err := s.CSIVolumeClaim(20, 100, ns, "vol", writeClaim("ghost", "n1"))
		mustCode(t, err, structs.ErrCodeNotFound)
		must.StrContains(t, err.Error(), `"ghost"`)
		must.StrContains(t, err.Error(), `"vol"`)
	})

	t.Run("taken", func(t *testing.T) {
		must.NoError(t, s.CSIVolumeClaim(21, 500, ns, "vol", writeClaim("a1", "n1")))
		v, err := s.CSIVolumeByID(nil, ns, "vol")
		must.NoError(t, err)
		must.MapContainsKey(t, v.WriteClaims, "a1")
		must.Eq(t, int64(500), v.WriteClaims["a1"].ClaimedAt)
		must.Eq(t, structs.CSIVolumeAccessModeSingleNodeWriter, v.AccessMode)
		must.Eq(t, uint64(21), v.ModifyIndex)
		must.Eq(t, int64(500), v.ModifyTime)
		mustIndex(t, s, TableCSIVolumes, 21)
	})

	t.Run("repeat is a no-op", func(t *testing.T) {
		must.NoError(t, s.CSIVolumeClaim(22, 600, ns, "vol", writeClaim("a1", "n1")))
		v, err := s.CSIVolumeByID(nil, ns, "vol")
		must.NoError(t, err)
		must.Eq(t, int64(500), v.WriteClaims["a1"].ClaimedAt)
		must.Eq(t, uint64(21), v.ModifyIndex)
		mustIndex(t, s, TableCSIVolumes, 21)
	})

	t.Run("single-node-writer conflict names the holder", func(t *testing.T) {
		err := s.CSIVolumeClaim(23, 700, ns, "vol", writeClaim("a2", "n1"))
		mustCode(t, err, structs.ErrCodeMaxClaims)
		must.StrContains(t, err.Error(), `volume "vol"`)
		must.StrContains(t, err.Error(), `"a2"`)
		must.StrContains(t, err.Error(), `allocation "a1"`)
		mustIndex(t, s, TableCSIVolumes, 21)
	})

	t.Run("terminal allocation cannot claim", func(t *testing.T) {
		failed := testAlloc("a2", "n1")
		failed.ClientStatus = structs.AllocClientStatusFailed
		must.NoError(t, s.UpsertAllocs(24, []*structs.Allocation{failed}))
		err := s.CSIVolumeClaim(25, 800, ns, "vol", writeClaim("a2", "n1"))
		mustCode(t, err, structs.ErrCodeInvalid)
		must.StrContains(t, err.Error(), `"a2"`)
	})

	t.Run("release", func(t *testing.T) {
		rel := writeClaim("a1", "n1")
		rel.State = structs.CSIVolumeClaimStateUnpublishing
		rel.Attempts = 1
		must.NoError(t, s.CSIVolumeClaim(26, 900, ns, "vol", rel))
		v, err := s.CSIVolumeByID(nil, ns, "vol")
		must.NoError(t, err)
		must.MapContainsKey(t, v.PastClaims, "a1")
		must.True(t, v.InUse())

		free := writeClaim("a1", "n1")
		free.State = structs.CSIVolumeClaimStateReadyToFree
		must.NoError(t, s.CSIVolumeClaim(27, 1000, ns, "vol", free))
		v, err = s.CSIVolumeByID(nil, ns, "vol")
		must.NoError(t, err)
		must.False(t, v.InUse())
		must.Eq(t, structs.CSIVolumeAccessModeUnknown, v.AccessMode)
		must.Eq(t, structs.CSIVolumeAttachmentModeUnknown, v.AttachmentMode)
		must.Eq(t, uint64(27), v.ModifyIndex)

		// Freeing again is refused: there is no claim to free.
		mustCode(t, s.CSIVolumeClaim(28, 1100, ns, "vol", free), structs.ErrCodeNotFound)
		mustIndex(t, s, TableCSIVolumes, 27)
	})

	t.Run("unschedulable", func(t *testing.T) {
		must.NoError(t, s.UpsertNode(30, withPlugin(testNode("n1"), nil, nodeInfo("p", false, false))))
		err := s.CSIVolumeClaim(31, 1200, ns, "vol", writeClaim("a1", "n1"))
		mustCode(t, err, structs.ErrCodeUnschedulable)
	})
}

func TestCSIVolumeByID_WatchesPlugin(t *testing.T) {
	s := setupVolume(t)
	ws := memdb.NewWatchSet()
	v, err := s.CSIVolumeByID(ws, ns, "vol")
	must.NoError(t, err)
	must.True(t, v.Schedulable)

	// The plugin turning unhealthy changes what the volume reads as.
	must.NoError(t, s.UpsertNode(12, withPlugin(testNode("n1"), nil, nodeInfo("p", false, false))))
	must.True(t, fired(ws))
	v, err = s.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.False(t, v.Schedulable)
}

func TestCSIVolumeDenormalizePlugins(t *testing.T) {
	s := setupVolume(t)
	raw := testVolume("x", "p")
	v, err := s.CSIVolumeDenormalizePlugins(nil, raw)
	must.NoError(t, err)
	must.True(t, v.Schedulable)
	must.Eq(t, 1, v.NodesHealthy)
	must.False(t, raw.Schedulable) // a copy

	// A plugin that does not exist leaves the volume unschedulable.
	gone := testVolume("y", "gone")
	gone.Schedulable, gone.NodesHealthy = true, 3
	v, err = s.CSIVolumeDenormalizePlugins(nil, gone)
	must.NoError(t, err)
	must.False(t, v.Schedulable)
	must.Eq(t, 0, v.NodesHealthy)
}

// listFixture registers volumes in two namespaces and two plugins.
func listFixture(t *testing.T) *StateStore {
	s := TestStateStore(t)
	must.NoError(t, s.UpsertNamespaces(9, []*structs.Namespace{{Name: "prod"}, {Name: "a"}}))
	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertNode(11, healthyNodePlugin("n2", "q")))
	var vols []*structs.CSIVolume
	add := func(namespace, id, plugin string) {
		v := testVolume(id, plugin)
		v.Namespace = namespace
		vols = append(vols, v)
	}
	add("default", "web-1", "p")
	add("default", "web-2", "q")
	add("default", "db-1", "p")
	add("prod", "web-1", "p")
	add("prod", "db-1", "q")
	add("a", "web-0", "p")
	must.NoError(t, s.UpsertCSIVolume(12, vols))
	return s
}

func keys(t *testing.T, iter memdb.ResultIterator, err error) []string {
	t.Helper()
	must.NoError(t, err)
	var out []string
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		v := raw.(*structs.CSIVolume)
		out = append(out, v.Namespace+"/"+v.ID)
	}
	return out
}

func TestCSIVolumesByNamespace(t *testing.T) {
	s := listFixture(t)
	iter, err := s.CSIVolumesByNamespace(nil, "default", "")
	must.Eq(t, []string{"default/db-1", "default/web-1", "default/web-2"}, keys(t, iter, err))
	iter, err = s.CSIVolumesByNamespace(nil, "default", "web")
	must.Eq(t, []string{"default/web-1", "default/web-2"}, keys(t, iter, err))
	iter, err = s.CSIVolumesByNamespace(nil, AllNamespaces, "web")
	must.Eq(t, []string{"a/web-0", "default/web-1", "default/web-2", "prod/web-1"}, keys(t, iter, err))
	iter, err = s.CSIVolumesByNamespace(nil, "def", "")
	must.Eq(t, []string(nil), keys(t, iter, err))
}

func TestCSIVolumesByPluginID(t *testing.T) {
	s := listFixture(t)
	// Either a different namespace or a missing prefix excludes a row.
	iter, err := s.CSIVolumesByPluginID(nil, "default", "web", "p")
	must.Eq(t, []string{"default/web-1"}, keys(t, iter, err))
	iter, err = s.CSIVolumesByPluginID(nil, "default", "", "p")
	must.Eq(t, []string{"default/db-1", "default/web-1"}, keys(t, iter, err))
	iter, err = s.CSIVolumesByPluginID(nil, AllNamespaces, "web", "p")
	must.Eq(t, []string{"a/web-0", "default/web-1", "prod/web-1"}, keys(t, iter, err))
	iter, err = s.CSIVolumesByPluginID(nil, "prod", "", "q")
	must.Eq(t, []string{"prod/db-1"}, keys(t, iter, err))
}

func stubKeys(stubs []*structs.CSIVolListStub) []string {
	var out []string
	for _, s := range stubs {
		out = append(out, s.Namespace+"/"+s.ID)
	}
	return out
}

func TestCSIVolumeStubs_Pagination(t *testing.T) {
	s := listFixture(t)

	var pages [][]string
	token := ""
	for {
		stubs, next, err := s.CSIVolumeStubs(nil, AllNamespaces, "", "", token, 4)
		must.NoError(t, err)
		pages = append(pages, stubKeys(stubs))
		if next == "" {
			break
		}
		token = next
	}
	must.Eq(t, [][]string{
		{"a/web-0", "default/db-1", "default/web-1", "default/web-2"},
		{"prod/db-1", "prod/web-1"},
	}, pages)

	// The token names the first item of the next page.
	_, next, err := s.CSIVolumeStubs(nil, AllNamespaces, "", "", "", 2)
	must.NoError(t, err)
	must.Eq(t, "default/web-1", next)

	// Pages of one plugin's volumes in one namespace.
	stubs, next, err := s.CSIVolumeStubs(nil, "default", "", "p", "", 1)
	must.NoError(t, err)
	must.Eq(t, []string{"default/db-1"}, stubKeys(stubs))
	must.Eq(t, "default/web-1", next)
	stubs, next, err = s.CSIVolumeStubs(nil, "default", "", "p", next, 1)
	must.NoError(t, err)
	must.Eq(t, []string{"default/web-1"}, stubKeys(stubs))
	must.Eq(t, "", next)

	// perPage <= 0 lists everything; the prefix applies.
	stubs, next, err = s.CSIVolumeStubs(nil, AllNamespaces, "web", "", "", 0)
	must.NoError(t, err)
	must.Len(t, 4, stubs)
	must.Eq(t, "", next)

	// A token past the end returns nothing.
	stubs, _, err = s.CSIVolumeStubs(nil, AllNamespaces, "", "", "zzz/zzz", 10)
	must.NoError(t, err)
	must.SliceEmpty(t, stubs)

	_, _, err = s.CSIVolumeStubs(nil, AllNamespaces, "", "", "no-slash", 10)
	mustCode(t, err, structs.ErrCodeInvalid)
}

func TestCSIVolumeStubs_PluginHealth(t *testing.T) {
	s := listFixture(t)
	// q's only node plugin turns unhealthy.
	must.NoError(t, s.UpsertNode(20, withPlugin(testNode("n2"), nil, nodeInfo("q", false, false))))

	ws := memdb.NewWatchSet()
	stubs, _, err := s.CSIVolumeStubs(ws, "default", "", "", "", 0)
	must.NoError(t, err)
	must.Len(t, 3, stubs)
	for _, st := range stubs {
		must.Eq(t, st.PluginID == "p", st.Schedulable, must.Sprint(st.ID))
		must.Eq(t, 1, st.NodesExpected)
	}

	// The listing watches the plugins it read.
	must.NoError(t, s.UpsertNode(21, healthyNodePlugin("n2", "q")))
	must.True(t, fired(ws))
}
