package command

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// fixedNow is the clock of monitors under test.
func fixedNow() time.Time { return time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC) }

func newMockUi() *cli.MockUi { return cli.NewMockUi() }

// queryValue is one parameter of a recorded query string.
func queryValue(query, name string) string {
	v, _ := url.ParseQuery(query)
	return v.Get(name)
}

var stampRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)`)

// stamped replaces the times a monitor prints with "T".
func stamped(s string) string { return stampRE.ReplaceAllString(s, "T") }

// snapshot is the answer of a blocking query at an index. With gate set,
// it is not served before the fake agent saw a request for gate.route with
// an index of at least gate.index: the caller acted on that answer.
type snapshot struct {
	index uint64
	body  any
	gate  *gate
}

type gate struct {
	route string
	index uint64
}

// timeline answers route as a blocking query over snapshots: a request
// with ?index=N gets the first snapshot above N, or waits (until the
// caller goes away) when there is none.
func (f *fakeAgent) timeline(route string, snaps ...snapshot) {
	f.routes[route] = func(w http.ResponseWriter, r *http.Request) {
		idx, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
		for _, s := range snaps {
			if s.index <= idx {
				continue
			}
			if s.gate != nil && !f.waitSeen(r, s.gate) {
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Nomad-Index", strconv.FormatUint(s.index, 10))
			must.NoError(f.t, json.NewEncoder(w).Encode(s.body))
			return
		}
		<-r.Context().Done()
	}
}

// waitSeen waits until a request for g.route with ?index >= g.index came,
// or r's caller went away (false).
func (f *fakeAgent) waitSeen(r *http.Request, g *gate) bool {
	for {
		f.mu.Lock()
		seen := false
		for _, q := range f.reqs {
			v, _ := strconv.ParseUint(queryValue(q.Query, "index"), 10, 64)
			if q.Method+" "+q.Path == g.route && v >= g.index {
				seen = true
			}
		}
		ch := f.newRequest
		f.mu.Unlock()
		if seen {
			return true
		}
		select {
		case <-ch:
		case <-r.Context().Done():
			return false
		}
	}
}

// eventStream answers GET /v1/event/stream with lines, then holds the
// stream open until the caller goes away.
func (f *fakeAgent) eventStream(lines ...string) {
	f.routes["GET /v1/event/stream"] = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		for _, l := range lines {
			_, _ = io.WriteString(w, l+"\n")
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
}

// claimEventLine encodes a claim event as the stream sends it.
func claimEventJSON(t *testing.T, index uint64, typ string, ev state.CSIClaimEvent) string {
	b, err := json.Marshal(map[string]any{"Index": index, "Topic": state.TopicCSIClaim, "Type": typ,
		"Key": ev.VolumeID, "Namespace": ev.Namespace, "Payload": ev})
	must.NoError(t, err)
	return string(b)
}

func TestJobMonitor_Observe(t *testing.T) {
	job := placedJob()
	allocs := placedAllocs()
	// An allocation of an earlier version, stopped before the run: not
	// news. One from before that still runs: only its changes are.
	old := &structs.Allocation{ID: "cccccccc-0000", Name: "web.app[2]", TaskGroup: "app", DesiredStatus: "stop",
		ClientStatus: "complete", CreateIndex: 3}
	kept := &structs.Allocation{ID: "dddddddd-0000", Name: "web.app[3]", TaskGroup: "app", DesiredStatus: "run",
		ClientStatus: "running", CreateIndex: 4}
	m := newJobMonitor(10)
	changes := m.observe(job, append(allocs, old, kept))
	var texts []string
	for _, c := range changes {
		texts = append(texts, c.text)
	}
	must.Eq(t, []string{
		`Group "app": 2 of 3 placed, blocked: volume "vol[2]" does not exist yet (and 1 more reason)`,
		`Allocation "aaaaaaaa" created: node "node0001", group "app"`,
		`Allocation "aaaaaaaa" volume "data" ("vol[0]"): published`,
		`Allocation "aaaaaaaa" status changed: "pending" -> "running"`,
		`Allocation "bbbbbbbb" created: node "node0001", group "app"`,
		`Allocation "bbbbbbbb" status changed: "pending" -> "failed" (task t: exit code 3)`,
	}, texts)
	must.Eq(t, styleYellow, changes[0].style)
	must.Eq(t, styleGreen, changes[3].style)
	must.Eq(t, styleRed, changes[5].style)

	// Nothing changed: nothing to say.
	must.SliceEmpty(t, m.observe(job, append(placedAllocs(), old, kept)))

	// The kept allocation fails its volume.
	kept = kept.Copy()
	kept.VolumeStates = map[string]*structs.AllocVolumeState{"data": {VolumeID: "vol[3]", Step: "failed"}}
	changes = m.observe(job, append(placedAllocs(), old, kept))
	must.Len(t, 1, changes)
	must.Eq(t, change{styleRed, `Allocation "dddddddd" volume "data" ("vol[3]"): failed`}, changes[0])

	o, done := settled(job, append(placedAllocs(), old, kept))
	must.True(t, done)
	// A running allocation runs, whatever its volume says.
	must.Eq(t, jobOutcome{running: 2, failed: 1, blocked: 1}, o)
	must.Eq(t, "2 running, 1 failed, 1 blocked", o.String())

	// A pending allocation, or a group not placed yet, is not settled.
	pending := placedAllocs()
	pending[0].ClientStatus = "pending"
	_, done = settled(job, pending)
	must.False(t, done)
	unplaced := placedJob()
	unplaced.Placement = nil
	_, done = settled(unplaced, placedAllocs())
	must.False(t, done)
	// Nor one whose placed allocations are not all seen yet.
	_, done = settled(job, placedAllocs()[:1])
	must.False(t, done)
}

// Colour, when it is on, marks headlines bold and changes by their
// meaning.
func TestProgress_Colour(t *testing.T) {
	ui := newMockUi()
	p := &progress{m: &Meta{Ui: ui}, paint: true, now: fixedNow}
	p.headline("Monitoring job \"web\"")
	p.line(styleRed, "failed")
	p.line("", "plain")
	must.Eq(t, "\x1b[1m==> T: Monitoring job \"web\"\x1b[0m\n    T: \x1b[31mfailed\x1b[0m\n    T: plain\n",
		stamped(ui.OutputWriter.String()))

	ui = newMockUi()
	p = &progress{m: &Meta{Ui: ui}, paint: false, now: fixedNow}
	p.line(styleRed, "failed")
	must.Eq(t, "    T: failed\n", stamped(ui.OutputWriter.String()))
}

// job stop follows the release of the claims of the job's allocations,
// step by step from the event stream, until each is freed.
func TestJobStop_FollowsRelease(t *testing.T) {
	f := newFakeAgent(t)
	job := placedJob()
	f.json("GET /v1/job/web", 200, job)
	allocs := placedAllocs()
	f.json("GET /v1/job/web/allocations", 200, allocs)
	f.json("DELETE /v1/job/web", 200, map[string]any{"Index": 12})
	a0, a1 := allocs[0].ID, allocs[1].ID
	node := allocs[0].NodeID
	claim := func(alloc string) *structs.CSIVolumeClaim {
		return &structs.CSIVolumeClaim{AllocationID: alloc, NodeID: node, Mode: structs.CSIVolumeClaimWrite,
			State: structs.CSIVolumeClaimStateTaken}
	}
	// per_alloc: web.app[0] uses vol[0], web.app[1] vol[1]; "reference"
	// and "logs" are claimed by others only.
	f.json("GET /v1/volume/csi/vol%5B0%5D", 200, &structs.CSIVolume{ID: "vol[0]", Namespace: "default",
		WriteClaims: map[string]*structs.CSIVolumeClaim{a0: claim(a0)}})
	f.json("GET /v1/volume/csi/vol%5B1%5D", 200, &structs.CSIVolume{ID: "vol[1]", Namespace: "default",
		WriteClaims: map[string]*structs.CSIVolumeClaim{a1: claim(a1)}})
	f.json("GET /v1/volume/csi/reference", 200, &structs.CSIVolume{ID: "reference", Namespace: "default",
		ReadClaims: map[string]*structs.CSIVolumeClaim{"other": claim("other")}})
	f.text("GET /v1/volume/csi/logs", 404, `volume "logs" not found`)
	ev := func(vol, alloc string) state.CSIClaimEvent {
		return state.CSIClaimEvent{VolumeID: vol, Namespace: "default", AllocationID: alloc, NodeID: node, Mode: "write"}
	}
	failed := ev("vol[1]", a1)
	failed.Attempts, failed.LastError, failed.NextAttempt = 1, "node unpublish: plugin busy", fixedNow().UnixNano()
	batch, err := json.Marshal(map[string]any{"Index": 16, "Events": []json.RawMessage{
		json.RawMessage(claimEventJSON(t, 16, state.EventClaimNodeDetached, ev("vol[1]", a1))),
		json.RawMessage(claimEventJSON(t, 16, state.EventClaimControllerDetached, ev("vol[1]", a1))),
	}})
	must.NoError(t, err)
	f.eventStream(
		claimEventJSON(t, 12, state.EventClaimWaitingForClient, ev("vol[0]", a0)),
		claimEventJSON(t, 12, state.EventClaimReleasing, ev("vol[1]", a1)),
		// Another allocation's claim: not this job's business.
		claimEventJSON(t, 13, state.EventClaimFreed, ev("reference", "other")),
		`{}`,
		claimEventJSON(t, 14, state.EventClaimReleasing, ev("vol[0]", a0)),
		claimEventJSON(t, 14, state.EventClaimReleaseFailed, failed),
		claimEventJSON(t, 15, state.EventClaimNodeDetached, ev("vol[0]", a0)),
		claimEventJSON(t, 15, state.EventClaimFreed, ev("vol[0]", a0)),
		// Nomad's framing: a batch of the events of one index.
		string(batch),
		claimEventJSON(t, 17, state.EventClaimFreed, ev("vol[1]", a1)),
	)

	r := run(t, "", "job", "stop", "web")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `Job "web" stopped

==> T: Following the release of 2 volume claims of job "web"
    T: Volume "vol[0]", allocation "aaaaaaaa": waiting for the client to stop the allocation's tasks
    T: Volume "vol[1]", allocation "bbbbbbbb": releasing
    T: Volume "vol[0]", allocation "aaaaaaaa": releasing
    T: Volume "vol[1]", allocation "bbbbbbbb": release failed (attempt 1): node unpublish: plugin busy; next attempt at T
    T: Volume "vol[0]", allocation "aaaaaaaa": unpublished from node "node0001"
    T: Volume "vol[0]", allocation "aaaaaaaa": freed
    T: Volume "vol[1]", allocation "bbbbbbbb": unpublished from node "node0001"
    T: Volume "vol[1]", allocation "bbbbbbbb": unpublished by the controller
    T: Volume "vol[1]", allocation "bbbbbbbb": freed
==> T: Every volume claim of job "web" is free
`, stamped(r.out))
	// The stream starts just before the stop's index (10, as the fake
	// answers), so none of its events is missed.
	var streamQuery string
	for _, q := range f.requests() {
		if q.Path == "/v1/event/stream" {
			streamQuery = q.Query
		}
	}
	must.Eq(t, "index=9&topic=CSIClaim", streamQuery)

	// A stream that ends early says so.
	f.text("GET /v1/event/stream", 200, `{"Error":"event stream ended: the server is shutting down; subscribe again"}`)
	r = run(t, "", "job", "stop", "web")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error following the release: event stream ended: the server is shutting down; subscribe again\n", r.stderr)
}

// volume detach prints each step from the event stream as it happens,
// rather than the list the server sends once it is done.
func TestVolumeDetach_LiveSteps(t *testing.T) {
	const full = "node0001-aaaa-bbbb-cccc-000000000001"
	const alloc = "c9d0e1f2-0000-0000-0000-000000000003"
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())
	f.json("GET /v1/node/"+full, 200, testNode())
	f.json("DELETE /v1/volume/csi/database/detach", 200, map[string]any{"Steps": []string{"listed, not shown"}})
	ev := func(node string) state.CSIClaimEvent {
		return state.CSIClaimEvent{VolumeID: "database", Namespace: "default", AllocationID: alloc, NodeID: node}
	}
	skipped := ev(full)
	skipped.Note = "node is down"
	f.eventStream(
		claimEventJSON(t, 20, state.EventClaimReleasing, ev(full)),
		// Another node's claim on the volume.
		claimEventJSON(t, 20, state.EventClaimReleasing, ev("node0002-aaaa-bbbb-cccc-000000000002")),
		claimEventJSON(t, 21, state.EventClaimNodeDetachSkipped, skipped),
		claimEventJSON(t, 22, state.EventClaimControllerDetached, ev(full)),
		claimEventJSON(t, 23, state.EventClaimFreed, ev(full)),
	)
	r := run(t, "", "volume", "detach", "database", full)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `==> T: Detaching volume "database" from node "node0001"
    T: Volume "database", allocation "c9d0e1f2": releasing
    T: Volume "database", allocation "c9d0e1f2": node step skipped (node is down)
    T: Volume "database", allocation "c9d0e1f2": unpublished by the controller
    T: Volume "database", allocation "c9d0e1f2": freed
==> T: Volume "database" detached from node "`+full+`"
`, stamped(r.out))
}

// deregister -force shows the claims it drops and their allocations.
func TestVolumeDeregister_ForceSteps(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())
	f.json("DELETE /v1/volume/csi/database", 200, map[string]any{"Warnings": "volume database was claimed"})
	f.json("GET /v1/allocation/a1b2c3d4-0000-0000-0000-000000000001", 200, &structs.Allocation{
		ID: "a1b2c3d4-0000-0000-0000-000000000001", DesiredStatus: "stop", ClientStatus: "complete"})
	f.text("GET /v1/allocation/c9d0e1f2-0000-0000-0000-000000000003", 404, "allocation not found")
	f.json("GET /v1/allocation/e5f6a7b8-0000-0000-0000-000000000002", 200, &structs.Allocation{
		ID: "e5f6a7b8-0000-0000-0000-000000000002", DesiredStatus: "run", ClientStatus: "running"})
	r := run(t, "", "volume", "deregister", "-force", "database")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `==> T: Deregistering volume "database" with -force
    T: The volume has 3 claims
    T: Claim of allocation "a1b2c3d4" on node "node0001" (write, taken): the allocation is complete (desired stop)
    T: Claim of allocation "c9d0e1f2" on node "node0001" (write, waiting-for-client): the allocation is gone
    T: Claim of allocation "e5f6a7b8" on node "node0002" (read, node-detached): the allocation still runs (running)
    T: Removing the volume and its claims from the servers' state; no node or controller is asked to unpublish it
Successfully deregistered volume "database"
`, stamped(r.out))
	must.Eq(t, "Warning: volume database was claimed\n", r.stderr)
}
