package command

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const jobHCL = `
job "web" {
  group "app" {
    count = 3
    volume "data" {
      type            = "csi"
      source          = "vol"
      per_alloc       = true
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
      mount_options {
        mount_flags = ["password=topsecret"]
      }
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo hi > $VOLPLANE_VOLUME_DATA/hello"]
      }
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
`

// placedJob is the job of jobHCL as the servers return it after placing
// two of its three allocations, with a mount flag the CLI must not print.
func placedJob() *structs.Job {
	return &structs.Job{
		ID: "web", Name: "web", Namespace: "default", Type: "service", Status: "running", Version: 2,
		TaskGroups: []*structs.TaskGroup{{
			Name: "app", Count: 3,
			Volumes: map[string]*structs.VolumeRequest{
				"data": {Name: "data", Type: "csi", Source: "vol", PerAlloc: true, AccessMode: "single-node-writer",
					AttachmentMode: "file-system", MountOptions: &structs.CSIMountOptions{MountFlags: []string{"password=topsecret"}}},
				"ref": {Name: "ref", Type: "csi", Source: "reference", ReadOnly: true, AccessMode: "multi-node-reader-only",
					AttachmentMode: "file-system"},
				"zlogs": {Name: "zlogs", Type: "csi", Source: "logs", AccessMode: "multi-node-multi-writer",
					AttachmentMode: "file-system"},
			},
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/sh"}}},
		}},
		Placement: map[string]*structs.GroupPlacement{"app": {
			Desired: 3, Placed: 2,
			Blocked: []string{`volume "vol[2]" does not exist yet`, "node n3: CSI plugin dev is unhealthy\non it"},
		}},
	}
}

// placedAllocs are the two allocations placedJob placed, as the client
// reports them: one running, one whose task failed.
func placedAllocs() []*structs.Allocation {
	return []*structs.Allocation{
		{ID: "aaaaaaaa-0000-0000-0000-000000000000", Name: "web.app[0]", JobID: "web", TaskGroup: "app",
			NodeID: "node0001-aaaa-bbbb-cccc-000000000001", DesiredStatus: "run", ClientStatus: "running", CreateIndex: 11,
			VolumeStates: map[string]*structs.AllocVolumeState{"data": {VolumeID: "vol[0]", Step: "published"}}},
		{ID: "bbbbbbbb-0000-0000-0000-000000000000", Name: "web.app[1]", JobID: "web", TaskGroup: "app",
			NodeID: "node0001-aaaa-bbbb-cccc-000000000001", DesiredStatus: "run", ClientStatus: "failed",
			ClientDescription: "task t: exit code 3", CreateIndex: 11},
	}
}

func TestJobRun(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/jobs", 200, map[string]any{"Warnings": []string{"first warning"}, "Index": 10})
	f.timeline("GET /v1/job/web", snapshot{index: 11, body: placedJob()})
	f.timeline("GET /v1/job/web/allocations", snapshot{index: 11, body: placedAllocs()})
	path := writeFile(t, "web.hcl", jobHCL)

	r := run(t, "", "job", "run", "-token=tok", path)
	// Blocked and failed allocations: Nomad's exit code for placement
	// problems.
	must.Eq(t, 2, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Warning: first warning\n", r.stderr)
	must.Eq(t, `Job "web" registered

==> T: Monitoring job "web"
    T: Group "app": 2 of 3 placed, blocked: volume "vol[2]" does not exist yet (and 1 more reason)
    T: Allocation "aaaaaaaa" created: node "node0001", group "app"
    T: Allocation "aaaaaaaa" volume "data" ("vol[0]"): published
    T: Allocation "aaaaaaaa" status changed: "pending" -> "running"
    T: Allocation "bbbbbbbb" created: node "node0001", group "app"
    T: Allocation "bbbbbbbb" status changed: "pending" -> "failed" (task t: exit code 3)
==> T: Job "web": 1 running, 1 failed, 1 blocked

Placement
Group  Desired  Placed
app    3        2

Group "app" is blocked:
  * volume "vol[2]" does not exist yet
  * node n3: CSI plugin dev is unhealthy on it
`, stamped(r.out))
	must.StrNotContains(t, r.out, "\x1b[", must.Sprint("no colour when the output is not a terminal"))

	reqs := f.requests()
	must.Eq(t, "PUT", reqs[0].Method)
	must.Eq(t, "/v1/jobs", reqs[0].Path)
	must.Eq(t, "tok", reqs[0].Token)
	var body struct{ Job *structs.Job }
	must.NoError(t, json.Unmarshal([]byte(reqs[0].Body), &body))
	must.Eq(t, "web", body.Job.ID)
	must.Eq(t, "default", body.Job.Namespace)
	must.Eq(t, 3, body.Job.TaskGroups[0].Count)
	// The specification's mount flags go to the server, which needs them.
	must.Eq(t, []string{"password=topsecret"}, body.Job.TaskGroups[0].Volumes["data"].MountOptions.MountFlags)

	// The job is read with a blocking query from the write's index; the
	// allocations from the start.
	must.SliceContains(t, reqs, request{Method: "GET", Path: "/v1/job/web", Query: "index=10&namespace=default&wait=300000ms", Token: "tok"})
	must.SliceContains(t, reqs, request{Method: "GET", Path: "/v1/job/web/allocations", Query: "namespace=default&wait=300000ms", Token: "tok"})
}

// The monitor prints each change as the blocking queries return it, and
// ends once every allocation runs.
func TestJobRun_FollowsUntilRunning(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/jobs", 200, map[string]any{"Index": 10})
	pending := placedJob()
	pending.Placement = nil
	placed := placedJob()
	placed.Placement["app"] = &structs.GroupPlacement{Desired: 2, Placed: 2}
	allocs := func(status, step, waiting string) []*structs.Allocation {
		var out []*structs.Allocation
		for i, a := range placedAllocs() {
			a.ClientStatus, a.ClientDescription = status, ""
			a.VolumeStates = map[string]*structs.AllocVolumeState{"data": {VolumeID: fmt.Sprintf("vol[%d]", i), Step: step}}
			if i == 1 {
				a.VolumeStates["data"].Waiting, a.VolumeStates["data"].Attempts = waiting, 1
			}
			out = append(out, a)
		}
		return out
	}
	// Placement is reset by the registration: the first answers after it
	// may still have none. Each answer is served once the monitor acted on
	// the one before (its next query says so), so the output is the same
	// however the two queries interleave.
	f.timeline("GET /v1/job/web", snapshot{index: 11, body: pending},
		snapshot{index: 12, body: placed, gate: &gate{"GET /v1/job/web/allocations", 0}})
	f.timeline("GET /v1/job/web/allocations",
		snapshot{index: 12, body: allocs("pending", "claiming", `volume "vol[1]" is claimed by allocation "c0ffee00"`),
			gate: &gate{"GET /v1/job/web", 12}},
		snapshot{index: 13, body: allocs("pending", "published", "")},
		snapshot{index: 14, body: allocs("running", "published", "")})
	path := writeFile(t, "web.hcl", jobHCL)

	r := run(t, "", "job", "run", "-namespace=prod", path)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `Job "web" registered

==> T: Monitoring job "web"
    T: Group "app": 2 of 2 placed
    T: Allocation "aaaaaaaa" created: node "node0001", group "app"
    T: Allocation "aaaaaaaa" volume "data" ("vol[0]"): claiming
    T: Allocation "bbbbbbbb" created: node "node0001", group "app"
    T: Allocation "bbbbbbbb" volume "data" ("vol[1]"): claiming, waiting (attempt 1): volume "vol[1]" is claimed by allocation "c0ffee00"
    T: Allocation "aaaaaaaa" volume "data" ("vol[0]"): published
    T: Allocation "bbbbbbbb" volume "data" ("vol[1]"): published
    T: Allocation "aaaaaaaa" status changed: "pending" -> "running"
    T: Allocation "bbbbbbbb" status changed: "pending" -> "running"
==> T: Job "web": 2 running

Placement
Group  Desired  Placed
app    2        2
`, stamped(r.out))
	// -namespace fills in the namespace the file does not give.
	reqs := f.requests()
	must.Eq(t, "namespace=prod", reqs[0].Query)
	must.StrContains(t, reqs[0].Body, `"Namespace":"prod"`)
}

func TestJobRun_DetachAndNamespace(t *testing.T) {
	// With -detach nothing is read back.
	f := newFakeAgent(t)
	f.json("PUT /v1/jobs", 200, map[string]any{"Index": 10})
	r := run(t, `{"Job": {"ID": "web", "Namespace": "team", "TaskGroups": [{"Name": "g"}]}}`, "job", "run", "-detach", "-namespace=prod", "-")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Job \"web\" registered\n", r.out)
	// The file's own namespace wins.
	must.StrContains(t, r0(f).Body, `"Namespace":"team"`)
}

func TestJobRun_Errors(t *testing.T) {
	f := newFakeAgent(t)
	f.text("PUT /v1/jobs", 400, `job "web" validation failed: group "app" volume "data": volume with single-node-writer access mode allows only one reader or writer`)
	good := writeFile(t, "web.hcl", jobHCL)
	bad := writeFile(t, "bad.hcl", "job \"web\" {\n  group \"g\" {\n    count = \"three\"\n  }\n}\n")

	cases := []struct {
		name   string
		stdin  string
		args   []string
		stderr string
	}{
		{name: "server refuses", args: []string{good},
			stderr: `Error registering job: job "web" validation failed: group "app" volume "data": volume with single-node-writer access mode allows only one reader or writer`},
		{name: "bad spec", args: []string{bad}, stderr: "Error parsing job specification: " + bad + `:3:14: Incorrect value type for "count"`},
		{name: "bad stdin", stdin: "job {\n}\n", args: []string{"-"}, stderr: "Error parsing job specification: <stdin>:1:5: Missing id for job"},
		{name: "missing file", args: []string{"/nonexistent/job.hcl"}, stderr: "Error reading job specification: open /nonexistent/job.hcl"},
		{name: "no file", args: nil, stderr: "This command takes one argument: <file>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.stdin, append([]string{"job", "run"}, tc.args...)...)
			must.Eq(t, 1, r.code)
			must.Eq(t, "", r.out)
			must.StrContains(t, r.stderr, tc.stderr)
		})
	}

	// The job is registered even when it cannot be followed.
	f.json("PUT /v1/jobs", 200, map[string]any{"Index": 10})
	f.text("GET /v1/job/web", 500, "disk on fire")
	f.timeline("GET /v1/job/web/allocations")
	r := run(t, "", "job", "run", good)
	must.Eq(t, 1, r.code)
	must.Eq(t, "Job \"web\" registered\n\n==> T: Monitoring job \"web\"\n", stamped(r.out))
	must.Eq(t, "Error monitoring job \"web\": disk on fire\n", r.stderr)
}

func TestJobStop(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/job/web", 200, placedJob())
	f.text("GET /v1/job/we", 404, `job "we" not found`)
	f.json("GET /v1/jobs", 200, []*structs.JobListStub{{ID: "web"}})
	f.json("DELETE /v1/job/web", 200, map[string]any{"Index": 12})
	// No allocations: no claims to follow.
	f.json("GET /v1/job/web/allocations", 200, []*structs.Allocation{})

	r := run(t, "", "job", "stop", "web")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Job \"web\" stopped\n", r.out)
	reqs := f.requests()
	must.Eq(t, request{Method: "DELETE", Path: "/v1/job/web", Query: "namespace=default"}, reqs[len(reqs)-1])

	// A prefix is enough, and -purge removes the job; -detach does not
	// look for claims.
	r = run(t, "", "job", "stop", "-purge", "-detach", "we")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Job \"web\" stopped and purged\n", r.out)
	reqs = f.requests()
	must.Eq(t, "prefix=we", reqs[len(reqs)-3].Query)
	must.Eq(t, request{Method: "DELETE", Path: "/v1/job/web", Query: "namespace=default&purge=true"}, reqs[len(reqs)-1])

	f.text("GET /v1/job/nope", 404, `job "nope" not found`)
	f.json("GET /v1/jobs", 200, []*structs.JobListStub{})
	r = run(t, "", "job", "stop", "nope")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying job: job \"nope\" not found\n", r.stderr)

	r = run(t, "", "job", "stop")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes one argument: <id>")
}

func TestJobStatus_List(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/jobs", 200, []*structs.JobListStub{
		{ID: "web", Type: "service", Status: "running", Desired: 3, Placed: 2},
		{ID: "nightly", Type: "sysbatch", Status: "pending"},
	})
	r := run(t, "", "job", "status")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID       Type      Status   Placed/Desired
web      service   running  2/3
nightly  sysbatch  pending  0/0
`, r.out)

	r = run(t, "", "job", "status", "-json", "-namespace=prod")
	must.Eq(t, 0, r.code)
	var stubs []*structs.JobListStub
	must.NoError(t, json.Unmarshal([]byte(r.out), &stubs))
	must.Len(t, 2, stubs)
	reqs := f.requests()
	must.Eq(t, "namespace=prod", reqs[len(reqs)-1].Query)

	f.json("GET /v1/jobs", 200, []*structs.JobListStub{})
	r = run(t, "", "job", "status")
	must.Eq(t, "No jobs\n", r.out)
}

func TestJobStatus_Detail(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/job/web", 200, placedJob())
	f.json("GET /v1/job/web/allocations", 200, []*structs.Allocation{
		{ID: "bbbbbbbb-0000-0000-0000-000000000010", Name: "web.app[10]", TaskGroup: "app", NodeID: "node0002-aaaa",
			DesiredStatus: "run", ClientStatus: "pending"},
		{ID: "aaaaaaaa-0000-0000-0000-000000000002", Name: "web.app[2]", TaskGroup: "app", NodeID: "node0001-aaaa",
			DesiredStatus: "run", ClientStatus: "running"},
	})

	r := run(t, "", "job", "status", "web")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID          = web
Name        = web
Namespace   = default
Type        = service
Status      = running
Stopped     = false
Version     = 2
Submit Time = <none>

Placement
Group  Desired  Placed
app    3        2

Group "app" is blocked:
  * volume "vol[2]" does not exist yet
  * node n3: CSI plugin dev is unhealthy on it

Allocations
ID        Name         Node ID   Desired  Client Status  Modified
aaaaaaaa  web.app[2]   node0001  run      running        <none>
bbbbbbbb  web.app[10]  node0002  run      pending        <none>
`, r.out)
	reqs := f.requests()
	must.Eq(t, request{Method: "GET", Path: "/v1/job/web/allocations", Query: "namespace=default"}, reqs[1])

	// -json prints the job, with mount flags redacted even though the
	// server sent them.
	r = run(t, "", "job", "status", "-json", "web")
	must.Eq(t, 0, r.code)
	must.StrNotContains(t, r.out, "topsecret")
	var job structs.Job
	must.NoError(t, json.Unmarshal([]byte(r.out), &job))
	must.Eq(t, []string{structs.RedactedValue}, job.TaskGroups[0].Volumes["data"].MountOptions.MountFlags)
	must.Eq(t, 2, job.Placement["app"].Placed)
}

func TestJobStatus_PrefixAndErrors(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/jobs", 200, []*structs.JobListStub{{ID: "web-1"}, {ID: "web-2"}})
	r := run(t, "", "job", "status", "web")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying job: prefix \"web\" matched 2 jobs: web-1, web-2\n", r.stderr)

	f.json("GET /v1/job/web-1", 200, &structs.Job{ID: "web-1", Namespace: "default"})
	f.text("GET /v1/job/web-1/allocations", http.StatusInternalServerError, "disk on fire")
	r = run(t, "", "job", "status", "web-1")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying job allocations: disk on fire\n", r.stderr)

	r = run(t, "", "job", "status", "a", "b")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes at most one argument: [id]")
}

func TestJobAndAllocParents(t *testing.T) {
	r := run(t, "", "job")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Usage: volplane job <subcommand>")
	for _, sub := range []string{"run", "stop", "status"} {
		must.StrContains(t, r.stderr, "    "+sub+" ")
	}
	r = run(t, "", "alloc")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "    status    Display status information about an allocation")

	r = run(t, "", "job", "run", "-help")
	must.Eq(t, 0, r.code)
	must.StrContains(t, r.out, "-detach")
	must.StrContains(t, r.out, "The namespace of the job.")
}

// TestFormatPlacement_Waiting: what a rolling update waits for is listed
// under its group.
func TestFormatPlacement_Waiting(t *testing.T) {
	j := &structs.Job{ID: "p", Type: structs.JobTypeSystem, TaskGroups: []*structs.TaskGroup{{Name: "nodes"}},
		Placement: map[string]*structs.GroupPlacement{"nodes": {Desired: 2, Placed: 2, Waiting: []string{
			"rolling update: 1 allocation(s) of an older version left to replace, 1 at a time (update max_parallel)",
			`rolling update: waiting for the CSI plugin "dev" of allocation a1 (task "plugin") to be healthy on node n1`,
		}}}}
	must.Eq(t, `Placement
Group  Desired  Placed
nodes  2        2

Group "nodes" is being updated:
  * rolling update: 1 allocation(s) of an older version left to replace, 1 at a time (update max_parallel)
  * rolling update: waiting for the CSI plugin "dev" of allocation a1 (task "plugin") to be healthy on node n1`, formatPlacement(j))
}
