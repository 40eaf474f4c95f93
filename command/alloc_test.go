package command

import (
	"encoding/json"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const allocID = "a1b2c3d4-0000-0000-0000-000000000001"

func testAlloc() *structs.Allocation {
	return &structs.Allocation{
		ID: allocID, Namespace: "default", Name: "web.app[0]", JobID: "web", TaskGroup: "app",
		NodeID: "node0001-aaaa-bbbb-cccc-000000000001", JobVersion: 2,
		DesiredStatus: "run", ClientStatus: "running", ClientDescription: "tasks are running",
	}
}

func TestAllocStatus(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/allocation/"+allocID, 200, testAlloc())
	f.json("GET /v1/job/web", 200, placedJob())
	// per_alloc: the allocation's "data" is vol[0].
	f.json("GET /v1/volume/csi/vol%5B0%5D", 200, &structs.CSIVolume{ID: "vol[0]",
		WriteClaims: map[string]*structs.CSIVolumeClaim{allocID: {
			AllocationID: allocID, NodeID: "node0001-aaaa-bbbb-cccc-000000000001", Mode: structs.CSIVolumeClaimWrite,
			AccessMode: "single-node-writer", State: structs.CSIVolumeClaimStateTaken,
		}},
		ReadClaims: map[string]*structs.CSIVolumeClaim{"someone-else": {AllocationID: "someone-else"}},
	})
	f.json("GET /v1/volume/csi/reference", 200, &structs.CSIVolume{ID: "reference",
		ReadClaims: map[string]*structs.CSIVolumeClaim{"someone-else": {AllocationID: "someone-else"}}})
	f.text("GET /v1/volume/csi/logs", 404, `volume "logs" not found`)

	r := run(t, "", "alloc", "status", allocID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID                  = a1b2c3d4-0000-0000-0000-000000000001
Name                = web.app[0]
Namespace           = default
Job ID              = web
Job Version         = 2
Task Group          = app
Node ID             = node0001
Desired Status      = run
Desired Description = <none>
Client Status       = running
Client Description  = tasks are running
Created             = <none>
Modified            = <none>

Volumes
Volume  Volume ID  Mode   Claim             State   Node ID   Access Mode
data    vol[0]     write  write             taken   node0001  single-node-writer
ref     reference  read   not claimed       <none>  <none>    <none>
zlogs   logs       write  volume not found  <none>  <none>    <none>
`, r.out)
	reqs := f.requests()
	must.Len(t, 5, reqs)
	must.Eq(t, request{Method: "GET", Path: "/v1/job/web", Query: "namespace=default"}, reqs[1])
	must.Eq(t, request{Method: "GET", Path: "/v1/volume/csi/vol%5B0%5D", Query: "namespace=default"}, reqs[2])
}

func TestAllocStatus_PastClaimAndOldVersion(t *testing.T) {
	f := newFakeAgent(t)
	a := testAlloc()
	a.JobVersion = 1
	a.ClientStatus = "complete"
	f.json("GET /v1/allocation/"+allocID, 200, a)
	job := placedJob()
	job.TaskGroups[0].Volumes = map[string]*structs.VolumeRequest{"data": job.TaskGroups[0].Volumes["data"]}
	f.json("GET /v1/job/web", 200, job)
	f.json("GET /v1/volume/csi/vol%5B0%5D", 200, &structs.CSIVolume{ID: "vol[0]",
		PastClaims: map[string]*structs.CSIVolumeClaim{allocID: {
			AllocationID: allocID, NodeID: "node0001-aaaa-bbbb-cccc-000000000001", Mode: structs.CSIVolumeClaimWrite,
			AccessMode: "single-node-writer", State: structs.CSIVolumeClaimStateNodeDetached,
		}},
	})

	r := run(t, "", "alloc", "status", "-verbose", allocID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `Volumes
Volume  Volume ID  Mode   Claim  State          Node ID                               Access Mode
data    vol[0]     write  past   node-detached  node0001-aaaa-bbbb-cccc-000000000001  single-node-writer

Volumes as requested by job version 2; the allocation runs version 1.
`)
	must.StrContains(t, r.out, "Create Index        = 0\n")
}

func TestAllocStatus_JobGoneAndNoVolumes(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/allocation/"+allocID, 200, testAlloc())
	f.text("GET /v1/job/web", 404, `job "web" not found`)
	r := run(t, "", "alloc", "status", allocID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Volumes\nJob \"web\" is gone (purged): the allocation's volumes are unknown\n")

	job := placedJob()
	job.TaskGroups[0].Volumes = nil
	f.json("GET /v1/job/web", 200, job)
	r = run(t, "", "alloc", "status", allocID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Volumes\nNo volumes\n")

	job.TaskGroups[0].Name = "renamed"
	f.json("GET /v1/job/web", 200, job)
	r = run(t, "", "alloc", "status", allocID)
	must.StrContains(t, r.out, "Volumes\nJob \"web\" (version 2) has no task group \"app\"\n")
}

func TestAllocStatus_PrefixJSONAndErrors(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/allocation/"+allocID, 200, testAlloc())
	f.json("GET /v1/allocations", 200, []*structs.Allocation{testAlloc(), {ID: "ffff0000"}})

	r := run(t, "", "alloc", "status", "-json", "a1b2")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	var got structs.Allocation
	must.NoError(t, json.Unmarshal([]byte(r.out), &got))
	must.Eq(t, *testAlloc(), got)
	reqs := f.requests()
	must.Eq(t, "prefix=a1b2", reqs[1].Query)

	f.json("GET /v1/allocations", 200, []*structs.Allocation{{ID: "a1b2-x"}, {ID: "a1b2-y"}})
	r = run(t, "", "alloc", "status", "a1b2")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying allocation: prefix \"a1b2\" matched 2 allocations: a1b2-x, a1b2-y\n", r.stderr)

	f.json("GET /v1/allocations", 200, []*structs.Allocation{})
	r = run(t, "", "alloc", "status", "zz")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying allocation: no canned answer for GET /v1/allocation/zz\n", r.stderr)

	r = run(t, "", "alloc", "status")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes one argument: <id>")
}
