package command

import (
	"encoding/json"
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

func TestJobRun(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/jobs", 200, map[string]any{"Warnings": []string{"first warning"}, "Index": 10})
	f.json("GET /v1/job/web", 200, placedJob())
	path := writeFile(t, "web.hcl", jobHCL)

	r := run(t, "", "job", "run", "-token=tok", path)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Warning: first warning\n", r.stderr)
	must.Eq(t, `Job "web" registered

Placement
Group  Desired  Placed
app    3        2

Group "app" is blocked:
  * volume "vol[2]" does not exist yet
  * node n3: CSI plugin dev is unhealthy on it
`, r.out)

	reqs := f.requests()
	must.Len(t, 2, reqs)
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

	// The placement is read with a blocking query on the write's index.
	must.Eq(t, request{Method: "GET", Path: "/v1/job/web", Query: "index=10&namespace=default&wait=5000ms", Token: "tok"}, reqs[1])
}

func TestJobRun_PendingDetachAndNamespace(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/jobs", 200, map[string]any{"Index": 10})
	pending := placedJob()
	pending.Placement = nil
	f.json("GET /v1/job/web", 200, pending)
	path := writeFile(t, "web.hcl", jobHCL)

	r := run(t, "", "job", "run", "-namespace=prod", path)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Job \"web\" registered\n\nPlacement\nGroup  Desired  Placed\napp    3        pending\n", r.out)
	reqs := f.requests()
	// -namespace fills in the namespace the file does not give.
	must.Eq(t, "namespace=prod", reqs[0].Query)
	must.StrContains(t, reqs[0].Body, `"Namespace":"prod"`)
	must.Eq(t, "index=10&namespace=prod&wait=5000ms", reqs[1].Query)

	// With -detach nothing is read back.
	f = newFakeAgent(t)
	f.json("PUT /v1/jobs", 200, map[string]any{"Index": 10})
	r = run(t, `{"Job": {"ID": "web", "Namespace": "team", "TaskGroups": [{"Name": "g"}]}}`, "job", "run", "-detach", "-namespace=prod", "-")
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

	// The job is registered even when its placement cannot be read.
	f.json("PUT /v1/jobs", 200, map[string]any{"Index": 10})
	f.text("GET /v1/job/web", 500, "disk on fire")
	r := run(t, "", "job", "run", good)
	must.Eq(t, 0, r.code)
	must.Eq(t, "Job \"web\" registered\n", r.out)
	must.Eq(t, "Warning: could not read the job's placement: disk on fire\n", r.stderr)
}

func TestJobStop(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/job/web", 200, placedJob())
	f.text("GET /v1/job/we", 404, `job "we" not found`)
	f.json("GET /v1/jobs", 200, []*structs.JobListStub{{ID: "web"}})
	f.json("DELETE /v1/job/web", 200, map[string]any{"Index": 12})

	r := run(t, "", "job", "stop", "web")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Job \"web\" stopped\n", r.out)
	reqs := f.requests()
	must.Eq(t, request{Method: "DELETE", Path: "/v1/job/web", Query: "namespace=default"}, reqs[len(reqs)-1])

	// A prefix is enough, and -purge removes the job.
	r = run(t, "", "job", "stop", "-purge", "we")
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
