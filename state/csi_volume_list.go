package state

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// CSIVolumeStubs lists one page of volume stubs with their plugin health,
// sorted by namespace then ID, in a namespace (or AllNamespaces), optionally
// only one plugin's (pluginID != "") and only IDs with a prefix. nextToken,
// "namespace/id", is where the page starts (returned by the previous page);
// the returned next token is "" on the last page. perPage <= 0 lists all.
//
// Each plugin is read once per call, however many volumes name it, so a
// large list costs one plugin lookup per plugin rather than per volume.
// The stubs are shared with the store's list memo (see stubMemo): callers
// must not change them.
func (s *StateStore) CSIVolumeStubs(ws memdb.WatchSet, namespace, prefix, pluginID, nextToken string, perPage int) ([]*structs.CSIVolListStub, string, error) {
	return s.CSIVolumeStubsIn(ws, namespace, prefix, pluginID, nextToken, perPage, nil)
}

// CSIVolumeStubsIn is CSIVolumeStubs showing only the volumes of the
// namespaces allow accepts (nil: all). The filter runs before the paging,
// so pages stay full and a next token never names a volume the caller may
// not see.
//
// Without a watch set (callers that watch the table index rows instead),
// the list comes from the store's memo when neither the volumes nor the
// plugins changed since the same scan was made: a list polled at an
// unchanged state costs neither memdb's iteration nor the building of its
// stubs. After writes of a few volumes (and none of the plugins), the
// memo's scan is patched with those volumes read again (see patchStubs).
// A complete scan made here is memoized for the next one; a page that
// misses the memo scans only as far as its page, as before.
func (s *StateStore) CSIVolumeStubsIn(ws memdb.WatchSet, namespace, prefix, pluginID, nextToken string, perPage int,
	allow func(namespace string) bool) ([]*structs.CSIVolListStub, string, error) {
	var start volumeKey
	if nextToken != "" {
		var ok bool
		if start, ok = parseVolumeToken(nextToken); !ok {
			return nil, "", structs.ErrInvalid("invalid next token %q: want namespace/id", nextToken)
		}
	}

	txn := s.db.Txn(false)
	if ws != nil || s.stubs == nil {
		return scanStubs(txn, ws, namespace, prefix, pluginID, nextToken, start, perPage, allow)
	}
	key := memoKey{namespace: namespace, prefix: prefix, pluginID: pluginID}
	var err error
	if key.volumes, err = indexWatchTxn(txn, nil, TableCSIVolumes); err != nil {
		return nil, "", err
	}
	if key.plugins, err = indexWatchTxn(txn, nil, TableCSIPlugins); err != nil {
		return nil, "", err
	}
	all, ok := s.stubs.get(key)
	if !ok {
		// An older scan of the same list, with the volumes written since
		// read again, is what a scan would give.
		if all, ok = s.patchStubs(txn, key); ok {
			s.stubs.put(key, all)
		}
	}
	if !ok {
		if nextToken != "" || perPage > 0 {
			return scanStubs(txn, nil, namespace, prefix, pluginID, nextToken, start, perPage, allow)
		}
		if all, _, err = scanStubs(txn, nil, namespace, prefix, pluginID, "", volumeKey{}, 0, nil); err != nil {
			return nil, "", err
		}
		s.stubs.put(key, all)
	}
	if nextToken == "" && perPage <= 0 && allowsAll(all, allow) {
		// The kept list itself, shared: a caller that may see all of it
		// (no ACLs, or a token that may read each of its namespaces)
		// gets the same slice at the same state, whose body the HTTP
		// handler keeps.
		return all, "", nil
	}
	return pageStubs(all, nextToken, start, perPage, allow)
}

// allowsAll reports whether allow (nil: all) accepts the namespace of every
// stub, asking once per run of one namespace.
func allowsAll(stubs []*structs.CSIVolListStub, allow func(string) bool) bool {
	if allow == nil {
		return true
	}
	for i, st := range stubs {
		if (i == 0 || st.Namespace != stubs[i-1].Namespace) && !allow(st.Namespace) {
			return false
		}
	}
	return true
}

// scanStubs reads the stubs of one page from the store.
func scanStubs(txn *memdb.Txn, ws memdb.WatchSet, namespace, prefix, pluginID, nextToken string, start volumeKey, perPage int,
	allow func(string) bool) ([]*structs.CSIVolListStub, string, error) {
	var iter memdb.ResultIterator
	var err error
	if pluginID != "" {
		iter, err = volumesByPluginTxn(txn, ws, namespace, prefix, pluginID)
	} else {
		iter, err = volumesByNamespaceTxn(txn, ws, namespace, prefix)
	}
	if err != nil {
		return nil, "", err
	}

	build := newStubBuilder(txn, ws)
	var stubs []*structs.CSIVolListStub
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		v := raw.(*structs.CSIVolume)
		if nextToken != "" && (volumeKey{v.Namespace, v.ID}).less(start) {
			continue
		}
		if allow != nil && !allow(v.Namespace) {
			continue
		}
		if perPage > 0 && len(stubs) == perPage {
			return stubs, v.Namespace + "/" + v.ID, nil
		}
		stub, err := build.stub(v)
		if err != nil {
			return nil, "", err
		}
		stubs = append(stubs, stub)
	}
	return stubs, "", nil
}

// stubBuilder makes the stubs of one read, with their plugin's health,
// reading each plugin once however many volumes name it.
type stubBuilder struct {
	txn    *memdb.Txn
	ws     memdb.WatchSet
	health map[string]pluginHealth
}

func newStubBuilder(txn *memdb.Txn, ws memdb.WatchSet) *stubBuilder {
	return &stubBuilder{txn: txn, ws: ws, health: map[string]pluginHealth{}}
}

func (b *stubBuilder) stub(v *structs.CSIVolume) (*structs.CSIVolListStub, error) {
	h, ok := b.health[v.PluginID]
	if !ok {
		p, err := pluginByIDTxn(b.txn, b.ws, v.PluginID)
		if err != nil {
			return nil, err
		}
		h = healthOf(p)
		b.health[v.PluginID] = h
	}
	stub := v.Stub()
	setStubHealth(stub, h)
	return stub, nil
}

// pageStubs cuts one page out of a complete list, with the same rules as
// scanStubs. allow is asked once per run of one namespace.
func pageStubs(all []*structs.CSIVolListStub, nextToken string, start volumeKey, perPage int,
	allow func(string) bool) ([]*structs.CSIVolListStub, string, error) {
	var out []*structs.CSIVolListStub
	var ns string
	shown, asked := true, false
	for _, st := range all {
		if nextToken != "" && (volumeKey{st.Namespace, st.ID}).less(start) {
			continue
		}
		if allow != nil {
			if !asked || st.Namespace != ns {
				ns, shown, asked = st.Namespace, allow(st.Namespace), true
			}
			if !shown {
				continue
			}
		}
		if perPage > 0 && len(out) == perPage {
			return out, st.Namespace + "/" + st.ID, nil
		}
		out = append(out, st)
	}
	return out, "", nil
}

// volumeKey is a volume's place in list order.
type volumeKey struct{ namespace, id string }

func (k volumeKey) less(o volumeKey) bool { return k.compare(o) < 0 }

func (k volumeKey) compare(o volumeKey) int {
	if c := strings.Compare(k.namespace, o.namespace); c != 0 {
		return c
	}
	return strings.Compare(k.id, o.id)
}

// parseVolumeToken splits "namespace/id". Neither part may contain '/'
// (structs.ValidateID refuses it in IDs), so the first one separates them.
func parseVolumeToken(token string) (volumeKey, bool) {
	ns, id, ok := strings.Cut(token, "/")
	return volumeKey{ns, id}, ok
}

// Bounds of the list memo: the scans it keeps, and the stubs they hold in
// all (a stub is about 200 bytes beside the strings it shares with its
// volume row, so the bound is some 40 MB).
const (
	memoMaxScans = 4
	memoMaxStubs = 200_000
)

// stubMemo keeps the stubs of the latest complete volume scans, each with
// the indexes of the volume and plugin tables it was read at. A stub is
// made of its volume row and its plugin's health only, and any write of
// either table raises its index, so a scan is reused only while it is
// still exactly what a new one would return. The stubs are shared and
// never changed. The memo belongs to one store: a snapshot restore starts
// a fresh store, and with it a fresh memo.
type stubMemo struct {
	mu    sync.Mutex
	scans []memoScan // the newest last
	stubs int
}

type memoKey struct {
	namespace, prefix, pluginID string
	volumes, plugins            uint64
}

// sameList reports whether k and o name the same list, at any state.
func (k memoKey) sameList(o memoKey) bool {
	return k.namespace == o.namespace && k.prefix == o.prefix && k.pluginID == o.pluginID
}

type memoScan struct {
	key   memoKey
	stubs []*structs.CSIVolListStub
}

func (m *stubMemo) get(key memoKey) ([]*structs.CSIVolListStub, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sc := range m.scans {
		if sc.key == key {
			return sc.stubs, true
		}
	}
	return nil, false
}

// put keeps a scan, in place of an older one of the same list and
// dropping the oldest past the bounds. A scan larger than the bound is not
// kept.
func (m *stubMemo) put(key memoKey, stubs []*structs.CSIVolListStub) {
	if len(stubs) > memoMaxStubs {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.scans[:0]
	m.stubs = 0
	for _, sc := range m.scans {
		if !sc.key.sameList(key) {
			kept = append(kept, sc)
			m.stubs += len(sc.stubs)
		}
	}
	clear(m.scans[len(kept):])
	m.scans = append(kept, memoScan{key: key, stubs: stubs})
	m.stubs += len(stubs)
	for len(m.scans) > memoMaxScans || m.stubs > memoMaxStubs {
		m.stubs -= len(m.scans[0].stubs)
		m.scans[0] = memoScan{}
		m.scans = m.scans[1:]
	}
}

// patchStubs brings the memo's scan of key's list at an older state up to
// date: the volumes written since (volumeChanges) are read again and
// merged into it by their place in list order. It declines (false) when
// there is no such scan, when the plugins changed (every stub's health may
// have), when the record of writes does not cover the interval, or when so
// many volumes changed that a scan costs less. Rows read by ID cost more
// than rows iterated, hence the bound.
func (s *StateStore) patchStubs(txn *memdb.Txn, key memoKey) ([]*structs.CSIVolListStub, bool) {
	old, from, ok := s.stubs.older(key)
	if !ok {
		return nil, false
	}
	changed, ok := s.changes.between(from, key.volumes, len(old)/8+16)
	if !ok {
		return nil, false
	}
	build := newStubBuilder(txn, nil)
	out := make([]*structs.CSIVolListStub, 0, len(old)+len(changed))
	i := 0
	for _, k := range changed {
		for i < len(old) && (volumeKey{old[i].Namespace, old[i].ID}).less(k) {
			out = append(out, old[i])
			i++
		}
		if i < len(old) && old[i].Namespace == k.namespace && old[i].ID == k.id {
			i++ // replaced below, or deleted
		}
		v, err := volumeByIDTxn(txn, nil, k.namespace, k.id)
		if err != nil {
			return nil, false
		}
		if v == nil || !key.lists(v) {
			continue
		}
		stub, err := build.stub(v)
		if err != nil {
			return nil, false
		}
		out = append(out, stub)
	}
	return append(out, old[i:]...), true
}

// lists reports whether a volume belongs to the list key names, by the
// same rules as volumesByNamespaceTxn and volumesByPluginTxn.
func (k memoKey) lists(v *structs.CSIVolume) bool {
	return (k.namespace == AllNamespaces || v.Namespace == k.namespace) && strings.HasPrefix(v.ID, k.prefix) &&
		(k.pluginID == "" || v.PluginID == k.pluginID)
}

// older returns the memo's scan of the same list as key at an older state
// of the volumes and the same of the plugins, with its volumes index.
func (m *stubMemo) older(key memoKey) ([]*structs.CSIVolListStub, uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sc := range m.scans {
		if k := sc.key; k.sameList(key) && k.plugins == key.plugins && k.volumes < key.volumes {
			return sc.stubs, k.volumes, true
		}
	}
	return nil, 0, false
}

// maxVolumeChanges bounds the record of volume writes.
const maxVolumeChanges = 8192

// volumeChanges records which volumes the latest writes of the volumes
// table changed, with the table's index after each, so that a list memo
// of an older state can be brought up to date by reading only those. The
// store's only writer (the FSM) records each write once it committed, in
// index order.
type volumeChanges struct {
	mu      sync.Mutex
	entries []volumeChange // by index, ascending
	// complete is the index after which every change is recorded: the
	// index of the last entry dropped to keep the bound.
	complete uint64
	// gap is set when a write could not be recorded: nothing is covered
	// until the next write recorded, whose index bounds the lost one's.
	gap bool
}

type volumeChange struct {
	index uint64
	key   volumeKey
}

// record notes the volumes one committed write changed at index.
func (c *volumeChanges) record(index uint64, keys []volumeKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gap {
		// The lost write came before this one.
		c.complete, c.gap = max(c.complete, index-1), false
		c.entries = nil
	}
	for _, k := range keys {
		c.entries = append(c.entries, volumeChange{index: index, key: k})
	}
	if len(c.entries) > maxVolumeChanges {
		drop := len(c.entries) - maxVolumeChanges/2
		c.complete = c.entries[drop-1].index
		c.entries = append(c.entries[:0:0], c.entries[drop:]...)
	}
}

// between returns, sorted by list order and each once, the volumes written
// at indexes in (from, to], or false when the record does not hold them
// all (some were dropped, or the write at to is not recorded yet) or when
// there are more than most.
func (c *volumeChanges) between(from, to uint64, most int) ([]volumeKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gap || from < c.complete || len(c.entries) == 0 || c.entries[len(c.entries)-1].index < to {
		return nil, false
	}
	start, _ := slices.BinarySearchFunc(c.entries, from+1, func(e volumeChange, i uint64) int { return cmp.Compare(e.index, i) })
	seen := map[volumeKey]bool{}
	var out []volumeKey
	for _, e := range c.entries[start:] {
		if e.index > to {
			break
		}
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e.key)
			if len(out) > most {
				return nil, false
			}
		}
	}
	slices.SortFunc(out, volumeKey.compare)
	return out, true
}

// recordVolumeChanges notes, after a write committed, the volumes it
// changed, at the volumes table's index.
func (s *StateStore) recordVolumeChanges(changes memdb.Changes) {
	if s.changes == nil {
		return
	}
	var keys []volumeKey
	var index uint64
	for _, ch := range changes {
		switch ch.Table {
		case TableIndex:
			// The write's own bump of the table's index row.
			if e, ok := ch.After.(*IndexEntry); ok && e.Key == TableCSIVolumes {
				index = e.Value
			}
		case TableCSIVolumes:
			v, _ := ch.After.(*structs.CSIVolume)
			if v == nil {
				v, _ = ch.Before.(*structs.CSIVolume)
			}
			if v != nil {
				keys = append(keys, volumeKey{v.Namespace, v.ID})
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	if index == 0 {
		// The row was not bumped (an earlier write at the same index
		// did): it holds the index already.
		var err error
		if index, err = s.Index(TableCSIVolumes); err != nil {
			// Not recorded: no memo is patched across this write.
			s.changes.lose()
			return
		}
	}
	s.changes.record(index, keys)
}

// lose notes a write that could not be recorded (see gap).
func (c *volumeChanges) lose() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gap = true
}
