package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/gctune"
	"github.com/volplane/volplane/structs"
)

// blockedJob is testJob placed two of three, the third waiting for its
// volume, with allocations a1 (running) and a2 (pending).
func blockedJob(be *jobBackend) (*structs.Job, []*structs.Allocation) {
	j := testJob()
	j.JobModifyIndex = 1
	j.Placement = map[string]*structs.GroupPlacement{"g": {Desired: 3, Placed: 2,
		Blocked: []string{`volume "vol[2]" does not exist`}, UpdatedAt: 77}}
	allocs := []*structs.Allocation{
		{ID: "a1", Namespace: "default", Name: "web.g[0]", JobID: "web", TaskGroup: "g", NodeID: "n1",
			DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning, CreateIndex: 2,
			TaskStates: map[string]*structs.TaskState{"t": {State: structs.TaskStateRunning, StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()}}},
		{ID: "a2", Namespace: "default", Name: "web.g[1]", JobID: "web", TaskGroup: "g", NodeID: "n1",
			DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending, CreateIndex: 2},
	}
	be.seed(j, allocs...)
	return be.jobs[volKey("default", "web")], allocs
}

func TestJobSummaryEvaluationsAndDeployments(t *testing.T) {
	be, h := newJobTestHandler(t)
	job, _ := blockedJob(be)

	var sum JobSummary
	mustJSON(t, do(t, h, http.MethodGet, "/v1/job/web/summary", ""), &sum)
	must.Eq(t, map[string]TaskGroupSummary{"g": {Queued: 1, Running: 1, Starting: 1}}, sum.Summary)
	must.Eq(t, "web", sum.JobID)
	must.NotNil(t, sum.Children)

	var evals []*Evaluation
	mustJSON(t, do(t, h, http.MethodGet, "/v1/job/web/evaluations", ""), &evals)
	must.Len(t, 2, evals)
	blocked, ev := evals[0], evals[1]
	must.Eq(t, jobEvalID(job), ev.ID)
	must.Eq(t, evalStatusComplete, ev.Status)
	must.Eq(t, blocked.ID, ev.BlockedEval)
	must.Eq(t, map[string]int{`volume "vol[2]" does not exist`: 1}, ev.FailedTGAllocs["g"].ConstraintFiltered)
	must.Eq(t, evalStatusBlocked, blocked.Status)
	must.Eq(t, ev.ID, blocked.PreviousEval)

	var one Evaluation
	mustJSON(t, do(t, h, http.MethodGet, "/v1/evaluation/"+ev.ID, ""), &one)
	must.Eq(t, *ev, one)
	var stubs []*AllocListStub
	mustJSON(t, do(t, h, http.MethodGet, "/v1/evaluation/"+ev.ID+"/allocations", ""), &stubs)
	must.Len(t, 2, stubs)
	must.Eq(t, ev.ID, stubs[0].EvalID)
	must.Eq(t, "2026-01-02T03:04:05Z", stubs[0].TaskStates["t"].StartedAt.Format(time.RFC3339))
	var list []*Evaluation
	mustJSON(t, do(t, h, http.MethodGet, "/v1/evaluations?status=blocked", ""), &list)
	must.Eq(t, []*Evaluation{blocked}, list)

	mustError(t, do(t, h, http.MethodGet, "/v1/evaluation/nope", ""), http.StatusNotFound, `evaluation "nope" not found`)
	mustError(t, do(t, h, http.MethodGet, "/v1/job/nope/summary", ""), http.StatusNotFound, `job "nope" not found`)
	mustError(t, do(t, h, http.MethodGet, "/v1/job/web/summary?index=x", ""), http.StatusBadRequest, `invalid index "x"`)

	rec := do(t, h, http.MethodGet, "/v1/job/web/deployment", "")
	must.Eq(t, "null\n", rec.Body.String())
	must.Eq(t, "[]\n", do(t, h, http.MethodGet, "/v1/job/web/deployments", "").Body.String())

	// Before the placer has looked at a new version, its evaluation is
	// pending.
	fresh := testJob()
	fresh.ID, fresh.JobModifyIndex = "fresh", 9
	be.seed(fresh)
	mustJSON(t, do(t, h, http.MethodGet, "/v1/job/fresh/evaluations", ""), &evals)
	must.Len(t, 1, evals)
	must.Eq(t, evalStatusPending, evals[0].Status)
}

func TestJobGetAndList_NomadFields(t *testing.T) {
	be, h := newJobTestHandler(t)
	blockedJob(be)
	var j map[string]any
	mustJSON(t, do(t, h, http.MethodGet, "/v1/job/web", ""), &j)
	must.Eq[any](t, float64(50), j["Priority"])
	must.Eq[any](t, "global", j["Region"])
	must.Eq[any](t, []any{"*"}, j["Datacenters"])
	must.MapContainsKey(t, j, "Placement")
	must.StrNotContains(t, do(t, h, http.MethodGet, "/v1/job/web", "").Body.String(), testFlagSecret)

	var stubs []*JobListStubView
	mustJSON(t, do(t, h, http.MethodGet, "/v1/jobs", ""), &stubs)
	must.Len(t, 1, stubs)
	must.NotNil(t, stubs[0].JobSummary)
	must.Eq(t, 1, stubs[0].JobSummary.Summary["g"].Running)
}

func TestAllocGet_NomadShape(t *testing.T) {
	be, h := newJobTestHandler(t)
	job, _ := blockedJob(be)
	var a AllocView
	mustJSON(t, do(t, h, http.MethodGet, "/v1/allocation/a1", ""), &a)
	must.Eq(t, "web", a.Job.ID)
	must.Eq(t, jobEvalID(job), a.EvalID)
	must.Eq(t, "running", a.TaskStates["t"].State)
	must.NotNil(t, a.TaskStates["t"].Events)
	must.True(t, a.TaskStates["t"].FinishedAt.IsZero())

	// volplane's own struct reads the same answer back.
	var own structs.Allocation
	mustJSON(t, do(t, h, http.MethodGet, "/v1/allocation/a1", ""), &own)
	must.Eq(t, be.allocs["a1"].TaskStates, own.TaskStates)

	// Its job purged, the allocation still carries one, with its group.
	be.mu.Lock()
	delete(be.jobs, volKey("default", "web"))
	be.mu.Unlock()
	mustJSON(t, do(t, h, http.MethodGet, "/v1/allocation/a1", ""), &a)
	must.Eq(t, "g", a.Job.TaskGroups[0].Name)
	must.Eq(t, "t", a.Job.TaskGroups[0].Tasks[0].Name)
}

func TestVolumeGet_NomadAllocs(t *testing.T) {
	be, h := newJobTestHandler(t)
	blockedJob(be)
	vol := &structs.CSIVolume{ID: "vol1", Namespace: "default", PluginID: "p"}
	be.mu.Lock()
	be.volumes[volKey("default", vol.ID)] = vol
	v := vol
	v.WriteClaims = map[string]*structs.CSIVolumeClaim{"a1": {AllocationID: "a1", NodeID: "n1", Mode: structs.CSIVolumeClaimWrite}}
	v.ReadClaims = map[string]*structs.CSIVolumeClaim{"gone": {AllocationID: "gone", NodeID: "n1", Mode: structs.CSIVolumeClaimRead}}
	be.mu.Unlock()

	rec := do(t, h, http.MethodGet, "/v1/volume/csi/"+vol.ID, "")
	var got VolumeView
	mustJSON(t, rec, &got)
	must.MapContainsKey(t, got.WriteAllocs, "a1")
	must.Eq(t, "web", got.WriteAllocs["a1"].JobID)
	// An allocation gone (or not readable) stays a key, with null.
	must.MapContainsKey(t, got.ReadAllocs, "gone")
	must.Nil(t, got.ReadAllocs["gone"])
	must.Len(t, 1, got.Allocations)
	must.Eq(t, "a1", got.Allocations[0].ID)
	must.MapContainsKey(t, got.WriteClaims, "a1")
	must.StrContains(t, rec.Body.String(), `"ReadAllocs":{"gone":null}`)
}

func TestJobPlan(t *testing.T) {
	be, h := newJobTestHandler(t)
	be.plan = structs.JobPlanResponse{
		Groups:    map[string]*structs.GroupPlanUpdates{"g": {Place: 3}},
		Placement: map[string]*structs.GroupPlacement{"g": {Desired: 3, Placed: 2, Blocked: []string{"no node fits"}}},
	}
	body := `{"Job":` + strings.TrimSuffix(strings.TrimPrefix(jobBody(t, testJob()), `{"Job":`), "}") + `,"Diff":true,"PolicyOverride":true}`
	var out JobPlanResponse
	rec := do(t, h, http.MethodPut, "/v1/job/web/plan", body)
	mustJSON(t, rec, &out)
	must.Eq(t, &DesiredUpdates{Place: 3}, out.Annotations.DesiredTGUpdates["g"])
	must.Eq(t, diffAdded, out.Diff.Type)
	must.Eq(t, diffAdded, out.Diff.TaskGroups[0].Type)
	must.Eq(t, uint64(3), out.Diff.TaskGroups[0].Updates["create"])
	must.Eq(t, map[string]int{"no node fits": 1}, out.FailedTGAllocs["g"].ConstraintFiltered)
	must.Eq(t, "web", be.call("Job.Plan").(*structs.JobPlanRequest).Job.ID)
	// A plan writes nothing.
	must.Nil(t, be.call("Job.Register"))

	for name, tc := range map[string]struct {
		path, body string
		status     int
		want       string
	}{
		"other job": {"/v1/job/other/plan", body, http.StatusBadRequest, `job ID "web" in the body does not match "other"`},
		"spreads": {"/v1/job/j/plan", `{"Job":{"ID":"j","Spreads":[{"Attribute":"${node.datacenter}"}]}}`, http.StatusBadRequest,
			`job "j": Spreads is not supported`},
		"unknown": {"/v1/job/j/plan", `{"Job":{"ID":"j"},"Bogus":1}`, http.StatusBadRequest, `unknown field "Bogus"`},
		"invalid": {"/v1/job/j/plan", `{"Job":{"ID":"j"}}`, http.StatusBadRequest, `job "j" validation failed`},
	} {
		t.Run(name, func(t *testing.T) {
			mustError(t, do(t, h, http.MethodPut, tc.path, tc.body), tc.status, tc.want)
		})
	}
}

func TestJobValidate(t *testing.T) {
	_, h := newJobTestHandler(t)
	var out JobValidateResponse
	mustJSON(t, do(t, h, http.MethodPut, "/v1/validate/job", jobBody(t, testJob())), &out)
	must.Eq(t, JobValidateResponse{DriverConfigValidated: true, ValidationErrors: []string{}}, out)

	mustJSON(t, do(t, h, http.MethodPost, "/v1/validate/job", `{"Job":{"ID":"j"}}`), &out)
	must.StrContains(t, out.Error, "job has no task groups")
	must.Len(t, 1, out.ValidationErrors)

	mustError(t, do(t, h, http.MethodPut, "/v1/validate/job", `{"Job":{"ID":"j","Periodic":{"Spec":"@daily"}}}`),
		http.StatusBadRequest, `job "j": Periodic is not supported`)
	mustError(t, do(t, h, http.MethodPut, "/v1/validate/job", `{"Job":{"ID":3}}`),
		http.StatusBadRequest, `field "Job.ID": expected a JSON string, got a JSON number`)
}

func TestAgentRoutes(t *testing.T) {
	info := AgentInfo{Name: "s1", Region: "west", Datacenter: "dc1", NodeID: "id1", RPCAddr: "10.0.0.1:4647",
		KnownLeader: true, RaftStats: map[string]string{"state": "Leader", "applied_index": "12", "num_peers": "5"},
		Servers: []*structs.RaftServer{
			{ID: "id1", Node: "s1", Address: "10.0.0.1:4647", Leader: true, Voter: true, RaftProtocol: "3"},
			{ID: "id2", Node: "s2", Address: "10.0.0.2:4647", Voter: true, RaftProtocol: "3"},
		}}
	var denied []string
	h := NewHandler(Config{Backend: newFakeBackend(), Agent: func() AgentInfo { return info },
		Authorize: func(endpoint, token, ns string) error {
			if token == "bad" {
				denied = append(denied, endpoint)
				return structs.ErrPermissionDenied
			}
			return nil
		}})

	var members structs.ServerMembers
	mustJSON(t, do(t, h, http.MethodGet, "/v1/agent/members", ""), &members)
	must.Eq(t, "west", members.ServerRegion)
	must.Len(t, 2, members.Members)
	m := members.Members[0]
	must.Eq(t, "s1.west", m.Name)
	must.Eq(t, "10.0.0.1", m.Addr)
	must.Eq(t, "4647", m.Tags["port"])
	must.Eq(t, "true", m.Tags["leader"])
	must.Eq(t, "dc1", m.Tags["dc"])

	var self structs.AgentSelf
	mustJSON(t, do(t, h, http.MethodGet, "/v1/agent/self", ""), &self)
	must.Eq(t, "s1.west", self.Member.Name)
	must.Eq(t, "true", self.Stats["nomad"]["leader"])
	must.Eq(t, map[string]string{"state": "Leader", "applied_index": "12", "num_peers": "1", "known_leader": "true"},
		self.Stats["raft"]) // the peers as the configuration counts them
	// The collector's GOGC as the runtime has it (a server agent's tuner may
	// have raised it; nothing in this test process does).
	must.Eq(t, strconv.Itoa(gctune.GCPercent()), self.Stats["runtime"]["gc_percent"])
	must.NotEq(t, "0", self.Stats["runtime"]["gc_percent"])

	rec := do(t, h, http.MethodGet, "/v1/regions", "")
	must.Eq(t, `["west"]`+"\n", rec.Body.String())
	must.Eq(t, "0", rec.Header().Get("X-Nomad-Index"))

	var sched struct{ SchedulerConfig SchedulerConfiguration }
	mustJSON(t, do(t, h, http.MethodGet, "/v1/operator/scheduler/configuration", ""), &sched)
	must.Eq(t, "spread", sched.SchedulerConfig.SchedulerAlgorithm)
	must.Eq(t, http.StatusOK, do(t, h, http.MethodGet, "/v1/agent/health", "").Code)

	for _, p := range []string{"/v1/agent/self", "/v1/agent/members", "/v1/operator/scheduler/configuration"} {
		mustError(t, do(t, h, http.MethodGet, p, "", "X-Nomad-Token", "bad"), http.StatusForbidden, "Permission denied")
	}
	must.Eq(t, []string{"Agent.Self", "Agent.Members", "Operator.SchedulerGetConfiguration"}, denied)

	info.KnownLeader = false
	mustError(t, do(t, h, http.MethodGet, "/v1/agent/health", ""), http.StatusServiceUnavailable, "no known leader")

	// Without the agent's information, the agent routes are not served.
	bare := NewHandler(Config{Backend: newFakeBackend()})
	mustError(t, do(t, bare, http.MethodGet, "/v1/agent/self", ""), http.StatusNotFound, "not available")
	must.Eq(t, `["global"]`+"\n", do(t, bare, http.MethodGet, "/v1/regions", "").Body.String())
}
