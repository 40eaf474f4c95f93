package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
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
	// A caller that may read every namespace of the list gets the same
	// slice; one that may not, a list of its own.
	everyNS, _, err := s.CSIVolumeStubsIn(nil, "default", "", "", "", 0, func(string) bool { return true })
	must.NoError(t, err)
	must.True(t, &first[0] == &everyNS[0], must.Sprint("the kept list is shared with a caller that may see all of it"))
	all, _, err := s.CSIVolumeStubsIn(nil, AllNamespaces, "", "", "", 0, nil)
	must.NoError(t, err)
	notProd, _, err := s.CSIVolumeStubsIn(nil, AllNamespaces, "", "", "", 0, func(ns string) bool { return ns != "prod" })
	must.NoError(t, err)
	must.Eq(t, len(all)-2, len(notProd))
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

// Lists made after each of a random run of writes (volumes registered,
// updated and deregistered in three namespaces and two plugins, plugin
// health changes, several writes between two lists) are the ones a scan
// gives, and a list after a write of a few volumes is patched from the
// memo, not scanned: its stubs of unchanged volumes are the very ones of
// the list before.
func TestCSIVolumeStubs_PatchedAfterWritesAsAScan(t *testing.T) {
	s := listFixture(t)
	rng := rand.New(rand.NewPCG(7, 11))
	namespaces := []string{"default", "prod", "a"}
	// As many lists as the memo keeps, so that each is patched from its
	// own scan before.
	lists := []memoKey{
		{namespace: "default"}, {namespace: AllNamespaces, prefix: "web"},
		{namespace: AllNamespaces, pluginID: "q"}, {namespace: "prod", pluginID: "p"},
	}
	must.Eq(t, memoMaxScans, len(lists))
	index := uint64(100)
	live := map[volumeKey]bool{}
	for _, ns := range namespaces {
		for i := range 40 {
			v := testVolume(fmt.Sprintf("vol-%02d", i), []string{"p", "q"}[i%2])
			v.Namespace = ns
			index++
			must.NoError(t, s.UpsertCSIVolume(index, []*structs.CSIVolume{v}))
			live[volumeKey{ns, v.ID}] = true
		}
	}
	patched := 0
	for round := range 200 {
		for range 1 + rng.IntN(3) {
			index++
			ns := namespaces[rng.IntN(len(namespaces))]
			id := fmt.Sprintf("%s-%02d", []string{"vol", "web"}[rng.IntN(2)], rng.IntN(50))
			k := volumeKey{ns, id}
			switch r := rng.IntN(10); {
			case r == 0:
				// A plugin's health changes: every stub of it may differ.
				must.NoError(t, s.UpsertNode(index, withPlugin(testNode("n2"), nil, nodeInfo("q", rng.IntN(2) == 0, false))))
			case live[k] && r < 4:
				must.NoError(t, s.CSIVolumeDeregister(index, ns, []string{id}, false))
				delete(live, k)
			case live[k]:
				cur, err := s.CSIVolumeByID(nil, ns, id)
				must.NoError(t, err)
				v := cur.Copy()
				v.MountOptions = &structs.CSIMountOptions{FSType: fmt.Sprint("fs", index)}
				must.NoError(t, s.UpsertCSIVolume(index, []*structs.CSIVolume{v}))
			default:
				v := testVolume(id, []string{"p", "q"}[rng.IntN(2)])
				v.Namespace = ns
				must.NoError(t, s.UpsertCSIVolume(index, []*structs.CSIVolume{v}))
				live[k] = true
			}
		}
		for _, l := range lists {
			got, _, err := s.CSIVolumeStubsIn(nil, l.namespace, l.prefix, l.pluginID, "", 0, nil)
			must.NoError(t, err)
			want, _, err := s.CSIVolumeStubsIn(memdb.NewWatchSet(), l.namespace, l.prefix, l.pluginID, "", 0, nil)
			must.NoError(t, err)
			must.Eq(t, want, got, must.Sprintf("round %d, list %+v", round, l))
		}
	}
	// One more write of one volume: the next list shares every other stub
	// with the one before it.
	first, _, err := s.CSIVolumeStubs(nil, AllNamespaces, "", "", "", 0)
	must.NoError(t, err)
	cur, err := s.CSIVolumeByID(nil, "prod", "vol-01")
	must.NoError(t, err)
	v := cur.Copy()
	v.MountOptions = &structs.CSIMountOptions{FSType: "last"}
	must.NoError(t, s.UpsertCSIVolume(index+1, []*structs.CSIVolume{v}))
	next, _, err := s.CSIVolumeStubs(nil, AllNamespaces, "", "", "", 0)
	must.NoError(t, err)
	must.Eq(t, len(first), len(next))
	for i := range next {
		if next[i] != first[i] {
			patched++
			must.Eq(t, "prod/vol-01", next[i].Namespace+"/"+next[i].ID, must.Sprint("only the written volume's stub is new"))
		}
	}
	must.Eq(t, 1, patched)
	must.Eq(t, index+1, next[slices.IndexFunc(next, func(s *structs.CSIVolListStub) bool {
		return s.Namespace == "prod" && s.ID == "vol-01"
	})].ModifyIndex)
}

// The record of volume writes answers only for intervals it covers whole.
func TestVolumeChanges_Coverage(t *testing.T) {
	var c volumeChanges
	_, ok := c.between(0, 5, 100)
	must.False(t, ok, must.Sprint("nothing recorded up to 5"))
	c.record(5, []volumeKey{{"b", "x"}, {"a", "y"}})
	c.record(7, []volumeKey{{"a", "y"}})
	c.record(9, []volumeKey{{"a", "z"}})

	got, ok := c.between(4, 7, 100)
	must.True(t, ok)
	must.Eq(t, []volumeKey{{"a", "y"}, {"b", "x"}}, got, must.Sprint("each once, in list order"))
	got, ok = c.between(5, 9, 100)
	must.True(t, ok)
	must.Eq(t, []volumeKey{{"a", "y"}, {"a", "z"}}, got)
	_, ok = c.between(5, 10, 100)
	must.False(t, ok, must.Sprint("the write at 10 is not recorded yet"))
	_, ok = c.between(4, 9, 2)
	must.False(t, ok, must.Sprint("more volumes than most"))

	for i := range maxVolumeChanges {
		c.record(uint64(10+i), []volumeKey{{"a", fmt.Sprint(i)}})
	}
	_, ok = c.between(9, 20, 100)
	must.False(t, ok, must.Sprint("dropped to keep the bound"))
	_, ok = c.between(uint64(10+maxVolumeChanges-2), uint64(10+maxVolumeChanges-1), 100)
	must.True(t, ok)
	must.LessEq(t, maxVolumeChanges, len(c.entries))

	// A write that could not be recorded: nothing is covered across it,
	// and only what comes after the next write recorded is covered again.
	last := uint64(10 + maxVolumeChanges - 1)
	c.lose()
	_, ok = c.between(last-1, last, 100)
	must.False(t, ok, must.Sprint("nothing is covered while a write is missing"))
	c.record(last+5, []volumeKey{{"a", "after"}})
	_, ok = c.between(last, last+5, 100)
	must.False(t, ok, must.Sprint("the lost write may be at any index before the next one"))
	got, ok = c.between(last+4, last+5, 100)
	must.True(t, ok)
	must.Eq(t, []volumeKey{{"a", "after"}}, got)
}
