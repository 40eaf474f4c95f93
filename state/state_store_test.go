package state

import (
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestSchema(t *testing.T) {
	db := schema()
	must.NoError(t, db.Validate())
	for _, table := range append(Tables(), TableIndex) {
		ts, ok := db.Tables[table]
		must.True(t, ok, must.Sprintf("no schema for table %s", table))
		must.MapContainsKey(t, ts.Indexes, indexID)
	}
	must.MapLen(t, len(Tables())+1, db.Tables)
	must.MapContainsKey(t, db.Tables[TableCSIVolumes].Indexes, indexPluginID)
	must.MapContainsKeys(t, db.Tables[TableAllocs].Indexes, []string{indexNode, indexJob})
}

func TestIndexes(t *testing.T) {
	s := TestStateStore(t)
	idx, err := s.LatestIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(0), idx)

	must.NoError(t, s.UpsertNode(10, healthyNodePlugin("n1", "p")))
	must.NoError(t, s.UpsertAllocs(11, []*structs.Allocation{testAlloc("a1", "n1")}))
	must.NoError(t, s.UpsertCSIVolume(12, []*structs.CSIVolume{testVolume("v", "p")}))

	ws := memdb.NewWatchSet()
	idx, err = s.IndexWatch(ws, TableCSIVolumes, TableAllocs)
	must.NoError(t, err)
	must.Eq(t, uint64(12), idx)

	// A write to another table does not wake the watcher.
	must.NoError(t, s.UpsertNode(13, testNode("n2")))
	must.False(t, fired(ws))

	must.NoError(t, s.UpsertAllocs(14, []*structs.Allocation{testAlloc("a2", "n1")}))
	must.True(t, fired(ws))

	idx, err = s.IndexWatch(nil, TableCSIVolumes, TableAllocs)
	must.NoError(t, err)
	must.Eq(t, uint64(14), idx)
	idx, err = s.LatestIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(14), idx)
	mustIndex(t, s, TableNodes, 13)
	mustIndex(t, s, TableCSIPlugins, 10)

	// A failed write bumps nothing.
	mustCode(t, s.UpsertCSIVolume(15, []*structs.CSIVolume{testVolume("v2", "missing")}), structs.ErrCodeNotFound)
	idx, err = s.LatestIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(14), idx)
}

func TestSnapshotIsolation(t *testing.T) {
	s := setupVolume(t)
	snap, err := s.Snapshot()
	must.NoError(t, err)

	must.NoError(t, s.UpsertNode(20, healthyNodePlugin("n2", "p")))
	must.NoError(t, s.CSIVolumeDeregister(21, ns, []string{"vol"}, false))

	n, err := snap.NodeByID(nil, "n2")
	must.NoError(t, err)
	must.Nil(t, n)
	v, err := snap.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.NotNil(t, v)
	must.Eq(t, 1, v.NodesExpected)
	idx, err := snap.LatestIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(11), idx)
}

func TestAbandon(t *testing.T) {
	s := TestStateStore(t)
	must.False(t, closed(s.AbandonCh()))
	s.Abandon()
	s.Abandon() // twice is fine
	must.True(t, closed(s.AbandonCh()))
}

func TestRestore(t *testing.T) {
	src := setupVolume(t)
	must.NoError(t, src.UpsertAllocs(12, []*structs.Allocation{testAlloc("a1", "n1")}))
	must.NoError(t, src.CSIVolumeClaim(13, 77, ns, "vol", writeClaim("a1", "n1")))

	dst := TestStateStore(t)
	r, err := dst.Restore()
	must.NoError(t, err)
	for _, table := range []string{TableNodes, TableCSIPlugins, TableCSIVolumes, TableAllocs, TableIndex} {
		iter, err := src.db.Txn(false).Get(table, indexID)
		must.NoError(t, err)
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			switch o := raw.(type) {
			case *structs.Node:
				must.NoError(t, r.NodeRestore(o.Copy()))
			case *structs.CSIPlugin:
				must.NoError(t, r.CSIPluginRestore(o.Copy()))
			case *structs.CSIVolume:
				must.NoError(t, r.CSIVolumeRestore(o.Copy()))
			case *structs.Allocation:
				must.NoError(t, r.AllocRestore(o.Copy()))
			case *IndexEntry:
				must.NoError(t, r.IndexRestore(o))
			}
		}
	}

	// Nothing shows before the commit.
	n, err := dst.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Nil(t, n)

	must.NoError(t, r.Commit())
	for _, table := range Tables() {
		want, err := src.Index(table)
		must.NoError(t, err)
		mustIndex(t, dst, table, want)
	}
	want, err := src.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	got, err := dst.CSIVolumeByID(nil, ns, "vol")
	must.NoError(t, err)
	must.Eq(t, want, got)
	wantP, err := src.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	gotP, err := dst.CSIPluginByID(nil, "p")
	must.NoError(t, err)
	must.Eq(t, wantP, gotP)
}
