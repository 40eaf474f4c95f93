package command

import (
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// The client's progress with each volume shows in a Step column and, for
// a volume it waits on, in a Waiting section: why (the claim error naming
// the allocation that holds the volume), the failed attempts and when the
// next one is.
func TestAllocStatus_VolumeSteps(t *testing.T) {
	next := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := newFakeAgent(t)
	a := testAlloc()
	a.ClientStatus, a.ClientDescription = "pending", ""
	a.VolumeStates = map[string]*structs.AllocVolumeState{
		"data": {VolumeID: "vol[0]", Step: structs.AllocVolumeStepClaiming, Attempts: 3, NextRetry: next.UnixNano(),
			Waiting: `volume "vol[0]": allocation "` + allocID + `" cannot take a write claim: volume max claims reached: ` +
				`allocation "old-alloc" on node "node0001" holds a write claim (single-node-writer)`},
		"ref": {VolumeID: "reference", Step: structs.AllocVolumeStepPublished},
	}
	f.json("GET /v1/allocation/"+allocID, 200, a)
	f.json("GET /v1/job/web", 200, placedJob())
	f.json("GET /v1/volume/csi/vol%5B0%5D", 200, &structs.CSIVolume{ID: "vol[0]",
		WriteClaims: map[string]*structs.CSIVolumeClaim{"old-alloc": {AllocationID: "old-alloc"}}})
	f.json("GET /v1/volume/csi/reference", 200, &structs.CSIVolume{ID: "reference",
		ReadClaims: map[string]*structs.CSIVolumeClaim{allocID: {
			AllocationID: allocID, NodeID: "node0001-aaaa-bbbb-cccc-000000000001", Mode: structs.CSIVolumeClaimRead,
			AccessMode: "multi-node-reader-only", State: structs.CSIVolumeClaimStateTaken,
		}}})
	f.text("GET /v1/volume/csi/logs", 404, `volume "logs" not found`)

	r := run(t, "", "alloc", "status", allocID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `Volumes
Volume  Volume ID  Mode   Claim             State   Node ID   Access Mode             Step
data    vol[0]     write  not claimed       <none>  <none>    <none>                  claiming
ref     reference  read   read              taken   node0001  multi-node-reader-only  published
zlogs   logs       write  volume not found  <none>  <none>    <none>                  <none>

Waiting
data (vol[0], claiming): volume "vol[0]": allocation "`+allocID+`" cannot take a write claim: volume max claims reached: `+
		`allocation "old-alloc" on node "node0001" holds a write claim (single-node-writer) [3 failed attempts; next at `+
		time.Unix(0, next.UnixNano()).Format(time.RFC3339)+`]
`)

	// The job is gone: the steps the client reported still show.
	f.text("GET /v1/job/web", 404, `job "web" not found`)
	r = run(t, "", "alloc", "status", allocID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `Volumes
Volume  Volume ID  Step
data    vol[0]     claiming
ref     reference  published

Waiting
data (vol[0], claiming): `)
}

// Each task's recent events show under "Recent Events", the newest first,
// as Nomad's alloc status shows them.
func TestAllocStatus_TaskEvents(t *testing.T) {
	at := func(s int) int64 { return time.Date(2026, 1, 2, 3, 4, s, 0, time.UTC).UnixNano() }
	a := testAlloc()
	var events []*structs.TaskEvent
	events = structs.AppendTaskEvent(events, structs.NewTaskEvent(structs.TaskStarted, at(1)))
	events = structs.AppendTaskEvent(events, structs.NewTaskEvent(structs.TaskPluginHealthy, at(2)).SetMessage("plugin: dev"))
	a.TaskStates = map[string]*structs.TaskState{"plugin": {State: structs.TaskStateRunning, Events: events}, "quiet": {State: structs.TaskStatePending}}
	out := taskEvents(a)
	must.StrContains(t, out, "Task \"plugin\" is \"running\"\nRecent Events:\n")
	must.StrNotContains(t, out, "quiet")
	lines := strings.Split(strings.TrimSpace(out[strings.Index(out, "Recent Events:"):]), "\n")
	must.SliceLen(t, 4, lines)
	must.StrContains(t, lines[1], "Time")
	must.StrContains(t, lines[2], "Plugin became healthy")
	must.StrContains(t, lines[2], "plugin: dev")
	must.StrContains(t, lines[3], "Task started by client")
}
