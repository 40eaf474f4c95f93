package state

import (
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
// stubs. A complete scan made here is memoized for the next one; a page
// that misses the memo scans only as far as its page, as before.
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
		if nextToken != "" || perPage > 0 {
			return scanStubs(txn, nil, namespace, prefix, pluginID, nextToken, start, perPage, allow)
		}
		if all, _, err = scanStubs(txn, nil, namespace, prefix, pluginID, "", volumeKey{}, 0, nil); err != nil {
			return nil, "", err
		}
		s.stubs.put(key, all)
	}
	if allow == nil && nextToken == "" && perPage <= 0 {
		return all, "", nil
	}
	return pageStubs(all, nextToken, start, perPage, allow)
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

	health := map[string]pluginHealth{}
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
		h, ok := health[v.PluginID]
		if !ok {
			p, err := pluginByIDTxn(txn, ws, v.PluginID)
			if err != nil {
				return nil, "", err
			}
			h = healthOf(p)
			health[v.PluginID] = h
		}
		stub := v.Stub()
		setStubHealth(stub, h)
		stubs = append(stubs, stub)
	}
	return stubs, "", nil
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

func (k volumeKey) less(o volumeKey) bool {
	if k.namespace != o.namespace {
		return k.namespace < o.namespace
	}
	return k.id < o.id
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
		same := sc.key.namespace == key.namespace && sc.key.prefix == key.prefix && sc.key.pluginID == key.pluginID
		if !same {
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
