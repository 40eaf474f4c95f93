package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func testStubs(n int, ns string) []*structs.CSIVolListStub {
	out := make([]*structs.CSIVolListStub, n)
	for i := range out {
		out[i] = &structs.CSIVolListStub{
			ID: fmt.Sprintf("vol-%04d", i), Namespace: ns, Name: fmt.Sprintf("<vol %d>", i),
			ExternalID: "ext", PluginID: "plug", Provider: "p", Schedulable: true,
			Topologies:  []*structs.CSITopology{{Segments: map[string]string{"zone": "a"}}},
			CreateIndex: uint64(10 + i), ModifyIndex: uint64(10 + i), NodesHealthy: 1, NodesExpected: 1,
		}
	}
	return out
}

func encodeStd(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	must.NoError(t, json.NewEncoder(&buf).Encode(v))
	return buf.Bytes()
}

// The cached encoding is byte for byte what encoding/json writes, on a
// miss, on a hit, and after a change of a derived field (plugin health)
// that leaves the modify index as it was.
func TestStubCache_SameBytesAsEncodingJSON(t *testing.T) {
	c := newStubCache(0)
	stubs := testStubs(50, "default")
	all := listScope{complete: true, namespace: "*"}
	for range 2 {
		got, _, err := c.encode(stubs, all)
		must.NoError(t, err)
		must.Eq(t, string(encodeStd(t, stubs)), string(got))
	}
	n, _ := c.size()
	must.Eq(t, 50, n)

	stubs[3].NodesHealthy = 0
	stubs[3].Schedulable = false
	stubs[3].UnschedulableReason = "no healthy node plugin"
	got, _, err := c.encode(stubs, all)
	must.NoError(t, err)
	must.Eq(t, string(encodeStd(t, stubs)), string(got))

	empty, _, err := c.encode(nil, all)
	must.NoError(t, err)
	must.Eq(t, "[]\n", string(empty))
}

// Entries of deleted volumes go: by the drop of a deregister, and by the
// next complete list of their namespace; a partial list sweeps nothing.
func TestStubCache_DeletedVolumesDropped(t *testing.T) {
	c := newStubCache(0)
	a := testStubs(10, "a")
	b := testStubs(5, "b")
	_, _, err := c.encode(append(append([]*structs.CSIVolListStub{}, a...), b...), listScope{complete: true, namespace: "*"})
	must.NoError(t, err)
	n, _ := c.size()
	must.Eq(t, 15, n)

	c.drop("a", a[0].ID)
	n, _ = c.size()
	must.Eq(t, 14, n)

	// A prefix list of namespace a holding two volumes sweeps nothing.
	_, _, err = c.encode(a[1:3], listScope{namespace: "a"})
	must.NoError(t, err)
	n, _ = c.size()
	must.Eq(t, 14, n)

	// A complete list of namespace a without a[1] and a[2] drops them and
	// leaves namespace b alone.
	_, _, err = c.encode(a[3:], listScope{complete: true, namespace: "a"})
	must.NoError(t, err)
	n, _ = c.size()
	must.Eq(t, 12, n)

	// A complete list of every namespace drops what it does not hold.
	_, _, err = c.encode(b[:1], listScope{complete: true, namespace: "*"})
	must.NoError(t, err)
	n, _ = c.size()
	must.Eq(t, 1, n)
}

// The cache stays within its bound, and its answers stay right.
func TestStubCache_Bounded(t *testing.T) {
	stubs := testStubs(200, "default")
	one, err := json.Marshal(stubs[0])
	must.NoError(t, err)
	limit := 20 * (len(one) + len(stubs[0].ID) + stubEntryOverhead)
	c := newStubCache(limit)
	for range 3 {
		got, _, err := c.encode(stubs, listScope{complete: true, namespace: "*"})
		must.NoError(t, err)
		must.Eq(t, string(encodeStd(t, stubs)), string(got))
		n, bytes := c.size()
		must.LessEq(t, limit, bytes)
		must.LessEq(t, 20, n)
		must.Positive(t, n)
	}
}

// A list is gzipped when the client accepts it, and decompresses to the
// plain answer; without Accept-Encoding it is plain.
func TestVolumeList_Gzip(t *testing.T) {
	be, h := newTestHandler(t)
	for i := range 40 {
		v := be.volumes[volKey(structs.DefaultNamespace, "vol1")].Copy()
		v.ID = fmt.Sprintf("bulk-%02d", i)
		be.volumes[volKey(structs.DefaultNamespace, v.ID)] = v
	}
	plain := do(t, h, http.MethodGet, "/v1/volumes", "")
	must.Eq(t, "", plain.Header().Get("Content-Encoding"))
	must.Greater(t, gzipMinSize, plain.Body.Len())

	for range 2 {
		zipped := do(t, h, http.MethodGet, "/v1/volumes", "", "Accept-Encoding", "deflate, gzip;q=0.9")
		must.Eq(t, "gzip", zipped.Header().Get("Content-Encoding"))
		must.Eq(t, fmt.Sprint(zipped.Body.Len()), zipped.Header().Get("Content-Length"))
		zr, err := gzip.NewReader(zipped.Body)
		must.NoError(t, err)
		got, err := io.ReadAll(zr)
		must.NoError(t, err)
		must.Eq(t, plain.Body.String(), string(got))
	}
	refused := do(t, h, http.MethodGet, "/v1/volumes", "", "Accept-Encoding", "gzip;q=0")
	must.Eq(t, "", refused.Header().Get("Content-Encoding"))

	// ?pretty still indents the cached encoding.
	pretty := do(t, h, http.MethodGet, "/v1/volumes?pretty", "")
	must.StrContains(t, pretty.Body.String(), "\n    {\n")
}

// Large identical bodies are compressed once.
func TestGzipRecent_ReusesIdenticalBody(t *testing.T) {
	var g gzipRecent
	body := bytes.Repeat([]byte(`{"ID":"x"},`), gzipCachedMin/10+1)
	first := g.compress(body, false)
	again := g.compress(bytes.Clone(body), false)
	must.True(t, &first[0] == &again[0], must.Sprint("the identical body reuses the compressed one"))
	other := g.compress(append(bytes.Clone(body), 'y'), false)
	must.True(t, &first[0] != &other[0], must.Sprint("a different body is compressed anew"))
}

// A large list whose stubs are the very slice encoded before (the state
// store's memo of an unchanged list) is answered, from its second request
// on, with the same body, shared rather than pooled; equal stubs in
// another slice are encoded again, as is the slice once it differs, and
// nothing is kept of a list seen once.
func TestStubCache_SameSliceSharesItsBody(t *testing.T) {
	c := newStubCache(0)
	stubs := testStubs(minSharedList, "default")
	all := listScope{complete: true, namespace: "*"}
	want := string(encodeStd(t, stubs))
	first, pooled, err := c.encode(stubs, all)
	must.NoError(t, err)
	must.True(t, pooled, must.Sprint("a list seen once is not kept"))
	must.Eq(t, want, string(first))
	putBuffer(first)

	second, pooled, err := c.encode(stubs, all)
	must.NoError(t, err)
	must.False(t, pooled, must.Sprint("the second request keeps its body"))
	must.Eq(t, want, string(second))
	third, pooled, err := c.encode(stubs, all)
	must.NoError(t, err)
	must.False(t, pooled)
	must.True(t, &second[0] == &third[0], must.Sprint("the same stubs share the body kept"))

	copied := append([]*structs.CSIVolListStub(nil), stubs...)
	_, pooled, err = c.encode(copied, all)
	must.NoError(t, err)
	must.True(t, pooled, must.Sprint("another slice is encoded anew"))

	small := testStubs(minSharedList-1, "default")
	for range 3 {
		_, pooled, err = c.encode(small, all)
		must.NoError(t, err)
		must.True(t, pooled, must.Sprint("a small list is not kept"))
	}
}

// A large list that shares most of its stubs with the one before it (the
// state store's memo patched with a few volumes written since: a stub
// replaced, one added, one gone) is encoded byte for byte as encoding/json
// would, the shared stubs taken from the entries of the list before.
func TestStubCache_ListSharingStubsWithThePrevious(t *testing.T) {
	c := newStubCache(0)
	all := listScope{complete: true, namespace: "*"}
	stubs := testStubs(minSharedList+10, "default")
	_, _, err := c.encode(stubs, all)
	must.NoError(t, err)

	next := append([]*structs.CSIVolListStub(nil), stubs[:5]...)
	changed := *stubs[5]
	changed.ModifyIndex, changed.CurrentWriters = 999, 1
	next = append(next, &changed)
	added := *stubs[6]
	added.ID = stubs[6].ID + "-new"
	added.Name = "<new>"
	next = append(next, stubs[6], &added)
	next = append(next, stubs[8:]...) // stubs[7] is gone
	for range 2 {
		got, _, err := c.encode(next, all)
		must.NoError(t, err)
		must.Eq(t, string(encodeStd(t, next)), string(got))
	}
	n, _ := c.size()
	must.Eq(t, len(next), n, must.Sprint("the gone volume's entry was swept"))
}

// Lists polled in turn (two namespaces, say) each keep their body from
// their second request on; more of them than keptLists drop the oldest.
func TestStubCache_ListsPolledInTurnKeepTheirBodies(t *testing.T) {
	c := newStubCache(0)
	lists := make([][]*structs.CSIVolListStub, keptLists+1)
	for i := range lists {
		lists[i] = testStubs(minSharedList, fmt.Sprint("ns", i))
	}
	encode := func(i int) bool {
		body, pooled, err := c.encode(lists[i], listScope{complete: true, namespace: fmt.Sprint("ns", i)})
		must.NoError(t, err)
		must.Eq(t, string(encodeStd(t, lists[i])), string(body))
		return pooled
	}
	for i := range keptLists {
		must.True(t, encode(i), must.Sprint("a list seen once is not kept"))
	}
	for range 2 {
		for i := range keptLists {
			must.False(t, encode(i), must.Sprintf("list %d, polled in turn with the others, keeps its body", i))
		}
	}
	must.True(t, encode(keptLists))
	must.False(t, encode(keptLists), must.Sprint("kept, in place of the oldest"))
	must.True(t, encode(0), must.Sprint("the oldest list's body went"))
}
