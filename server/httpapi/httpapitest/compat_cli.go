package httpapitest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
	"github.com/shoenig/test/wait"
)

// CLIHooks are what the CLI suite needs done as a client agent does it.
type CLIHooks struct {
	// Claim claims the volume for the allocation (a write claim, the
	// allocation's node as the claimant), as the node's client does
	// before it starts the tasks.
	Claim func(t *testing.T, allocID, volumeID string)
	// Run reports the allocation running, with its task "t" running since
	// startedAt, as the node's client does.
	Run func(t *testing.T, allocID string, startedAt time.Time)
}

// Names the CLI suite uses.
const (
	cliVolumeID = "nomad-cli-vol"
	cliJobID    = "nomad-cli-job"
)

// RunNomadCLICompat drives what the nomad CLI calls (volume status, job
// run, status, plan, validate, inspect and stop, alloc status, server
// members, agent-info, operator scheduler get-config, the event stream
// and metrics) with Nomad's official Go client against the HTTP API at
// addr, through a job that claims a volume. seed is as RunNomadClientCompat's;
// hooks act as the node's client.
func RunNomadCLICompat(t *testing.T, addr string, seed func(t *testing.T, fx *Fixture), hooks CLIHooks) {
	t.Helper()
	fx := NewFixture()
	seed(t, fx)
	cfg := nomad.DefaultConfig()
	cfg.Address = addr
	cfg.SecretID = fx.Token
	client, err := nomad.NewClient(cfg)
	must.NoError(t, err)
	c := &cliCompat{compat: compat{t: t, addr: addr, fx: fx, client: client}, hooks: hooks}

	// The stream is opened first and read at the end: it sees every event
	// of the run, in Nomad's framing.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	all, err := client.EventStream().Stream(ctx, map[nomad.Topic][]string{"*": {"*"}}, 1, nil)
	must.NoError(t, err)
	volOnly, err := client.EventStream().Stream(ctx, map[nomad.Topic][]string{"CSIVolume": {"*"}, "CSIClaim": {cliVolumeID}}, 0, nil)
	must.NoError(t, err)

	t.Run("host volumes", c.hostVolumes)
	t.Run("agent", c.agent)
	t.Run("job run", c.jobRun)
	t.Run("volume status of a claimed volume", c.claimedVolume)
	t.Run("alloc status", c.allocStatus)
	t.Run("job plan and validate", c.planAndValidate)
	t.Run("metrics", c.metrics)
	t.Run("event stream", func(t *testing.T) { c.events(t, all, volOnly) })
	t.Run("job stop", c.jobStop)
}

type cliCompat struct {
	compat
	hooks   CLIHooks
	evalID  string
	allocID string
}

// cliJob builds the job as Nomad's jobspec parser does, defaults filled in
// by Canonicalize.
func cliJob(id, volumeID string, args ...string) *nomad.Job {
	job := nomad.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"*"}
	tg := nomad.NewTaskGroup("g", 1)
	tg.Volumes = map[string]*nomad.VolumeRequest{"data": {
		Name: "data", Type: "csi", Source: volumeID,
		AccessMode: "single-node-writer", AttachmentMode: "file-system",
	}}
	task := nomad.NewTask("t", "exec").SetConfig("command", "/bin/sleep").SetConfig("args", append([]string{"600"}, args...))
	dest, vol := "/data", "data"
	task.VolumeMounts = []*nomad.VolumeMount{{Volume: &vol, Destination: &dest}}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	job.Canonicalize()
	return job
}

func (c *cliCompat) hostVolumes(t *testing.T) {
	vols, qm, err := c.client.HostVolumes().List(nil, &nomad.QueryOptions{Namespace: "*"})
	must.NoError(t, err)
	must.Len(t, 0, vols)
	must.NotNil(t, qm)
}

func (c *cliCompat) agent(t *testing.T) {
	self, err := c.client.Agent().Self()
	must.NoError(t, err)
	must.Eq(t, "true", self.Stats["nomad"]["server"])
	must.Eq(t, "global", self.Member.Tags["region"])
	must.MapContainsKey(t, self.Stats, "runtime")

	members, err := c.client.Agent().Members()
	must.NoError(t, err)
	must.Len(t, len(c.fx.Peers), members.Members)
	must.Eq(t, "global", members.ServerRegion)
	var addrs []string
	leaders := 0
	for _, m := range members.Members {
		must.Eq(t, "alive", m.Status)
		must.Eq(t, "global", m.Tags["region"])
		addrs = append(addrs, m.Addr+":"+m.Tags["port"])
		if m.Tags["leader"] == "true" {
			leaders++
		}
	}
	must.SliceContainsAll(t, c.fx.Peers, addrs)
	must.Eq(t, 1, leaders)
	// server members asks each region's leader, as here.
	leader, err := c.client.Status().RegionLeader("global")
	must.NoError(t, err)
	must.SliceContains(t, addrs, leader)

	regions, err := c.client.Regions().List()
	must.NoError(t, err)
	must.Eq(t, []string{"global"}, regions)

	sched, _, err := c.client.Operator().SchedulerGetConfiguration(nil)
	must.NoError(t, err)
	must.NotNil(t, sched.SchedulerConfig)
	must.Eq(t, nomad.SchedulerAlgorithmSpread, sched.SchedulerConfig.SchedulerAlgorithm)
	must.False(t, sched.SchedulerConfig.PreemptionConfig.ServiceSchedulerEnabled)
}

func (c *cliCompat) jobRun(t *testing.T) {
	client := c.client
	vol := &nomad.CSIVolume{ID: cliVolumeID, Name: cliVolumeID, ExternalID: "ext-" + cliVolumeID, PluginID: c.fx.PluginID,
		RequestedCapabilities: []*nomad.CSIVolumeCapability{{
			AccessMode: nomad.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: nomad.CSIVolumeAttachmentModeFilesystem,
		}}}
	_, err := client.CSIVolumes().Register(vol, nil)
	must.NoError(t, err)

	job := cliJob(cliJobID, cliVolumeID)
	// As job run sends it: with the job's source.
	resp, wm, err := client.Jobs().RegisterOpts(job, &nomad.RegisterOptions{Submission: &nomad.JobSubmission{
		Source: `job "` + cliJobID + `" { group "g" { } }`, Format: "hcl2", VariableFlags: map[string]string{"x": "1"},
	}}, nil)
	must.NoError(t, err)
	must.Positive(t, wm.LastIndex)
	must.NotEq(t, "", resp.EvalID)
	must.Positive(t, resp.JobModifyIndex)
	c.evalID = resp.EvalID

	// job run -check-index: a stale index is refused as Nomad's CLI
	// recognises; the current one goes through, and the same job again
	// changes nothing, so its evaluation is the same.
	_, _, err = client.Jobs().EnforceRegister(job, resp.JobModifyIndex-1, nil)
	must.ErrorContains(t, err, nomad.RegisterEnforceIndexErrPrefix)
	again, _, err := client.Jobs().EnforceRegister(job, resp.JobModifyIndex, nil)
	must.NoError(t, err)
	must.Eq(t, resp.EvalID, again.EvalID)

	// The CLI's monitor: the evaluation completes, then its allocations.
	var ev *nomad.Evaluation
	must.Wait(t, wait.InitialSuccess(wait.ErrorFunc(func() error {
		ev, _, err = client.Evaluations().Info(resp.EvalID, nil)
		if err != nil {
			return err
		}
		if ev.Status != nomad.EvalStatusComplete {
			return fmt.Errorf("evaluation %s is %s", ev.ID, ev.Status)
		}
		return nil
	}), wait.Timeout(15*time.Second), wait.Gap(50*time.Millisecond)))
	must.Eq(t, cliJobID, ev.JobID)
	must.Eq(t, "job-register", ev.TriggeredBy)
	must.MapEmpty(t, ev.FailedTGAllocs)
	must.Eq(t, "", ev.BlockedEval)
	allocs, _, err := client.Evaluations().Allocations(resp.EvalID, nil)
	must.NoError(t, err)
	must.Len(t, 1, allocs)
	must.Eq(t, "g", allocs[0].TaskGroup)
	must.Eq(t, cliJobID+".g[0]", allocs[0].Name)
	c.allocID = allocs[0].ID

	// job status and job inspect.
	got, _, err := client.Jobs().Info(cliJobID, nil)
	must.NoError(t, err)
	must.Eq(t, 50, *got.Priority)
	must.Eq(t, []string{"*"}, got.Datacenters)
	must.Eq(t, "global", *got.Region)
	must.Eq(t, "service", *got.Type)
	must.Positive(t, *got.SubmitTime)
	must.Eq(t, 1, *got.TaskGroups[0].Count)
	must.Eq(t, "/bin/sleep", got.TaskGroups[0].Tasks[0].Config["Command"])

	sum, _, err := client.Jobs().Summary(cliJobID, nil)
	must.NoError(t, err)
	must.MapContainsKey(t, sum.Summary, "g")
	g := sum.Summary["g"]
	must.Eq(t, 1, g.Starting+g.Running)
	must.NotNil(t, sum.Children)

	evals, _, err := client.Jobs().Evaluations(cliJobID, nil)
	must.NoError(t, err)
	must.SliceContainsFunc(t, evals, resp.EvalID, func(e *nomad.Evaluation, id string) bool { return e.ID == id })
	dep, _, err := client.Jobs().LatestDeployment(cliJobID, nil)
	must.NoError(t, err)
	must.Nil(t, dep)
	deps, _, err := client.Jobs().Deployments(cliJobID, false, nil)
	must.NoError(t, err)
	must.Len(t, 0, deps)

	stubs, _, err := client.Jobs().List(nil)
	must.NoError(t, err)
	i := slices.IndexFunc(stubs, func(s *nomad.JobListStub) bool { return s.ID == cliJobID })
	must.NonNegative(t, i)
	must.NotNil(t, stubs[i].JobSummary)
	must.Eq(t, cliJobID, stubs[i].JobSummary.JobID)

	list, _, err := client.Evaluations().List(&nomad.QueryOptions{Prefix: resp.EvalID[:8]})
	must.NoError(t, err)
	must.SliceContainsFunc(t, list, resp.EvalID, func(e *nomad.Evaluation, id string) bool { return e.ID == id })
}

func (c *cliCompat) claimedVolume(t *testing.T) {
	must.NotEq(t, "", c.allocID)
	c.hooks.Claim(t, c.allocID, cliVolumeID)
	vol, _, err := c.client.CSIVolumes().Info(cliVolumeID, nil)
	must.NoError(t, err)
	must.MapContainsKey(t, vol.WriteAllocs, c.allocID)
	must.MapEmpty(t, vol.ReadAllocs)
	must.Len(t, 1, vol.Allocations)
	must.Eq(t, c.allocID, vol.Allocations[0].ID)
	must.Eq(t, cliJobID, vol.Allocations[0].JobID)

	plug, _, err := c.client.CSIPlugins().Info(c.fx.PluginID, nil)
	must.NoError(t, err)
	must.NotNil(t, plug.Allocations)
	must.NotNil(t, plug.Controllers[c.fx.Node.ID].ControllerInfo)
	must.NotNil(t, plug.Nodes[c.fx.Node.ID].NodeInfo)
}

func (c *cliCompat) allocStatus(t *testing.T) {
	started := time.Now().UTC().Truncate(time.Second)
	c.hooks.Run(t, c.allocID, started)
	a, _, err := c.client.Allocations().Info(c.allocID, nil)
	must.NoError(t, err)
	must.Eq(t, "running", a.ClientStatus)
	must.NotNil(t, a.Job)
	must.Eq(t, cliJobID, *a.Job.ID)
	must.NotNil(t, a.Job.LookupTaskGroup("g"))
	must.Eq(t, c.evalID, a.EvalID)
	ts := a.TaskStates["t"]
	must.NotNil(t, ts)
	must.Eq(t, "running", ts.State)
	must.True(t, ts.StartedAt.Equal(started), must.Sprintf("started at %v, want %v", ts.StartedAt, started))
	must.True(t, ts.FinishedAt.IsZero())
	must.NotNil(t, ts.Events)

	stubs, _, err := c.client.Jobs().Allocations(cliJobID, false, nil)
	must.NoError(t, err)
	must.Len(t, 1, stubs)
	must.Eq(t, "running", stubs[0].TaskStates["t"].State)

	sum, _, err := c.client.Jobs().Summary(cliJobID, nil)
	must.NoError(t, err)
	must.Eq(t, 1, sum.Summary["g"].Running)
}

func (c *cliCompat) planAndValidate(t *testing.T) {
	jobs := c.client.Jobs()

	// The registered job as it is: nothing to do.
	same, _, err := jobs.Plan(cliJob(cliJobID, cliVolumeID), true, nil)
	must.NoError(t, err)
	must.Eq(t, "None", same.Diff.Type)
	must.Eq(t, uint64(1), same.Annotations.DesiredTGUpdates["g"].Ignore)
	must.Positive(t, same.JobModifyIndex)

	// A new task argument replaces the allocation.
	edited, _, err := jobs.Plan(cliJob(cliJobID, cliVolumeID, "more"), true, nil)
	must.NoError(t, err)
	must.Eq(t, "Edited", edited.Diff.Type)
	must.Len(t, 1, edited.Diff.TaskGroups)
	must.Eq(t, "Edited", edited.Diff.TaskGroups[0].Tasks[0].Type)
	must.Eq(t, uint64(1), edited.Annotations.DesiredTGUpdates["g"].Stop)

	// A new job on a volume that does not exist: nothing placed, and why.
	fresh, _, err := jobs.Plan(cliJob("nomad-cli-plan", "nomad-cli-missing"), true, nil)
	must.NoError(t, err)
	must.Eq(t, "Added", fresh.Diff.Type)
	must.MapContainsKey(t, fresh.FailedTGAllocs, "g")
	must.MapNotEmpty(t, fresh.FailedTGAllocs["g"].ConstraintFiltered)
	// A plan writes nothing.
	_, _, err = jobs.Info("nomad-cli-plan", nil)
	mustStatus(t, http.StatusNotFound, err)

	ok, _, err := jobs.Validate(cliJob("nomad-cli-valid", cliVolumeID), nil)
	must.NoError(t, err)
	must.Len(t, 0, ok.ValidationErrors)
	must.Eq(t, "", ok.Error)
	bad := cliJob("nomad-cli-invalid", cliVolumeID)
	bad.TaskGroups[0].Tasks[0].VolumeMounts[0].Volume = ptr("nope")
	invalid, _, err := jobs.Validate(bad, nil)
	must.NoError(t, err)
	must.NotEq(t, "", invalid.Error)
	must.StrContains(t, invalid.Error, "nope")

	// What volplane cannot honour is refused with the field's name.
	constrained := cliJob("nomad-cli-constrained", cliVolumeID)
	constrained.Constrain(nomad.NewConstraint("${attr.kernel.name}", "=", "linux"))
	_, _, err = jobs.Register(constrained, nil)
	mustStatus(t, http.StatusBadRequest, err)
	must.StrContains(t, err.Error(), "Constraints is not supported")
}

func (c *cliCompat) metrics(t *testing.T) {
	sum, _, err := c.client.Operator().MetricsSummary(nil)
	must.NoError(t, err)
	must.NotEq(t, "", sum.Timestamp)
	must.SliceContainsFunc(t, sum.Gauges, "volplane_volumewatcher_queue_depth", func(g nomad.GaugeValue, name string) bool {
		return g.Name == name
	})
	text, err := c.client.Operator().Metrics(&nomad.QueryOptions{Params: map[string]string{"format": "prometheus"}})
	must.NoError(t, err)
	must.StrContains(t, string(text), "# TYPE volplane_volumewatcher_queue_depth gauge")
}

// events reads the streams opened at the start until each has shown what
// the run did.
func (c *cliCompat) events(t *testing.T, all, volOnly <-chan *nomad.Events) {
	seen := func(ch <-chan *nomad.Events, want map[string]bool, only func(nomad.Event) error) {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for len(want) > 0 {
			select {
			case frame, ok := <-ch:
				must.True(t, ok, must.Sprint("the stream ended"))
				must.NoError(t, frame.Err)
				for _, ev := range frame.Events {
					must.Eq(t, frame.Index, ev.Index)
					if only != nil {
						must.NoError(t, only(ev))
					}
					delete(want, string(ev.Topic)+" "+ev.Type+" "+ev.Key)
				}
			case <-timeout:
				t.Fatalf("events not seen: %v", want)
			}
		}
	}
	seen(all, map[string]bool{
		"CSIPlugin PluginUpdated " + c.fx.PluginID:  true,
		"CSIVolume VolumeRegistered " + cliVolumeID: true,
		"CSIClaim ClaimTaken " + cliVolumeID:        true,
	}, nil)
	seen(volOnly, map[string]bool{
		"CSIVolume VolumeRegistered " + cliVolumeID: true,
		"CSIClaim ClaimTaken " + cliVolumeID:        true,
	}, func(ev nomad.Event) error {
		if ev.Topic != "CSIVolume" && ev.Topic != "CSIClaim" {
			return fmt.Errorf("event of topic %s on a CSIVolume/CSIClaim stream", ev.Topic)
		}
		if ev.Topic == "CSIClaim" && ev.Key != cliVolumeID {
			return fmt.Errorf("claim event of volume %s on a stream of %s", ev.Key, cliVolumeID)
		}
		b, err := json.Marshal(ev.Payload)
		if err == nil && strings.Contains(string(b), compatVolSecret) {
			return fmt.Errorf("event payload leaks a secret")
		}
		return err
	})
}

func (c *cliCompat) jobStop(t *testing.T) {
	evalID, _, err := c.client.Jobs().Deregister(cliJobID, false, nil)
	must.NoError(t, err)
	must.NotEq(t, "", evalID)
	must.NotEq(t, c.evalID, evalID)
	ev, _, err := c.client.Evaluations().Info(evalID, nil)
	must.NoError(t, err)
	must.Eq(t, "job-deregister", ev.TriggeredBy)
	must.Eq(t, nomad.EvalStatusComplete, ev.Status)
	got, _, err := c.client.Jobs().Info(cliJobID, nil)
	must.NoError(t, err)
	must.True(t, *got.Stop)

	// A purge leaves no job, so no evaluation to read: the CLI then
	// reports success without monitoring.
	evalID, _, err = c.client.Jobs().Deregister(cliJobID, true, nil)
	must.NoError(t, err)
	must.Eq(t, "", evalID)
	_, _, err = c.client.Jobs().Info(cliJobID, nil)
	mustStatus(t, http.StatusNotFound, err)
}

func ptr[T any](v T) *T { return &v }
