package command

import (
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// volume detach finds the volume and the node as the status commands do:
// the node by ID, a unique ID prefix or its name; and it says which nodes
// a prefix or name matched when it matched several.
func TestVolumeDetach_NodePrefixOrName(t *testing.T) {
	const full = "node0001-aaaa-bbbb-cccc-000000000001"
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())
	f.json("GET /v1/node/"+full, 200, testNode())
	n2 := &structs.NodeListStub{ID: "node0002-aaaa-bbbb-cccc-000000000002", Name: "worker-2", Status: structs.NodeStatusReady}
	f.json("GET /v1/nodes", 200, []*structs.NodeListStub{testNode().Stub(), n2})
	var detached []string
	f.routes["DELETE /v1/volume/csi/database/detach"] = func(w http.ResponseWriter, r *http.Request) {
		detached = append(detached, r.URL.Query().Get("node"))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Nomad-Index", "20")
		_, _ = w.Write([]byte(`{"Steps":["node unpublish: done","controller unpublish: done","claim freed"]}`))
	}
	for _, typed := range []string{
		full,       // the whole ID
		"node0001", // the 8 characters "node status" prints
		"worker-1", // the name
	} {
		detached = nil
		r := run(t, "", "volume", "detach", "database", typed)
		must.Eq(t, 0, r.code, must.Sprint(typed, ": ", r.stderr))
		must.Eq(t, []string{full}, detached, must.Sprint(typed))
		// Without an event stream, the steps the server reports.
		must.Eq(t, "==> T: Detaching volume \"database\" from node \"node0001\"\n"+
			"    T: node unpublish: done\n    T: controller unpublish: done\n    T: claim freed\n"+
			`==> T: Volume "database" detached from node "`+full+`"`+"\n", stamped(r.out))
	}

	// A prefix of two IDs, and a name that is also the prefix of another
	// node's ID: refused, naming each node and how it matched.
	detached = nil
	r := run(t, "", "volume", "detach", "database", "node000")
	must.Eq(t, 1, r.code)
	must.Eq(t, `Error querying node: "node000" matched 2 nodes by ID prefix or name: `+
		full+` (name "worker-1", by ID prefix); node0002-aaaa-bbbb-cccc-000000000002 (name "worker-2", by ID prefix)`+"\n", r.stderr)
	f.json("GET /v1/nodes", 200, []*structs.NodeListStub{testNode().Stub(),
		{ID: "work0003-aaaa-bbbb-cccc-000000000003", Name: "work"}, {ID: "c0ffee00-aaaa-bbbb-cccc-000000000004", Name: "work"}})
	r = run(t, "", "volume", "detach", "database", "work")
	must.Eq(t, 1, r.code)
	must.Eq(t, `Error querying node: "work" matched 2 nodes by ID prefix or name: `+
		`work0003-aaaa-bbbb-cccc-000000000003 (name "work", by ID prefix and name); c0ffee00-aaaa-bbbb-cccc-000000000004 (name "work", by name)`+"\n", r.stderr)
	must.SliceEmpty(t, detached, must.Sprint("nothing is detached when the node is ambiguous"))

	// A node nothing matches (gone from the state, its claims left) goes
	// to the server as typed, which answers for it.
	f.text("DELETE /v1/volume/csi/database/detach", 404, `volume "database" not found`)
	r = run(t, "", "volume", "detach", "database", "gone")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error detaching volume: volume \"database\" not found\n", r.stderr)
	reqs := f.requests()
	must.Eq(t, "node=gone", reqs[len(reqs)-1].Query)
}

// The volume may be given by a unique prefix of its ID too.
func TestVolumeDetach_VolumePrefix(t *testing.T) {
	const full = "node0001-aaaa-bbbb-cccc-000000000001"
	f := newFakeAgent(t)
	f.text("GET /v1/volume/csi/data", 404, `volume "data" not found`)
	f.json("GET /v1/volumes", 200, stubs()[:1])
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())
	f.json("GET /v1/node/"+full, 200, testNode())
	f.json("DELETE /v1/volume/csi/database/detach", 200, map[string]any{"Steps": []string{"claim freed"}})

	r := run(t, "", "volume", "detach", "data", full)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "==> T: Detaching volume \"database\" from node \"node0001\"\n    T: claim freed\n"+
		"==> T: Volume \"database\" detached from node \""+full+"\"\n", stamped(r.out))
	reqs := f.requests()
	must.Eq(t, "DELETE", reqs[len(reqs)-1].Method)
	must.Eq(t, "node="+full, reqs[len(reqs)-1].Query)
}
