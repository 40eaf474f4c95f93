package api

import (
	"encoding/json"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestJobs_Register(t *testing.T) {
	f := newFakeAgent(t)
	// The servers answer Nomad's shape: one string, a warning per line.
	f.json("PUT /v1/jobs", 200, map[string]any{"Warnings": "volume \"vol[2]\" does not exist yet\n", "EvalID": "e1", "Index": 21},
		map[string]string{"X-Nomad-Index": "21"})

	job := &structs.Job{ID: "web", TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 3}}}
	warnings, wm, err := f.client("tok").Jobs().Register(job, &WriteOptions{Namespace: "prod"})
	must.NoError(t, err)
	must.Eq(t, []string{`volume "vol[2]" does not exist yet`}, warnings)
	must.Eq(t, uint64(21), wm.LastIndex)

	req := f.last()
	must.Eq(t, "PUT", req.Method)
	must.Eq(t, "/v1/jobs", req.Path)
	must.Eq(t, "namespace=prod", req.Query)
	must.Eq(t, "tok", req.Token)
	// Exactly {"Job": {...}}: the server refuses any other field.
	var body map[string]*structs.Job
	must.NoError(t, json.Unmarshal([]byte(req.Body), &body))
	must.MapLen(t, 1, body)
	must.Eq(t, job, body["Job"])

	_, _, err = f.client("").Jobs().Register(nil, nil)
	must.ErrorContains(t, err, "no job to register")
}

func TestJobs_Deregister(t *testing.T) {
	f := newFakeAgent(t)
	f.json("DELETE /v1/job/web", 200, map[string]any{"Index": 30}, map[string]string{"X-Nomad-Index": "30"})
	f.text("DELETE /v1/job/nope", 404, `job "nope" not found`)
	c := f.client("")

	wm, err := c.Jobs().Deregister("web", false, nil)
	must.NoError(t, err)
	must.Eq(t, uint64(30), wm.LastIndex)
	must.Eq(t, "", f.last().Query)

	_, err = c.Jobs().Deregister("web", true, nil)
	must.NoError(t, err)
	must.Eq(t, "purge=true", f.last().Query)

	_, err = c.Jobs().Deregister("nope", true, nil)
	must.EqError(t, err, `job "nope" not found`)
	must.True(t, IsNotFound(err))
}

func TestJobs_Reads(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/jobs", 200, []*structs.JobListStub{{ID: "web", Desired: 3, Placed: 2}},
		map[string]string{"X-Nomad-Index": "5", "X-Nomad-KnownLeader": "true"})
	f.json("GET /v1/job/web", 200, &structs.Job{ID: "web",
		Placement: map[string]*structs.GroupPlacement{"g": {Desired: 3, Placed: 2, Blocked: []string{"why"}}}}, nil)
	f.json("GET /v1/job/web/allocations", 200, []*structs.Allocation{{ID: "a1", Name: "web.g[0]"}}, nil)
	f.json("GET /v1/job/a%20b", 200, &structs.Job{ID: "a b"}, nil)
	c := f.client("")

	stubs, qm, err := c.Jobs().List(&QueryOptions{Prefix: "w", WaitIndex: 4})
	must.NoError(t, err)
	must.Eq(t, 2, stubs[0].Placed)
	must.Eq(t, uint64(5), qm.LastIndex)
	must.True(t, qm.KnownLeader)
	must.Eq(t, "index=4&prefix=w", f.last().Query)

	job, _, err := c.Jobs().Info("web", &QueryOptions{Namespace: "prod"})
	must.NoError(t, err)
	must.Eq(t, []string{"why"}, job.Placement["g"].Blocked)
	must.Eq(t, "namespace=prod", f.last().Query)

	allocs, _, err := c.Jobs().Allocations("web", nil)
	must.NoError(t, err)
	must.Eq(t, "web.g[0]", allocs[0].Name)
	must.Eq(t, "/v1/job/web/allocations", f.last().Path)

	job, _, err = c.Jobs().Info("a b", nil)
	must.NoError(t, err)
	must.Eq(t, "a b", job.ID)

	_, _, err = c.Jobs().Info("nope", nil)
	must.True(t, IsNotFound(err))
}

func TestAllocations(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/allocations", 200, []*structs.Allocation{{ID: "a1"}, {ID: "a2"}}, map[string]string{"X-Nomad-Index": "8"})
	f.json("GET /v1/allocation/a1", 200, &structs.Allocation{ID: "a1", JobID: "web", ClientStatus: "running"}, nil)
	f.text("GET /v1/allocation/zz", 404, `allocation "zz" not found`)
	c := f.client("")

	allocs, qm, err := c.Allocations().List(&QueryOptions{Prefix: "a"})
	must.NoError(t, err)
	must.Len(t, 2, allocs)
	must.Eq(t, uint64(8), qm.LastIndex)
	must.Eq(t, "prefix=a", f.last().Query)

	alloc, _, err := c.Allocations().Info("a1", nil)
	must.NoError(t, err)
	must.Eq(t, "running", alloc.ClientStatus)

	_, _, err = c.Allocations().Info("zz", nil)
	must.EqError(t, err, `allocation "zz" not found`)
	must.True(t, IsNotFound(err))
}
