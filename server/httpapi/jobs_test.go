package httpapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// jobBackend extends the fake backend with jobs and allocations: the Job.*
// and Alloc.* methods, under the same lock, index, call record and failure
// table. Every other method goes to the fake backend.
type jobBackend struct {
	*fakeBackend
	jobs   map[string]*structs.Job        // by namespace + "/" + ID
	allocs map[string]*structs.Allocation // by ID
	// plan is what Job.Plan answers, with the planned and existing jobs.
	plan structs.JobPlanResponse
}

func newJobTestHandler(t *testing.T) (*jobBackend, http.Handler) {
	t.Helper()
	be := &jobBackend{fakeBackend: newFakeBackend(), jobs: map[string]*structs.Job{}, allocs: map[string]*structs.Allocation{}}
	return be, NewHandler(Config{Backend: be})
}

func (b *jobBackend) RPC(method string, args, reply any) error {
	if !strings.HasPrefix(method, "Job.") && !strings.HasPrefix(method, "Alloc.") {
		return b.fakeBackend.RPC(method, args, reply)
	}
	f := b.fakeBackend
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method] = args
	if err := f.fail[method]; err != nil {
		return err
	}
	switch method {
	case "Job.Register":
		a, r := args.(*structs.JobRegisterRequest), reply.(*structs.JobRegisterResponse)
		if err := a.Job.Validate(); err != nil {
			return err
		}
		f.index++
		j := a.Job.Copy()
		k := volKey(j.Namespace, j.ID)
		j.CreateIndex, j.ModifyIndex, j.JobModifyIndex = f.index, f.index, f.index
		if old := b.jobs[k]; old != nil {
			j.CreateIndex, j.Version = old.CreateIndex, old.Version+1
		}
		j.Status = structs.JobStatusPending
		b.jobs[k] = j
		r.Warnings = slices.Clone(f.warnings)
		r.Index, r.JobModifyIndex = f.index, j.JobModifyIndex
	case "Job.Deregister":
		a, r := args.(*structs.JobDeregisterRequest), reply.(*structs.JobDeregisterResponse)
		k := volKey(a.RequestNamespace(), a.JobID)
		j := b.jobs[k]
		if j == nil {
			return structs.ErrNotFound("job %q not found", a.JobID)
		}
		f.index++
		if a.Purge {
			delete(b.jobs, k)
		} else {
			j = j.Copy()
			j.Stop, j.Status, j.ModifyIndex = true, structs.JobStatusDead, f.index
			b.jobs[k] = j
			r.JobModifyIndex = j.JobModifyIndex
		}
		r.Index = f.index
	case "Job.GetJob":
		a, r := args.(*structs.JobSpecificRequest), reply.(*structs.SingleJobResponse)
		// Unredacted on purpose: the handler must redact on its own.
		r.Job = b.jobs[volKey(a.RequestNamespace(), a.JobID)].Copy()
		r.QueryMeta = f.readMeta()
	case "Job.List":
		a, r := args.(*structs.JobListRequest), reply.(*structs.JobListResponse)
		for _, k := range slices.Sorted(maps.Keys(b.jobs)) {
			if j := b.jobs[k]; (a.Namespace == "*" || j.Namespace == a.RequestNamespace()) && strings.HasPrefix(j.ID, a.Prefix) {
				r.Jobs = append(r.Jobs, j.Stub())
			}
		}
		r.QueryMeta = f.readMeta()
	case "Job.Allocations":
		a, r := args.(*structs.JobSpecificRequest), reply.(*structs.JobAllocationsResponse)
		for _, id := range slices.Sorted(maps.Keys(b.allocs)) {
			if al := b.allocs[id]; al.JobID == a.JobID && al.Namespace == a.RequestNamespace() {
				r.Allocations = append(r.Allocations, al.Copy())
			}
		}
		r.QueryMeta = f.readMeta()
	case "Job.Plan":
		a, r := args.(*structs.JobPlanRequest), reply.(*structs.JobPlanResponse)
		if err := a.Job.Validate(); err != nil {
			return err
		}
		*r = b.plan
		r.Job = a.Job.Copy()
		r.Existing = b.jobs[volKey(a.Job.Namespace, a.Job.ID)].Copy()
		r.QueryMeta = f.readMeta()
	case "Alloc.GetAlloc":
		a, r := args.(*structs.AllocSpecificRequest), reply.(*structs.SingleAllocResponse)
		r.Alloc = b.allocs[a.AllocID].Copy()
		r.QueryMeta = f.readMeta()
	case "Alloc.List":
		a, r := args.(*structs.AllocListRequest), reply.(*structs.AllocListResponse)
		for _, id := range slices.Sorted(maps.Keys(b.allocs)) {
			if strings.HasPrefix(id, a.Prefix) {
				r.Allocations = append(r.Allocations, b.allocs[id].Copy())
			}
		}
		r.QueryMeta = f.readMeta()
	default:
		return fmt.Errorf("fake backend: unknown method %q", method)
	}
	return nil
}

// seed stores a job with its placement and allocations, as the servers
// would after placing it.
func (b *jobBackend) seed(j *structs.Job, allocs ...*structs.Allocation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index++
	j = j.Copy()
	j.CreateIndex, j.ModifyIndex = b.index, b.index
	b.jobs[volKey(j.Namespace, j.ID)] = j
	for _, a := range allocs {
		b.allocs[a.ID] = a.Copy()
	}
}

// testJob is a valid, canonical job whose volume request has mount flags.
func testJob() *structs.Job {
	return &structs.Job{
		ID: "web", Name: "web", Namespace: "default", Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: 3,
			Volumes: map[string]*structs.VolumeRequest{"data": {
				Name: "data", Type: structs.VolumeTypeCSI, Source: "vol", PerAlloc: true,
				AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
				AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
				MountOptions:   &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{testFlagSecret}},
			}},
			Tasks: []*structs.Task{{
				Name: "t", Driver: structs.TaskDriverExec, Config: structs.TaskConfig{Command: "/bin/true"},
				VolumeMounts: []*structs.VolumeMount{{Volume: "data", Destination: "/data", PropagationMode: "private"}},
			}},
		}},
	}
}

func jobBody(t *testing.T, j *structs.Job) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"Job": j})
	must.NoError(t, err)
	return string(b)
}

func TestJobRegister(t *testing.T) {
	be, h := newJobTestHandler(t)
	be.warnings = []string{`volume "vol[2]" does not exist yet`}
	// A job as GET returned it, with every server-owned field set: they
	// are dropped, so a job read back can be registered again.
	sent := testJob()
	sent.Stop, sent.Status, sent.Version, sent.SubmitTime = true, "dead", 7, 99
	sent.CreateIndex, sent.ModifyIndex, sent.JobModifyIndex = 1, 2, 3
	sent.Placement = map[string]*structs.GroupPlacement{"g": {Desired: 3, Blocked: []string{"x"}}}

	for _, method := range []string{http.MethodPut, http.MethodPost} {
		rec := do(t, h, method, "/v1/jobs?region=r1", jobBody(t, sent), "X-Nomad-Token", "tok")
		var out JobWriteResponse
		mustJSON(t, rec, &out)
		must.Eq(t, rec.Header().Get("X-Nomad-Index"), fmt.Sprint(out.Index))
		// Nomad's shape: one string of warnings, and the evaluation of the
		// job as written, derived from its modify index.
		must.Eq(t, `volume "vol[2]" does not exist yet`, out.Warnings)
		j := be.jobs[volKey("default", sent.ID)]
		must.Eq(t, JobWriteResponse{Warnings: out.Warnings, Index: out.Index, EvalID: jobEvalID(j),
			EvalCreateIndex: j.JobModifyIndex, JobModifyIndex: j.JobModifyIndex}, out)
		must.Positive(t, out.JobModifyIndex)

		args := be.call("Job.Register").(*structs.JobRegisterRequest)
		must.Eq(t, structs.WriteRequest{Region: "r1", Namespace: "default", AuthToken: "tok"}, args.WriteRequest)
		must.Eq(t, testJob(), args.Job)
		must.Eq(t, int64(0), args.Timestamp)
	}
}

func TestJobRegister_CanonicalizesAndNamespaces(t *testing.T) {
	minimal := `{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"exec","Config":{"Command":"x"}}]}]}}`
	cases := []struct {
		name, path, body, wantNS string
	}{
		{"default", "/v1/jobs", minimal, "default"},
		{"query", "/v1/jobs?namespace=q", minimal, "q"},
		{"job wins", "/v1/jobs?namespace=q", strings.Replace(minimal, `"ID":"j"`, `"ID":"j","Namespace":"own"`, 1), "own"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be, h := newJobTestHandler(t)
			rec := do(t, h, http.MethodPut, tc.path, tc.body)
			must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
			args := be.call("Job.Register").(*structs.JobRegisterRequest)
			must.Eq(t, tc.wantNS, args.Namespace)
			must.Eq(t, tc.wantNS, args.Job.Namespace)
			must.Eq(t, structs.JobTypeService, args.Job.Type)
			must.Eq(t, "j", args.Job.Name)
			must.Eq(t, 1, args.Job.TaskGroups[0].Count)
		})
	}
}

func TestJobRegister_ByPath(t *testing.T) {
	be, h := newJobTestHandler(t)
	j := testJob()
	rec := do(t, h, http.MethodPost, "/v1/job/web", jobBody(t, j))
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, "web", be.call("Job.Register").(*structs.JobRegisterRequest).Job.ID)

	j.ID = ""
	rec = do(t, h, http.MethodPut, "/v1/job/from-path", jobBody(t, j))
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	must.Eq(t, "from-path", be.call("Job.Register").(*structs.JobRegisterRequest).Job.ID)

	j.ID = "other"
	mustError(t, do(t, h, http.MethodPut, "/v1/job/web", jobBody(t, j)), http.StatusBadRequest,
		`job ID "other" in the body does not match "web" in the path`)
}

// TestJobRegister_CSIPluginTask: a Nomad task's CSIPluginConfig (Nomad's
// JSON: HealthTimeout in nanoseconds) reaches the job as the task's plugin.
func TestJobRegister_CSIPluginTask(t *testing.T) {
	be, h := newJobTestHandler(t)
	body := `{"Job":{"ID":"p","Type":"system","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Driver":"exec",` +
		`"Config":{"Command":"/bin/true"},"CSIPluginConfig":{"ID":"dev","Type":"node","MountDir":"/csi","HealthTimeout":30000000000}}]}]}}`
	rec := do(t, h, http.MethodPut, "/v1/jobs", body)
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	task := be.call("Job.Register").(*structs.JobRegisterRequest).Job.TaskGroups[0].Tasks[0]
	must.NotNil(t, task.CSIPluginConfig)
	must.Eq(t, "dev", task.CSIPluginConfig.ID)
	must.Eq(t, "node", string(task.CSIPluginConfig.Type))
	must.Eq(t, 30*time.Second, time.Duration(task.CSIPluginConfig.HealthTimeout))
}

// TestJobRegister_UpdateBlock: Nomad's update block, at the job and in a
// group, reaches the job with its MaxParallel (Nomad's default, 1, when
// null); its other fields are accepted and ignored.
func TestJobRegister_UpdateBlock(t *testing.T) {
	be, h := newJobTestHandler(t)
	body := `{"Job":{"ID":"p","Type":"system",` +
		`"Update":{"Stagger":30000000000,"MaxParallel":2,"HealthCheck":"checks","MinHealthyTime":10000000000,` +
		`"HealthyDeadline":300000000000,"ProgressDeadline":600000000000,"Canary":0,"AutoRevert":false,"AutoPromote":false},` +
		`"TaskGroups":[{"Name":"g","Update":{"MaxParallel":null,"Stagger":30000000000},"Tasks":[{"Name":"t","Driver":"exec","Config":{"Command":"/bin/true"}}]},` +
		`{"Name":"h","Tasks":[{"Name":"t","Driver":"exec","Config":{"Command":"/bin/true"}}]}]}}`
	rec := do(t, h, http.MethodPut, "/v1/jobs", body)
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	job := be.call("Job.Register").(*structs.JobRegisterRequest).Job
	must.Eq(t, &structs.UpdateStrategy{MaxParallel: 2}, job.Update)
	must.Eq(t, 1, job.TaskGroups[0].MaxParallel())
	must.Eq(t, 2, job.TaskGroups[1].MaxParallel(), must.Sprint("a group without a block takes the job's"))

	rec = do(t, h, http.MethodPut, "/v1/jobs", strings.Replace(body, `"MaxParallel":2`, `"MaxParallel":-1`, 1))
	mustError(t, rec, http.StatusBadRequest, "update max_parallel must not be negative, not -1")
}

func TestJobRegister_BadBodies(t *testing.T) {
	valid := jobBody(t, testJob())
	rpcBody, err := json.Marshal(&structs.JobRegisterRequest{Job: testJob()})
	must.NoError(t, err)
	cases := map[string]struct {
		body   string
		status int
		want   string
	}{
		"empty":             {"", http.StatusBadRequest, "the body is empty"},
		"no job":            {`{}`, http.StatusBadRequest, `the body has no job: send {"Job":{...}}`},
		"null job":          {`{"Job":null}`, http.StatusBadRequest, "the body has no job"},
		"unknown top field": {`{"Job":{"ID":"j"},"Bogus":true}`, http.StatusBadRequest, `unknown field "Bogus"`},
		"unknown job field": {`{"Job":{"ID":"j","Bogus":["dc1"]}}`, http.StatusBadRequest, `unknown field "Bogus"`},
		"unknown task field": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Bogus":1}]}]}}`,
			http.StatusBadRequest, `unknown field "Bogus"`},
		"docker config": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Config":{"image":"x"}}]}]}}`,
			http.StatusBadRequest, `unknown field "image"`},
		// Nomad's fields that would change where or how the job runs.
		"datacenters": {`{"Job":{"ID":"j","Datacenters":["dc1"]}}`, http.StatusBadRequest,
			`job "j": Datacenters ["dc1"] is not supported by volplane`},
		"job constraints": {`{"Job":{"ID":"j","Constraints":[{"LTarget":"${attr.kernel.name}","RTarget":"linux","Operand":"="}]}}`,
			http.StatusBadRequest, `job "j": Constraints is not supported by volplane`},
		"periodic": {`{"Job":{"ID":"j","Periodic":{"Spec":"* * * * *"}}}`, http.StatusBadRequest, `job "j": Periodic is not supported`},
		"group networks": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Networks":[{"Mode":"bridge"}]}]}}`,
			http.StatusBadRequest, `job "j" group "g": Networks is not supported by volplane`},
		"sticky volume": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Volumes":{"v":{"Type":"csi","Source":"s","Sticky":true}}}]}}`,
			http.StatusBadRequest, `job "j" group "g" volume "v": Sticky is not supported`},
		"task env": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Env":{"A":"b"}}]}]}}`,
			http.StatusBadRequest, `job "j" group "g" task "t": Env is not supported by volplane`},
		"task templates": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t","Templates":[{"EmbeddedTmpl":"x"}]}]}]}}`,
			http.StatusBadRequest, `job "j" group "g" task "t": Templates is not supported`},
		"enforce index": {`{"Job":` + valid[len(`{"Job":`):len(valid)-1] + `,"EnforceIndex":true,"JobModifyIndex":7}`,
			http.StatusConflict, `Enforcing job modify index 7: job exists with conflicting job modify index: 0`},
		"unknown nested field": {`{"Job":{"ID":"j","TaskGroups":[{"Name":"g","Sticky":true}]}}`, http.StatusBadRequest, `unknown field "Sticky"`},
		"wrong type": {`{"Job":{"ID":"j","TaskGroups":[{"Count":"3"}]}}`, http.StatusBadRequest,
			`field "Job.TaskGroups.Count": expected a JSON number, got a JSON string`},
		"wrong type in a job field": {`{"Job":{"ID":"j","Type":3}}`, http.StatusBadRequest,
			`field "Job.Type": expected a JSON string, got a JSON number`},
		"wrong type in a mount": {`{"Job":{"ID":"j","TaskGroups":[{"Tasks":[{"VolumeMounts":[{"ReadOnly":"yes"}]}]}]}}`, http.StatusBadRequest,
			`field "Job.TaskGroups.Tasks.VolumeMounts.ReadOnly": expected a JSON boolean, got a JSON string`},
		"rpc request fields": {string(rpcBody), http.StatusBadRequest, `unknown field "Timestamp"`},
		"trailing garbage":   {valid + "x", http.StatusBadRequest, "invalid character 'x'"},
		"refused by the server": {strings.Replace(valid, `"PerAlloc":true`, `"PerAlloc":false`, 1), http.StatusBadRequest,
			`job "web" validation failed: group "g" volume "data": volume with single-node-writer access mode allows only one reader or writer`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, h := newJobTestHandler(t)
			mustError(t, do(t, h, http.MethodPut, "/v1/jobs", tc.body), tc.status, tc.want)
		})
	}
}

func TestJobGet(t *testing.T) {
	be, h := newJobTestHandler(t)
	j := testJob()
	j.Placement = map[string]*structs.GroupPlacement{"g": {Desired: 3, Placed: 2, Blocked: []string{`volume "vol[2]" not found`}}}
	be.seed(j)

	rec := do(t, h, http.MethodGet, "/v1/job/web?index=1&wait=5s&stale", "")
	var got structs.Job
	mustJSON(t, rec, &got)
	must.Eq(t, "web", got.ID)
	must.Eq(t, j.Placement, got.Placement)
	must.Eq(t, fmt.Sprint(be.index), rec.Header().Get("X-Nomad-Index"))
	must.Eq(t, "true", rec.Header().Get("X-Nomad-KnownLeader"))
	must.Eq(t, "1500", rec.Header().Get("X-Nomad-LastContact"))
	// Mount flags may carry credentials: redacted, whatever the server sent.
	must.Eq(t, &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{structs.RedactedValue}},
		got.TaskGroups[0].Volumes["data"].MountOptions)
	must.StrNotContains(t, rec.Body.String(), testFlagSecret)
	// The backend's own copy is untouched.
	must.Eq(t, []string{testFlagSecret}, be.jobs[volKey("default", "web")].TaskGroups[0].Volumes["data"].MountOptions.MountFlags)

	args := be.call("Job.GetJob").(*structs.JobSpecificRequest)
	must.Eq(t, uint64(1), args.MinQueryIndex)
	must.Eq(t, 5*time.Second, args.MaxQueryTime)
	must.True(t, args.AllowStale)

	rec = do(t, h, http.MethodGet, "/v1/job/nope", "")
	mustError(t, rec, http.StatusNotFound, `job "nope" not found`)
	// A miss still says which index to block on until the job appears.
	must.Eq(t, fmt.Sprint(be.index), rec.Header().Get("X-Nomad-Index"))
	mustError(t, do(t, h, http.MethodGet, "/v1/job/web?namespace=other", ""), http.StatusNotFound, `job "web" not found`)
}

func TestJobList(t *testing.T) {
	be, h := newJobTestHandler(t)
	rec := do(t, h, http.MethodGet, "/v1/jobs", "")
	must.Eq(t, "[]\n", rec.Body.String())

	web := testJob()
	web.Placement = map[string]*structs.GroupPlacement{"g": {Desired: 3, Placed: 2}}
	other := testJob()
	other.ID = "worker"
	be.seed(web)
	be.seed(other)

	var stubs []*structs.JobListStub
	mustJSON(t, do(t, h, http.MethodGet, "/v1/jobs", ""), &stubs)
	must.Len(t, 2, stubs)
	must.Eq(t, 3, stubs[0].Desired)
	must.Eq(t, 2, stubs[0].Placed)

	stubs = nil
	mustJSON(t, do(t, h, http.MethodGet, "/v1/jobs?prefix=wo", ""), &stubs)
	must.Len(t, 1, stubs)
	must.Eq(t, "worker", stubs[0].ID)
	must.Eq(t, "wo", be.call("Job.List").(*structs.JobListRequest).Prefix)
}

func TestJobDeregister(t *testing.T) {
	be, h := newJobTestHandler(t)
	be.seed(testJob())

	rec := do(t, h, http.MethodDelete, "/v1/job/web", "", "X-Nomad-Token", "tok")
	var out JobWriteResponse
	mustJSON(t, rec, &out)
	must.Eq(t, fmt.Sprint(out.Index), rec.Header().Get("X-Nomad-Index"))
	// Nomad's answer: the evaluation of the stop, derived from the job.
	must.Eq(t, jobEvalID(be.jobs[volKey("default", "web")]), out.EvalID)
	args := be.call("Job.Deregister").(*structs.JobDeregisterRequest)
	must.Eq(t, structs.JobDeregisterRequest{JobID: "web", WriteRequest: structs.WriteRequest{AuthToken: "tok"}}, *args)
	must.True(t, be.jobs[volKey("default", "web")].Stop)

	mustError(t, do(t, h, http.MethodDelete, "/v1/job/web?purge=maybe", ""), http.StatusBadRequest, "invalid purge")
	must.Eq(t, http.StatusOK, do(t, h, http.MethodDelete, "/v1/job/web?purge=true", "").Code)
	must.True(t, be.call("Job.Deregister").(*structs.JobDeregisterRequest).Purge)
	must.MapEmpty(t, be.jobs)
	mustError(t, do(t, h, http.MethodDelete, "/v1/job/web", ""), http.StatusNotFound, `job "web" not found`)
}

func TestJobAllocationsAndAllocs(t *testing.T) {
	be, h := newJobTestHandler(t)
	var stubs []*structs.Allocation
	rec := do(t, h, http.MethodGet, "/v1/job/web/allocations", "")
	must.Eq(t, "[]\n", rec.Body.String())
	must.Eq(t, "[]\n", do(t, h, http.MethodGet, "/v1/allocations", "").Body.String())

	a0 := &structs.Allocation{ID: "a0-1111", Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g", NodeID: "n1",
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning}
	a1 := &structs.Allocation{ID: "a1-2222", Namespace: "default", Name: "web.g[1]", JobID: "web", TaskGroup: "g", NodeID: "n2",
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending}
	b0 := &structs.Allocation{ID: "b0-3333", Namespace: "default", Name: "db.g[0]", JobID: "db", TaskGroup: "g"}
	be.seed(testJob(), a0, a1, b0)

	mustJSON(t, do(t, h, http.MethodGet, "/v1/job/web/allocations", ""), &stubs)
	must.Eq(t, []*structs.Allocation{a0, a1}, stubs)

	stubs = nil
	mustJSON(t, do(t, h, http.MethodGet, "/v1/allocations", ""), &stubs)
	must.Len(t, 3, stubs)
	stubs = nil
	mustJSON(t, do(t, h, http.MethodGet, "/v1/allocations?prefix=a1", ""), &stubs)
	must.Eq(t, []*structs.Allocation{a1}, stubs)

	var got structs.Allocation
	rec = do(t, h, http.MethodGet, "/v1/allocation/a0-1111", "")
	mustJSON(t, rec, &got)
	must.Eq(t, *a0, got)
	must.Eq(t, fmt.Sprint(be.index), rec.Header().Get("X-Nomad-Index"))
	mustError(t, do(t, h, http.MethodGet, "/v1/allocation/zz", ""), http.StatusNotFound, `allocation "zz" not found`)
}
