package state

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// Every list answered from the memo (no watch set, asked twice so the
// second is a hit) is the one a scan of the store gives (a watch set
// bypasses the memo): each namespace, prefix, plugin, page and filter.
func TestCSIVolumeStubs_MemoAnswersAsAScan(t *testing.T) {
	s := listFixture(t)
	notProd := func(ns string) bool { return ns != "prod" }
	type list struct {
		ns, prefix, plugin, token string
		perPage                   int
		allow                     func(string) bool
	}
	lists := []list{
		{ns: AllNamespaces},
		{ns: AllNamespaces, perPage: 2},
		{ns: AllNamespaces, perPage: 2, token: "default/web-1"},
		{ns: AllNamespaces, token: "default/web-2"},
		{ns: AllNamespaces, prefix: "web"},
		{ns: AllNamespaces, allow: notProd},
		{ns: AllNamespaces, allow: notProd, perPage: 3},
		{ns: AllNamespaces, allow: notProd, perPage: 3, token: "default/web-2"},
		{ns: "default"},
		{ns: "default", prefix: "web", perPage: 1},
		{ns: "default", plugin: "p"},
		{ns: AllNamespaces, plugin: "q", allow: notProd},
		{ns: "prod", allow: notProd},
		{ns: AllNamespaces, token: "zzz/zzz"},
	}
	for _, l := range lists {
		name := fmt.Sprintf("%+v allow=%v", l, l.allow != nil)
		want, wantNext, err := s.CSIVolumeStubsIn(memdb.NewWatchSet(), l.ns, l.prefix, l.plugin, l.token, l.perPage, l.allow)
		must.NoError(t, err)
		// The complete list first, so the paged ones hit its memo too.
		_, _, err = s.CSIVolumeStubsIn(nil, l.ns, l.prefix, l.plugin, "", 0, nil)
		must.NoError(t, err)
		for range 2 {
			got, next, err := s.CSIVolumeStubsIn(nil, l.ns, l.prefix, l.plugin, l.token, l.perPage, l.allow)
			must.NoError(t, err)
			must.Eq(t, stubKeys(want), stubKeys(got), must.Sprint(name))
			must.Eq(t, want, got, must.Sprint(name))
			must.Eq(t, wantNext, next, must.Sprint(name))
		}
	}
}

// A complete list polled at an unchanged state is the same slice; a write
// of a volume, or of its plugin's health, gives a new one with the change;
// a snapshot taken before the write still lists what it held.
func TestCSIVolumeStubs_MemoFollowsWrites(t *testing.T) {
	s := listFixture(t)
	first, _, err := s.CSIVolumeStubs(nil, "default", "", "", "", 0)
	must.NoError(t, err)
	again, _, err := s.CSIVolumeStubs(nil, "default", "", "", "", 0)
	must.NoError(t, err)
	must.True(t, &first[0] == &again[0], must.Sprint("an unchanged list is served from the memo"))
	before, err := s.Snapshot()
	must.NoError(t, err)

	v := testVolume("db-0", "p")
	must.NoError(t, s.UpsertCSIVolume(20, []*structs.CSIVolume{v}))
	added, _, err := s.CSIVolumeStubs(nil, "default", "", "", "", 0)
	must.NoError(t, err)
	must.Eq(t, []string{"default/db-0", "default/db-1", "default/web-1", "default/web-2"}, stubKeys(added))

	old, _, err := before.CSIVolumeStubs(nil, "default", "", "", "", 0)
	must.NoError(t, err)
	must.Eq(t, []string{"default/db-1", "default/web-1", "default/web-2"}, stubKeys(old))

	// q's only node plugin turns unhealthy: the volume rows are unchanged.
	must.NoError(t, s.UpsertNode(21, withPlugin(testNode("n2"), nil, nodeInfo("q", false, false))))
	unhealthy, _, err := s.CSIVolumeStubs(nil, "default", "", "", "", 0)
	must.NoError(t, err)
	for _, st := range unhealthy {
		must.Eq(t, st.PluginID == "p", st.Schedulable, must.Sprint(st.ID))
	}
	for _, st := range added {
		must.True(t, st.Schedulable, must.Sprint("a stub handed out earlier is never changed: ", st.ID))
	}
}

// The memo keeps at most memoMaxScans scans and memoMaxStubs stubs, one
// scan per list, the newest.
func TestStubMemo_Bounded(t *testing.T) {
	var m stubMemo
	stubs := func(n int) []*structs.CSIVolListStub { return make([]*structs.CSIVolListStub, n) }
	for i := range memoMaxScans + 2 {
		m.put(memoKey{prefix: fmt.Sprint(i), volumes: 1}, stubs(10))
	}
	must.Len(t, memoMaxScans, m.scans)
	must.Eq(t, 10*memoMaxScans, m.stubs)
	_, ok := m.get(memoKey{prefix: "0", volumes: 1})
	must.False(t, ok, must.Sprint("the oldest scan went"))
	_, ok = m.get(memoKey{prefix: fmt.Sprint(memoMaxScans + 1), volumes: 1})
	must.True(t, ok)

	// A later scan of the same list replaces the earlier one.
	m.put(memoKey{prefix: "5", volumes: 2}, stubs(3))
	_, ok = m.get(memoKey{prefix: "5", volumes: 1})
	must.False(t, ok)
	must.Len(t, memoMaxScans, m.scans)

	// Past the stubs' bound, older scans go; a scan above it is not kept.
	m.put(memoKey{prefix: "big", volumes: 1}, stubs(memoMaxStubs-5))
	must.LessEq(t, memoMaxStubs, m.stubs)
	_, ok = m.get(memoKey{prefix: "big", volumes: 1})
	must.True(t, ok)
	m.put(memoKey{prefix: "huge", volumes: 1}, stubs(memoMaxStubs+1))
	_, ok = m.get(memoKey{prefix: "huge", volumes: 1})
	must.False(t, ok)
}
