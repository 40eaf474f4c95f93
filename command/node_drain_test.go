package command

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const drainNodeID = "node0001-aaaa-bbbb-cccc-000000000001"

// drainAgent is a fake agent that knows testNode and answers drain and
// eligibility updates.
func drainAgent(t *testing.T) *fakeAgent {
	f := newFakeAgent(t)
	f.text("GET /v1/node/node0001", 404, `node "node0001" not found`)
	f.text("GET /v1/node/worker-1", 404, `node "worker-1" not found`)
	f.json("GET /v1/nodes", 200, []*structs.NodeListStub{testNode().Stub()})
	f.json("GET /v1/node/"+drainNodeID, 200, testNode())
	f.json("PUT /v1/node/"+drainNodeID+"/drain", 200, &structs.NodeDrainUpdateResponse{NodeModifyIndex: 11, EvalIDs: []string{}, Index: 11})
	f.json("PUT /v1/node/"+drainNodeID+"/eligibility", 200, &structs.NodeEligibilityUpdateResponse{NodeModifyIndex: 12, EvalIDs: []string{}, Index: 12})
	return f
}

// sent decodes the body of the last request to path.
func sent(t *testing.T, f *fakeAgent, path string) map[string]any {
	t.Helper()
	var body map[string]any
	found := false
	for _, r := range f.requests() {
		if r.Path == path && r.Method == "PUT" {
			must.NoError(t, json.Unmarshal([]byte(r.Body), &body))
			found = true
		}
	}
	must.True(t, found, must.Sprintf("no PUT %s", path))
	return body
}

func putCount(f *fakeAgent) int {
	n := 0
	for _, r := range f.requests() {
		if r.Method == "PUT" {
			n++
		}
	}
	return n
}

func TestNodeDrain_FlagErrors(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"neither":                {[]string{drainNodeID}, "Either the '-enable' or '-disable' flag must be set"},
		"both":                   {[]string{"-enable", "-disable", drainNodeID}, "Either the '-enable' or '-disable' flag must be set"},
		"disable with deadline":  {[]string{"-disable", "-deadline", "1m", drainNodeID}, "-disable can't be combined with flags configuring drain strategy"},
		"disable with force":     {[]string{"-disable", "-force", drainNodeID}, "-disable can't be combined"},
		"deadline and force":     {[]string{"-enable", "-deadline", "1m", "-force", drainNodeID}, "-deadline can't be combined with -force or -no-deadline"},
		"force and no deadline":  {[]string{"-enable", "-force", "-no-deadline", drainNodeID}, "-force and -no-deadline are mutually exclusive"},
		"bad deadline":           {[]string{"-enable", "-deadline", "soon", drainNodeID}, `Failed to parse deadline "soon"`},
		"negative deadline":      {[]string{"-enable", "-deadline", "-1m", drainNodeID}, "A positive drain duration must be given"},
		"no node":                {[]string{"-enable"}, "This command takes one argument: <node>"},
		"eligibility no flag":    {[]string{"eligibility", drainNodeID}, "Either the '-enable' or '-disable' flag must be set"},
		"eligibility both flags": {[]string{"eligibility", "-enable", "-disable", drainNodeID}, "Either the '-enable' or '-disable' flag must be set"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := drainAgent(t)
			args := append([]string{"node", "drain"}, tc.args...)
			if tc.args[0] == "eligibility" {
				args = append([]string{"node"}, tc.args...)
			}
			r := run(t, "", args...)
			must.Eq(t, 1, r.code)
			must.StrContains(t, r.stderr, tc.want)
			must.Eq(t, 0, len(f.requests()), must.Sprint("nothing is sent after a usage error"))
		})
	}
}

func TestNodeDrain_Enable(t *testing.T) {
	cases := map[string]struct {
		args     []string
		deadline float64
		ignore   bool
	}{
		"default deadline": {nil, float64(time.Hour), false},
		"deadline":         {[]string{"-deadline", "30m", "-ignore-system"}, float64(30 * time.Minute), true},
		"force":            {[]string{"-force"}, float64(-time.Second), false},
		"no deadline":      {[]string{"-no-deadline"}, 0, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := drainAgent(t)
			args := append(append([]string{"node", "drain", "-enable", "-detach", "-m", "kernel upgrade"}, tc.args...), drainNodeID)
			r := run(t, "", args...)
			must.Eq(t, 0, r.code, must.Sprint(r.stderr))
			must.Eq(t, `Node "`+drainNodeID+`" drain strategy set`+"\n", r.out)
			body := sent(t, f, "/v1/node/"+drainNodeID+"/drain")
			must.Eq[any](t, map[string]any{"Deadline": tc.deadline, "IgnoreSystemJobs": tc.ignore}, body["DrainSpec"])
			must.Eq[any](t, true, body["MarkEligible"])
			must.Eq[any](t, map[string]any{"message": "kernel upgrade"}, body["Meta"])
		})
	}
}

func TestNodeDrain_Disable(t *testing.T) {
	f := drainAgent(t)
	r := run(t, "", "node", "drain", "-disable", drainNodeID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `Node "`+drainNodeID+`" drain strategy unset`+"\n", r.out)
	body := sent(t, f, "/v1/node/"+drainNodeID+"/drain")
	must.Nil(t, body["DrainSpec"])
	must.Eq[any](t, true, body["MarkEligible"])

	f = drainAgent(t)
	r = run(t, "", "node", "drain", "-disable", "-keep-ineligible", drainNodeID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq[any](t, false, sent(t, f, "/v1/node/"+drainNodeID+"/drain")["MarkEligible"])
}

// A node named by a prefix or its name is drained only once confirmed,
// unless -yes.
func TestNodeDrain_Confirm(t *testing.T) {
	f := drainAgent(t)
	r := run(t, "n\n", "node", "drain", "-enable", "-detach", "node0001")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Canceling drain toggle")
	must.Eq(t, 0, putCount(f))

	f = drainAgent(t)
	r = run(t, "y\n", "node", "drain", "-enable", "-detach", "worker-1")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `Are you sure you want to enable drain mode for node "`+drainNodeID+`"? [y/N]`)
	must.Eq(t, 1, putCount(f))

	f = drainAgent(t)
	r = run(t, "", "node", "drain", "-enable", "-detach", "-yes", "node0001")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, 1, putCount(f))
}

// Without -detach the command follows the drain until it is done.
func TestNodeDrain_Monitor(t *testing.T) {
	f := drainAgent(t)
	done := testNode()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	done.SchedulingEligibility = structs.NodeSchedulingIneligible
	done.LastDrain = &structs.DrainMetadata{StartedAt: at, UpdatedAt: at, Status: structs.DrainStatusComplete}
	f.json("GET /v1/node/"+drainNodeID, 200, done)
	f.json("GET /v1/allocations", 200, []*structs.Allocation{})
	f.json("GET /v1/volumes", 200, []*structs.CSIVolListStub{})
	r := run(t, "", "node", "drain", "-enable", "-no-color", drainNodeID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `Node "`+drainNodeID+`" drain strategy set; Ctrl-C to stop monitoring: will not cancel the node drain`)
	must.StrContains(t, r.out, `Drain complete for node "`+drainNodeID+`"`)
}

func TestNodeEligibility(t *testing.T) {
	for _, tc := range []struct {
		flag, want, out string
	}{
		{"-enable", structs.NodeSchedulingEligible, "eligible for scheduling"},
		{"-disable", structs.NodeSchedulingIneligible, "ineligible for scheduling"},
	} {
		f := drainAgent(t)
		r := run(t, "", "node", "eligibility", tc.flag, "worker-1")
		must.Eq(t, 0, r.code, must.Sprint(r.stderr))
		must.Eq(t, `Node "`+drainNodeID+`" scheduling eligibility set: `+tc.out+"\n", r.out)
		must.Eq[any](t, tc.want, sent(t, f, "/v1/node/"+drainNodeID+"/eligibility")["Eligibility"])
	}
	f := drainAgent(t)
	f.text("PUT /v1/node/"+drainNodeID+"/eligibility", 409, `node "x": can not set node's scheduling eligibility to eligible while it is draining`)
	r := run(t, "", "node", "eligibility", "-enable", drainNodeID)
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Error updating scheduling eligibility: node \"x\": can not set node's scheduling eligibility to eligible while it is draining")
}

// node status of a draining node shows what is left on it.
func TestNodeStatus_DrainProgress(t *testing.T) {
	f := drainAgent(t)
	n := testNode()
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	n.SchedulingEligibility = structs.NodeSchedulingIneligible
	n.DrainStrategy = &structs.DrainStrategy{DrainSpec: structs.DrainSpec{Deadline: time.Hour}, StartedAt: at, ForceDeadline: at.Add(time.Hour)}
	n.LastDrain = &structs.DrainMetadata{StartedAt: at, UpdatedAt: at, Status: structs.DrainStatusDraining, Meta: map[string]string{"message": "kernel"}}
	f.json("GET /v1/node/"+drainNodeID, 200, n)
	f.json("GET /v1/allocations", 200, []*structs.Allocation{
		{ID: "alloc001-0000", JobID: "web", Name: "web.g[0]", NodeID: drainNodeID, Namespace: "default",
			DesiredStatus: structs.AllocDesiredStatusStop, ClientStatus: structs.AllocClientStatusComplete},
		{ID: "alloc002-0000", JobID: "plugin", Name: "plugin.g[0]", NodeID: drainNodeID, Namespace: "default",
			DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning},
		{ID: "alloc003-0000", JobID: "web", Name: "web.g[1]", NodeID: drainNodeID, Namespace: "default",
			DesiredStatus: structs.AllocDesiredStatusStop, ClientStatus: structs.AllocClientStatusComplete},
		{ID: "alloc004-0000", JobID: "web", Name: "web.g[0]", NodeID: "elsewhere", Namespace: "default",
			DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusRunning},
	})
	f.json("GET /v1/volumes", 200, []*structs.CSIVolListStub{{ID: "vol", Namespace: "default"}})
	f.json("GET /v1/volume/csi/vol", 200, &structs.CSIVolume{ID: "vol", Namespace: "default",
		PastClaims: map[string]*structs.CSIVolumeClaim{"alloc001-0000": {AllocationID: "alloc001-0000", NodeID: drainNodeID,
			State: structs.CSIVolumeClaimStateNodeDetached}},
		WriteClaims: map[string]*structs.CSIVolumeClaim{"alloc004-0000": {AllocationID: "alloc004-0000", NodeID: "elsewhere"}},
	})
	r := run(t, "", "node", "status", drainNodeID)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "Drain              = true (started "+timeOf(at)+", deadline "+timeOf(at.Add(time.Hour))+")")
	must.StrContains(t, r.out, "Eligibility        = ineligible")
	must.StrContains(t, r.out, `Last Drain         = draining (started `+timeOf(at)+`, updated `+timeOf(at)+`): "kernel"`)
	must.StrContains(t, r.out, `Drain Progress
2 allocations and 1 volume claims left on the node
Alloc ID  Job ID  Name         Desired  Status    Claims on the Node
alloc002  plugin  plugin.g[0]  run      running   none
alloc001  web     web.g[0]     stop     complete  vol (node-detached)`)
}
