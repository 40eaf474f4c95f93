package client

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// releaseCluster starts n servers with short client heartbeats; cb may
// change their config further. Raft's own timings are those of a loaded
// machine: these tests count release steps, and a leader stepping down
// for a late heartbeat would repeat some.
func releaseCluster(t *testing.T, n int, cb func(*server.Config)) []*server.Server {
	t.Helper()
	return server.TestCluster(t, n, func(_ int, c *server.Config) {
		c.HeartbeatTTL, c.NodeGracePeriod, c.HTTPAddr = testTTL, testGrace, ""
		c.RaftConfig.HeartbeatTimeout, c.RaftConfig.ElectionTimeout = 500*time.Millisecond, 500*time.Millisecond
		c.RaftConfig.LeaderLeaseTimeout = 250 * time.Millisecond
		if cb != nil {
			cb(c)
		}
	})
}

// sleepScript runs until its task is stopped, without waking meanwhile.
const sleepScript = "exec sleep 600"

// waitFree waits until none of the volumes holds a claim.
func waitFree(t *testing.T, srv *server.Server, within time.Duration, ids ...string) {
	t.Helper()
	testutil.WaitForResult(t, within, func() (bool, error) {
		for _, id := range ids {
			v, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, id)
			if err != nil {
				return false, err
			}
			if v.InUse() {
				return false, fmt.Errorf("volume %s: read %d write %d past %v", id, len(v.ReadClaims), len(v.WriteClaims), pastStates(v))
			}
		}
		return true, nil
	})
}

func pastStates(v *structs.CSIVolume) map[string]string {
	out := map[string]string{}
	for id, c := range v.PastClaims {
		out[id] = fmt.Sprintf("%s attempts=%d err=%q", c.State, c.Attempts, c.LastError)
	}
	return out
}

// Ordinary job stops, many of them, with real clients and the development
// plugin: a release waits for the client to stop the tasks, so its node
// step never fails ("still has running tasks" was the first attempt of
// every stop), and an operator's detach right after a stop waits too
// instead of failing. Not parallel: the release counters are the
// process's, and no other test may move them meanwhile.
func TestRelease_JobStopsNeverFailTheNodeStep(t *testing.T) {
	servers := releaseCluster(t, 3, nil)
	leader := server.WaitForLeader(t, servers...)
	e := newAllocEnv(t, servers, 2)
	e.startClient(0, nil)
	e.startClient(1, nil)
	e.waitNodesHealthy(leader, 2)

	const volumes, rounds = 10, 10
	var ids []string
	for i := range volumes {
		id := fmt.Sprintf("stop%d", i)
		e.createVolume(leader, id)
		ids = append(ids, id)
	}
	nodeAttempts, nodeFailures := metrics.ReleaseCounts(metrics.StepNode)
	ctrlAttempts, ctrlFailures := metrics.ReleaseCounts(metrics.StepController)

	for r := range rounds {
		var jobs []string
		for i, id := range ids {
			jobID := fmt.Sprintf("stop-r%d-v%d", r, i)
			registerJob(t, leader, writerJob(jobID, 1, id, false, sleepScript))
			jobs = append(jobs, jobID)
		}
		allocs := map[string]*structs.Allocation{}
		for _, jobID := range jobs {
			for _, a := range waitAllocs(t, leader, jobID, 1, clientStatus(structs.AllocClientStatusRunning)) {
				allocs[jobID] = a
			}
		}
		for i, jobID := range jobs {
			must.NoError(t, leader.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: jobID}, &structs.JobDeregisterResponse{}))
			if i == 0 {
				// Right after the stop, an operator detaches the volume:
				// the detach waits for the client, which stops the task
				// at once, and releases the claim, or says it waits.
				var resp structs.CSIVolumeDetachResponse
				err := leader.RPC("CSIVolume.Detach", &structs.CSIVolumeDetachRequest{VolumeID: ids[i], NodeID: allocs[jobID].NodeID}, &resp)
				if err != nil {
					must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err), must.Sprintf("round %d: detach after a stop: %v", r, err))
					must.StrContains(t, structs.MessageOf(err), structs.WaitingForClientNote)
				}
			}
		}
		waitFree(t, leader, 30*time.Second, ids...)
	}

	// Every claim was released by the watcher or by the operator's
	// detach, each step once (again only if leadership moved between a
	// step and its checkpoint), and none failed.
	a, f := metrics.ReleaseCounts(metrics.StepNode)
	must.Eq(t, 0, f-nodeFailures, must.Sprint("no node step failed"))
	must.GreaterEq(t, float64(volumes*rounds), a-nodeAttempts, must.Sprint("a node step per stop"))
	ca, cf := metrics.ReleaseCounts(metrics.StepController)
	must.Eq(t, 0, cf-ctrlFailures)
	must.GreaterEq(t, float64(volumes*rounds), ca-ctrlAttempts)

	// The plugin saw an unpublish per stop, each succeeding.
	for _, id := range ids {
		v, err := leader.State().CSIVolumeByID(nil, structs.DefaultNamespace, id)
		must.NoError(t, err)
		calls := callsFor(t, e.stateDir, "NodeUnpublishVolume", v.ExternalID)
		must.GreaterEq(t, rounds, len(calls))
		for _, c := range calls {
			must.Eq(t, codes.OK, c.Code)
		}
	}
}

// A node unpublish that hangs holds the claim only until the release's
// call deadline, far shorter than the plugin client's two minutes, and is
// retried with backoff; while it hangs, volume status never shows a next
// attempt long past. Once the plugin heals, the claim is freed within the
// backoff cap (plus the deadline of a call that hung at the heal).
func TestRelease_HungNodeUnpublishThenHeal(t *testing.T) {
	t.Parallel()
	const (
		callTimeout = time.Second
		backoffCap  = time.Second
	)
	servers := releaseCluster(t, 1, func(c *server.Config) {
		c.CSICallTimeout = callTimeout
		c.ReleaseBaseDelay, c.ReleaseMaxDelay = 200*time.Millisecond, backoffCap
	})
	srv := servers[0]
	server.WaitForLeader(t, srv)
	e := newAllocEnv(t, servers, 1)
	e.startClient(0, nil)
	e.waitNodesHealthy(srv, 1)
	ext := e.createVolume(srv, "hung")
	registerJob(t, srv, writerJob("hung", 1, "hung", false, sleepScript))
	waitAllocs(t, srv, "hung", 1, clientStatus(structs.AllocClientStatusRunning))

	must.NoError(t, devplugin.SetFault(e.stateDir, "NodeUnpublishVolume", devplugin.Fault{Hang: true}))
	must.NoError(t, srv.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "hung"}, &structs.JobDeregisterResponse{}))

	// Three attempts hang and fail at their deadline; meanwhile the next
	// attempt shown is never in the past by more than a retry period.
	var lastErr string
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		var resp structs.CSIVolumeGetResponse
		if err := srv.RPC("CSIVolume.Get", &structs.CSIVolumeGetRequest{ID: "hung"}, &resp); err != nil {
			return false, err
		}
		for _, c := range resp.Volume.PastClaims {
			if c.NextAttempt != 0 {
				late := time.Since(time.Unix(0, c.NextAttempt))
				must.Less(t, backoffCap+500*time.Millisecond, late, must.Sprintf("next attempt %s in the past", late))
			}
			lastErr = c.LastError
			if c.Attempts >= 3 {
				return true, nil
			}
		}
		return false, fmt.Errorf("past claims %v", pastStates(resp.Volume))
	})
	must.StrContains(t, lastErr, "DeadlineExceeded", must.Sprint("the agent ended the plugin call at the deadline"))
	hung := callsFor(t, e.stateDir, "NodeUnpublishVolume", ext)
	must.SliceNotEmpty(t, hung)
	for i, c := range hung {
		// The plugin sees the deadline, or the client's cancelling the
		// call at it, whichever reaches it first.
		must.SliceContains(t, []codes.Code{codes.DeadlineExceeded, codes.Canceled}, c.Code, must.Sprintf("call %+v", c))
		if i > 0 {
			must.Less(t, callTimeout+backoffCap+time.Second, c.Time.Sub(hung[i-1].Time),
				must.Sprint("each hung call ended at its deadline, and the next came within the backoff"))
		}
	}

	// The plugin heals: the claim is freed within the backoff cap.
	must.NoError(t, devplugin.ClearFaults(e.stateDir))
	healed := time.Now()
	waitFree(t, srv, 30*time.Second, "hung")
	must.Less(t, backoffCap+callTimeout+time.Second, time.Since(healed), must.Sprint("freed within the backoff cap of the heal"))
	calls := callsFor(t, e.stateDir, "NodeUnpublishVolume", ext)
	must.Eq(t, codes.OK, calls[len(calls)-1].Code)
}

// The leader dies while its node unpublish hangs on the client (reached
// through the follower that holds the client's session): the call ends on
// the client at once instead of at its deadline, and the new leader
// retries the step and frees the claim.
func TestRelease_LeaderDiesMidCall(t *testing.T) {
	t.Parallel()
	const callTimeout = 30 * time.Second
	servers := releaseCluster(t, 3, func(c *server.Config) { c.CSICallTimeout = callTimeout })
	leader := server.WaitForLeader(t, servers...)
	var follower *server.Server
	for _, s := range servers {
		if s != leader {
			follower = s
			break
		}
	}
	e := newAllocEnv(t, servers, 1)
	// The client's session is with the follower: the leader's calls are
	// forwarded through it.
	c := testClient(t, addrs(follower), func(cfg *Config) {
		cfg.NodeName = "client-0"
		cfg.DataDir = e.dataDirs[0]
		cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: e.plugins[0].Endpoint()}}
		cfg.TaskKillTimeout = 2 * time.Second
		cfg.TaskPollInterval = 50 * time.Millisecond
	})
	waitRegistered(t, c)
	e.waitNodesHealthy(leader, 1)
	ext := e.createVolume(leader, "mid")
	registerJob(t, leader, writerJob("mid", 1, "mid", false, sleepScript))
	waitAllocs(t, leader, "mid", 1, clientStatus(structs.AllocClientStatusRunning))

	// Only the first unpublish hangs.
	must.NoError(t, devplugin.SetFault(e.stateDir, "NodeUnpublishVolume", devplugin.Fault{Hang: true, Times: 1}))
	must.NoError(t, leader.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "mid"}, &structs.JobDeregisterResponse{}))
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		faults, err := devplugin.Faults(e.stateDir)
		_, set := faults["NodeUnpublishVolume"]
		return err == nil && !set, fmt.Errorf("the unpublish has not started hanging (err %v)", err)
	})

	must.NoError(t, leader.Shutdown())
	killed := time.Now()
	var survivors []*server.Server
	for _, s := range servers {
		if s != leader {
			survivors = append(survivors, s)
		}
	}
	newLeader := server.WaitForLeader(t, survivors...)
	waitFree(t, newLeader, 20*time.Second, "mid")
	must.Less(t, callTimeout/2, time.Since(killed), must.Sprint("the new leader did not wait for the dead one's call deadline"))

	calls := callsFor(t, e.stateDir, "NodeUnpublishVolume", ext)
	codesSeen := make([]codes.Code, 0, len(calls))
	for _, c := range calls {
		codesSeen = append(codesSeen, c.Code)
	}
	must.True(t, slices.Contains(codesSeen, codes.Canceled), must.Sprintf("the hung call was cancelled on the client: %v", codesSeen))
	must.Eq(t, codes.OK, codesSeen[len(codesSeen)-1], must.Sprint("the new leader's retry went through"))
}
