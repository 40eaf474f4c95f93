package httpapi

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/volplane/volplane/structs"
)

// DefaultStubCacheBytes bounds the volume stub cache when
// Config.StubCacheBytes is 0: about 140,000 stubs of a typical size.
const DefaultStubCacheBytes = 64 << 20

// stubEntryOverhead is what an entry costs beside its JSON: the entry, its
// key and its place in the maps, roughly.
const stubEntryOverhead = 160

// stubCache holds the JSON encoding of each volume stub, so that a list of
// many volumes costs copies rather than encodings: encoding/json took more
// than half the time of a list of 10,000 volumes. An entry is used only
// while every field of the stub that can change is as it was encoded
// (stubKey: the volume's modify index, which moves with every write of the
// volume row, and the fields derived from its plugin's health on read).
// Stubs carry no secrets (no volume secrets, mount options, parameters or
// context), so none enter the cache.
//
// The cache is bounded by its bytes (entries dropped at random past the
// bound), and entries of deleted volumes are dropped: at once when the
// volume is deregistered through this agent, and otherwise by the next
// complete list of its namespace (or of all namespaces), which drops every
// entry of its scope that it did not see.
type stubCache struct {
	maxBytes int

	mu    sync.RWMutex
	bytes int
	byNS  map[string]map[string]*stubEntry
	// gen numbers the complete lists, for the sweep of deleted volumes.
	gen atomic.Uint64

	// kept are the latest large lists encoded again, by the identity of
	// their stubs: the state store hands out the same slice for a list
	// polled at an unchanged state (its list memo), whose body is then the
	// same too. listedOnce are the latest large lists encoded, whose body
	// is kept only once it comes again: lists under a stream of writes, each
	// different, cost no copy. Both hold keptLists at most, so that a few
	// lists polled in turn (namespaces, plugins) all keep theirs.
	lastMu     sync.Mutex
	kept       []encodedList
	listedOnce [][]*structs.CSIVolListStub
	// prev is the latest large list encoded with the cache entries of its
	// stubs, for the next list that shares most of them (see encodeStubs).
	prev encodedStubs
}

// encodedStubs is a list's stubs and the cache entry each was encoded
// from. An entry of a stub is valid for as long as the stub exists: stubs
// are never changed.
type encodedStubs struct {
	stubs   []*structs.CSIVolListStub
	entries []*stubEntry
}

// encodedList is a list's stubs and their body. The body is shared
// between the requests that write it: nobody changes or pools it.
type encodedList struct {
	stubs []*structs.CSIVolListStub
	body  []byte
}

// sameSlice reports whether a and b are the same slice, not merely equal
// ones: the same elements in memory. The caches that compare keep their
// slice alive, so no other slice can take its address.
func sameSlice[T any](a, b []T) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

type stubEntry struct {
	key  stubKey
	json []byte
	// seen is the generation of the latest complete list that held it,
	// marked when that list swept (see sweep), or made it.
	seen atomic.Uint64
}

// stubKey is every field of a stub but its topologies, which change only
// with the volume row, and so with ModifyIndex.
type stubKey struct {
	Name, ExternalID, UnschedulableReason, PluginID, Provider string
	AccessMode                                                structs.CSIVolumeAccessMode
	AttachmentMode                                            structs.CSIVolumeAttachmentMode
	CurrentReaders, CurrentWriters, PastClaims                int
	ControllersHealthy, ControllersExpected                   int
	NodesHealthy, NodesExpected                               int
	Schedulable, ControllerRequired                           bool
	CreateIndex, ModifyIndex                                  uint64
}

func keyOf(s *structs.CSIVolListStub) stubKey {
	return stubKey{
		Name: s.Name, ExternalID: s.ExternalID, UnschedulableReason: s.UnschedulableReason,
		PluginID: s.PluginID, Provider: s.Provider,
		AccessMode: s.AccessMode, AttachmentMode: s.AttachmentMode,
		CurrentReaders: s.CurrentReaders, CurrentWriters: s.CurrentWriters, PastClaims: s.PastClaims,
		ControllersHealthy: s.ControllersHealthy, ControllersExpected: s.ControllersExpected,
		NodesHealthy: s.NodesHealthy, NodesExpected: s.NodesExpected,
		Schedulable: s.Schedulable, ControllerRequired: s.ControllerRequired,
		CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex,
	}
}

func newStubCache(maxBytes int) *stubCache {
	if maxBytes <= 0 {
		maxBytes = DefaultStubCacheBytes
	}
	return &stubCache{maxBytes: maxBytes, byNS: map[string]map[string]*stubEntry{}}
}

// listScope says whether a list was complete, and over what: complete lists
// (no prefix, plugin, node or page) sweep the entries of their scope.
type listScope struct {
	complete bool
	// namespace is the listed namespace, "*" for all.
	namespace string
}

// minSharedList is the size from which a list's body is kept for the next
// request that lists the very same stubs.
const minSharedList = 256

// encode returns the JSON array of stubs, as json.Encoder would write it
// (a trailing newline included), from the cache where it can. A pooled
// buffer is the caller's to hand back with putBuffer once written; one
// that is not pooled is shared and must be left as it is.
func (c *stubCache) encode(stubs []*structs.CSIVolListStub, scope listScope) (body []byte, pooled bool, err error) {
	if len(stubs) < minSharedList {
		body, err := c.encodeStubs(stubs, scope)
		return body, true, err
	}
	c.lastMu.Lock()
	for _, k := range c.kept {
		if sameSlice(k.stubs, stubs) {
			c.lastMu.Unlock()
			return k.body, false, nil
		}
	}
	again := slices.ContainsFunc(c.listedOnce, func(s []*structs.CSIVolListStub) bool { return sameSlice(s, stubs) })
	if !again {
		c.listedOnce = pushBounded(c.listedOnce, stubs)
	}
	c.lastMu.Unlock()
	if body, err = c.encodeStubs(stubs, scope); err != nil {
		return nil, false, err
	}
	if !again {
		return body, true, nil
	}
	// Listed again at the same state: this body is kept for the next
	// requests and shared with them, out of the pool.
	c.lastMu.Lock()
	c.kept = pushBounded(c.kept, encodedList{stubs: stubs, body: body})
	c.lastMu.Unlock()
	return body, false, nil
}

// keptLists bounds the lists whose body is kept, and those seen once.
const keptLists = 4

// pushBounded appends v, dropping the oldest past keptLists.
func pushBounded[T any](s []T, v T) []T {
	if len(s) == keptLists {
		s = append(s[:0:0], s[1:]...)
	}
	return append(s, v)
}

// encodeStubs is encode without the whole-list reuse.
func (c *stubCache) encodeStubs(stubs []*structs.CSIVolListStub, scope listScope) ([]byte, error) {
	entries := make([]*stubEntry, len(stubs))
	var misses []int
	var gen uint64
	if scope.complete {
		gen = c.gen.Add(1)
	}
	size := 3
	// The stubs the last large list shared with this one (the state store
	// patches its memo of a list with the volumes written since, and keeps
	// the other stubs) have their entries at hand, in the same order.
	c.lastMu.Lock()
	prev, prevEntries := c.prev.stubs, c.prev.entries
	c.lastMu.Unlock()
	j := 0
	c.mu.RLock()
	// Lists come sorted by namespace: look each namespace's map up once.
	var ns string
	var m map[string]*stubEntry
	for i, s := range stubs {
		for j < len(prev) && prev[j] != s && stubBefore(prev[j], s) {
			j++
		}
		e := (*stubEntry)(nil)
		if j < len(prev) && prev[j] == s {
			e = prevEntries[j]
			j++
		} else {
			if m == nil || s.Namespace != ns {
				ns, m = s.Namespace, c.byNS[s.Namespace]
			}
			if e = m[s.ID]; e != nil && e.key != keyOf(s) {
				e = nil
			}
		}
		if e == nil {
			misses = append(misses, i)
			continue
		}
		entries[i] = e
		size += len(e.json) + 1
	}
	c.mu.RUnlock()

	if len(misses) > 0 {
		for _, i := range misses {
			b, err := json.Marshal(stubs[i])
			if err != nil {
				return nil, err
			}
			size += len(b) + 1
			entries[i] = &stubEntry{key: keyOf(stubs[i]), json: b}
			entries[i].seen.Store(gen)
		}
		c.mu.Lock()
		for _, i := range misses {
			c.putLocked(stubs[i].Namespace, stubs[i].ID, entries[i])
		}
		c.mu.Unlock()
	}
	if scope.complete {
		c.sweep(scope.namespace, stubs, gen)
	}
	if len(stubs) >= minSharedList {
		c.lastMu.Lock()
		c.prev = encodedStubs{stubs: stubs, entries: entries}
		c.lastMu.Unlock()
	}

	out := getBuffer(size)
	out = append(out, '[')
	for i, e := range entries {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e.json...)
	}
	return append(out, ']', '\n'), nil
}

// stubBefore reports whether a comes before b in list order.
func stubBefore(a, b *structs.CSIVolListStub) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.ID < b.ID
}

// putLocked stores an entry, dropping entries at random while the cache is
// over its bound.
func (c *stubCache) putLocked(ns, id string, e *stubEntry) {
	m := c.byNS[ns]
	if m == nil {
		m = map[string]*stubEntry{}
		c.byNS[ns] = m
	}
	if old := m[id]; old != nil {
		c.bytes -= entrySize(id, old)
	}
	m[id] = e
	c.bytes += entrySize(id, e)
	for c.bytes > c.maxBytes {
		dropped := false
		for dns, dm := range c.byNS {
			for did, de := range dm {
				if dns == ns && did == id {
					continue
				}
				c.dropLocked(dns, did, de)
				dropped = true
				break
			}
			if dropped {
				break
			}
		}
		if !dropped {
			return
		}
	}
}

func entrySize(id string, e *stubEntry) int { return len(e.json) + len(id) + stubEntryOverhead }

func (c *stubCache) dropLocked(ns, id string, e *stubEntry) {
	m := c.byNS[ns]
	delete(m, id)
	if len(m) == 0 {
		delete(c.byNS, ns)
	}
	c.bytes -= entrySize(id, e)
}

// drop removes the entry of one volume (deregistered).
func (c *stubCache) drop(ns, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byNS[ns][id]; e != nil {
		c.dropLocked(ns, id, e)
	}
}

// sweep drops the entries of a complete list's scope that the list did
// not hold: their volumes were deleted. Only when the scope holds more
// entries than the list do any need dropping; the list's entries are then
// marked with its generation, and the others dropped. Entries seen by a
// later complete list (a higher generation) stay.
func (c *stubCache) sweep(ns string, listed []*structs.CSIVolListStub, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cached := 0
	if ns == "*" {
		for _, m := range c.byNS {
			cached += len(m)
		}
	} else {
		cached = len(c.byNS[ns])
	}
	if cached <= len(listed) {
		return
	}
	for _, s := range listed {
		if e := c.byNS[s.Namespace][s.ID]; e != nil && e.seen.Load() < gen {
			e.seen.Store(gen)
		}
	}
	for dns, m := range c.byNS {
		if ns != "*" && dns != ns {
			continue
		}
		for id, e := range m {
			if e.seen.Load() < gen {
				c.dropLocked(dns, id, e)
			}
		}
	}
}

// size returns the number of entries and their accounted bytes.
func (c *stubCache) size() (entries, bytes int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, m := range c.byNS {
		entries += len(m)
	}
	return entries, c.bytes
}

// bodyBuffers recycles the buffers large lists are assembled in: a list of
// 10,000 volumes is 4 MB, which a fresh allocation would zero and the
// collector then sweep, on every request.
var bodyBuffers sync.Pool

// maxPooledBuffer is the largest buffer kept for reuse.
const maxPooledBuffer = 64 << 20

func getBuffer(size int) []byte {
	if b, ok := bodyBuffers.Get().(*[]byte); ok && cap(*b) >= size {
		return (*b)[:0]
	}
	return make([]byte, 0, size)
}

func putBuffer(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBuffer {
		return
	}
	bodyBuffers.Put(&b)
}
