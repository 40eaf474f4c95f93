package command

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

var nextAttempt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// claimedVolume is a volume as the server might return it, except that it
// still carries a secret, mount flags and a publish context, to show that
// the CLI never prints them even when a server forgets to sanitize.
func claimedVolume() *structs.CSIVolume {
	return &structs.CSIVolume{
		ID: "database", Name: "db", Namespace: "default", ExternalID: "ext-1", PluginID: "dev",
		Provider: "dev.csi.volplane", ProviderVersion: "1.0.0",
		RequestedCapabilities: []*structs.CSIVolumeCapability{
			{AccessMode: "single-node-writer", AttachmentMode: "file-system"},
			{AccessMode: "single-node-reader-only", AttachmentMode: "file-system"},
		},
		AccessMode: "single-node-writer", AttachmentMode: "file-system",
		MountOptions:         &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"password=topsecret"}},
		Secrets:              structs.CSISecrets{"password": "hunter2"},
		Parameters:           map[string]string{"replicas": "2"},
		Capacity:             10 << 30,
		RequestedCapacityMin: 10 << 30,
		Topologies:           []*structs.CSITopology{{Segments: map[string]string{"zone": "z1", "rack": "R1"}}},
		Schedulable:          true, ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 2, NodesExpected: 2,
		WriteClaims: map[string]*structs.CSIVolumeClaim{
			"a1b2c3d4-0000-0000-0000-000000000001": {
				AllocationID: "a1b2c3d4-0000-0000-0000-000000000001", NodeID: "node0001-aaaa-bbbb-cccc-000000000001",
				Mode: structs.CSIVolumeClaimWrite, AccessMode: "single-node-writer", AttachmentMode: "file-system",
				PublishContext: map[string]string{"token": "publish-secret"},
			},
			// Being released: the live claim stays until it is freed.
			"c9d0e1f2-0000-0000-0000-000000000003": {
				AllocationID: "c9d0e1f2-0000-0000-0000-000000000003", NodeID: "node0001-aaaa-bbbb-cccc-000000000001",
				Mode: structs.CSIVolumeClaimWrite, AccessMode: "single-node-writer", AttachmentMode: "file-system",
			},
		},
		ReadClaims: map[string]*structs.CSIVolumeClaim{
			"e5f6a7b8-0000-0000-0000-000000000002": {
				AllocationID: "e5f6a7b8-0000-0000-0000-000000000002", NodeID: "node0002-aaaa-bbbb-cccc-000000000002",
				Mode: structs.CSIVolumeClaimRead, AccessMode: "single-node-writer", AttachmentMode: "file-system",
			},
		},
		PastClaims: map[string]*structs.CSIVolumeClaim{
			"e5f6a7b8-0000-0000-0000-000000000002": {
				AllocationID: "e5f6a7b8-0000-0000-0000-000000000002", NodeID: "node0002-aaaa-bbbb-cccc-000000000002",
				Mode: structs.CSIVolumeClaimRead, AccessMode: "single-node-writer", AttachmentMode: "file-system",
				State: structs.CSIVolumeClaimStateNodeDetached, Attempts: 3,
				LastError:   "controller unpublish: rpc error: code = Unavailable\ndesc = plugin gone",
				NextAttempt: nextAttempt.UnixNano(),
			},
			"c9d0e1f2-0000-0000-0000-000000000003": {
				AllocationID: "c9d0e1f2-0000-0000-0000-000000000003", NodeID: "node0001-aaaa-bbbb-cccc-000000000001",
				Mode: structs.CSIVolumeClaimWrite, AccessMode: "single-node-writer", AttachmentMode: "file-system",
				State: structs.CSIVolumeClaimStateWaitingForClient, Note: structs.WaitingForClientNote,
			},
		},
	}
}

func TestVolumeStatus_Detail(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())

	r := run(t, "", "volume", "status", "database")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, request{Method: "GET", Path: "/v1/volume/csi/database"}, r0(f))
	next := time.Unix(0, nextAttempt.UnixNano()).Format(time.RFC3339)
	want := `ID                   = database
Name                 = db
Namespace            = default
External ID          = ext-1
Plugin ID            = dev
Provider             = dev.csi.volplane
Version              = 1.0.0
Schedulable          = true
Controllers Healthy  = 1
Controllers Expected = 1
Nodes Healthy        = 2
Nodes Expected       = 2
Access Mode          = single-node-writer
Attachment Mode      = file-system
Capacity             = 10 GiB
Capacity Min         = 10 GiB
Capacity Max         = <none>
Clone ID             = <none>
Snapshot ID          = <none>

Capabilities
Access Mode              Attachment Mode
single-node-writer       file-system
single-node-reader-only  file-system

Mount Options
File System Type = ext4
Mount Flags      = [REDACTED]

Topologies
Topology  Segments
01        rack=R1, zone=z1

Claims
Claim  Allocation ID  Node ID   Mode   Access Mode         State               Attempts  Last Error                                                              Next Attempt
write  a1b2c3d4       node0001  write  single-node-writer  taken               0         <none>                                                                  <none>
past   c9d0e1f2       node0001  write  single-node-writer  waiting-for-client  0         waiting for the client to stop tasks                                    <none>
past   e5f6a7b8       node0002  read   single-node-writer  node-detached       3         controller unpublish: rpc error: code = Unavailable desc = plugin gone  ` + next + `
`
	must.Eq(t, want, r.out)
	for _, secret := range []string{"hunter2", "topsecret", "publish-secret", "replicas"} {
		must.StrNotContains(t, r.out, secret)
	}

	r = run(t, "", "volume", "status", "-verbose", "database")
	must.Eq(t, 0, r.code)
	must.StrContains(t, r.out, "a1b2c3d4-0000-0000-0000-000000000001")
	must.StrContains(t, r.out, "node0002-aaaa-bbbb-cccc-000000000002")
	must.StrContains(t, r.out, "Parameters\nreplicas = 2")
	must.StrContains(t, r.out, "Create Index         = 0")
	must.StrNotContains(t, r.out, "topsecret")
}

func TestVolumeStatus_DetailJSON(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())

	r := run(t, "", "volume", "status", "-json", "database")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	var got structs.CSIVolume
	must.NoError(t, json.Unmarshal([]byte(r.out), &got))
	must.Eq(t, "database", got.ID)
	must.MapEmpty(t, got.Secrets)
	must.Eq(t, []string{structs.RedactedValue}, got.MountOptions.MountFlags)
	must.Eq(t, 3, got.PastClaims["e5f6a7b8-0000-0000-0000-000000000002"].Attempts)
	for _, secret := range []string{"hunter2", "topsecret", "publish-secret"} {
		must.StrNotContains(t, r.out, secret)
	}
	must.True(t, strings.HasPrefix(r.out, "{\n    \"ID\": \"database\","))
}

func TestVolumeStatus_Prefix(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/volume/csi/data", 404, `volume "data" not found`)
	f.json("GET /v1/volumes", 200, stubs()[:1])
	f.json("GET /v1/volume/csi/database", 200, claimedVolume())

	r := run(t, "", "volume", "status", "data")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "ID                   = database")
	reqs := f.requests()
	must.Len(t, 3, reqs)
	must.Eq(t, "prefix=data&type=csi", reqs[1].Query)
	must.Eq(t, "/v1/volume/csi/database", reqs[2].Path)

	// Two matches: say which, and fail.
	f.json("GET /v1/volumes", 200, []*structs.CSIVolListStub{{ID: "data-1"}, {ID: "data-2"}})
	r = run(t, "", "volume", "status", "data")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying volume: prefix \"data\" matched 2 volumes: data-1, data-2\n", r.stderr)
}

func TestVolumeStatus_NotFound(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/volume/csi/nope", 404, `volume "nope" not found`)
	f.json("GET /v1/volumes", 200, []any{})

	r := run(t, "", "volume", "status", "nope")
	must.Eq(t, 1, r.code)
	must.Eq(t, "", r.out)
	must.Eq(t, "Error querying volume: volume \"nope\" not found\n", r.stderr)
}

func TestVolumeStatus_ConnectionRefused(t *testing.T) {
	newFakeAgent(t)
	addr := closedAddress(t)

	r := run(t, "", "volume", "status", "-address=http://"+addr)
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying volumes: could not reach a volplane agent at http://"+addr+": connection refused\n"+noAgentHint+"\n", r.stderr)

	r = run(t, "", "volume", "status", "-address", "ftp://"+addr)
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Error creating client: invalid address")
}

func TestVolumeStatus_Usage(t *testing.T) {
	newFakeAgent(t)
	r := run(t, "", "volume", "status", "a", "b")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes at most one argument: [id]")
	must.StrContains(t, r.stderr, "Usage: volplane volume status [options] [id]")
}
