package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestE2E_Release shows the servers releasing volume claims, on 3 servers
// and 2 client agents, each client with its own development plugin process
// (the two sharing one storage system), around the per_alloc job of
// examples/job-per-alloc.hcl:
//
//   - a job stop releases every claim, node unpublish, node unstage, then
//     controller unpublish, each node call by the plugin instance on the
//     allocation's node, and leaves every volume claimable;
//   - a second job claims and publishes the same volumes;
//   - when that job is stopped and run again while node unpublish fails,
//     its new allocations wait in "claiming", alloc status naming the
//     allocation whose claim they wait for, and run once it is freed;
//   - when a client is killed, its claims are released once its node is
//     down, through the controller only: the node step is skipped (the
//     past claim says so) and the killed node's plugin instance is never
//     called; the job's replacements then claim the volumes on the other
//     node.
func TestE2E_Release(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3, ServerConfig: clientServerConfig})
	e, s := newClientEnv(t, c)
	r := &releaseEnv{clientEnv: e, s: s, exts: e.createVolumes(t, s, releaseVolumes)}

	start := time.Now()
	for _, step := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"claimed", r.testClaimed},
		{"stop releases", r.testStopReleases},
		{"second job", r.testSecondJob},
		{"waits for a held claim", r.testWaitsForHeldClaim},
		{"client killed", r.testClientKilled},
		{"secrets", r.checkSecrets},
	} {
		stepStart := time.Now()
		if !t.Run(step.name, step.run) {
			t.FailNow()
		}
		t.Logf("step %q took %s", step.name, time.Since(stepStart).Round(time.Millisecond))
	}
	t.Logf("the steps took %s", time.Since(start).Round(time.Millisecond))
}

// releaseVolumes is how many volumes the per_alloc jobs claim, one per
// allocation.
const releaseVolumes = 3

// secondJob is the job that claims the volumes after "web" released them.
const secondJob = "web2"

// releaseEnv is what the steps of TestE2E_Release share.
type releaseEnv struct {
	*clientEnv
	// s is the server the test talks to, a follower at the start.
	s Server
	// exts are the volumes' external IDs, by volume ID.
	exts map[string]string
	// holders are the allocations that hold the volumes now, by volume ID.
	holders map[string]*structs.Allocation
}

// testClaimed runs the per_alloc job of the examples: each allocation
// claims its volume, which is published on its node.
func (r *releaseEnv) testClaimed(t *testing.T) {
	res := r.cli(t, r.s, "job run", "-detach", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	r.holders = r.waitHolders(t, "web")
}

// waitHolders waits until the job's three live allocations run, each
// holding the write claim on its volume, published, and returns them by
// volume ID. Terminal allocations, such as those lost with their node, are
// not counted.
func (r *releaseEnv) waitHolders(t *testing.T, jobID string) map[string]*structs.Allocation {
	t.Helper()
	var allocs map[string]*structs.Allocation
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		var err error
		if allocs, err = r.liveAllocs(jobID); err != nil {
			return false, err
		}
		var errs []string
		for i := range releaseVolumes {
			name := structs.AllocName(jobID, "app", i)
			switch a := allocs[name]; {
			case a == nil:
				errs = append(errs, name+" is not placed")
			case a.ClientStatus != structs.AllocClientStatusRunning:
				errs = append(errs, fmt.Sprintf("%s is %s (%s)", name, a.ClientStatus, a.ClientDescription))
			}
		}
		if len(errs) > 0 || len(allocs) != releaseVolumes {
			return false, fmt.Errorf("%d live allocations: %s", len(allocs), strings.Join(errs, "; "))
		}
		return true, nil
	})
	out := map[string]*structs.Allocation{}
	for i := range releaseVolumes {
		a := allocs[structs.AllocName(jobID, "app", i)]
		must.NotNil(t, a)
		id := volID(i)
		vol := r.volume(t, r.s, id)
		claim := vol.WriteClaims[a.ID]
		must.NotNil(t, claim, must.Sprintf("%s holds the write claim on %s: %+v", a.Name, id, vol.WriteClaims))
		must.MapLen(t, 1, vol.WriteClaims, must.Sprintf("writers of %s", id))
		must.MapEmpty(t, vol.PastClaims, must.Sprintf("past claims of %s", id))
		must.Eq(t, a.NodeID, claim.NodeID)
		must.Eq(t, r.storageOf(t, a.NodeID), claim.ExternalNodeID)
		must.Eq(t, structs.CSIVolumeAccessModeSingleNodeWriter, vol.AccessMode)
		st := a.VolumeStates["data"]
		must.NotNil(t, st)
		must.Eq(t, structs.AllocVolumeStepPublished, st.Step)
		out[id] = a
	}
	return out
}

// testStopReleases stops the job: every claim is released, node unpublish,
// node unstage, then controller unpublish, and every volume is claimable
// again.
func (r *releaseEnv) testStopReleases(t *testing.T) {
	mark := r.callMark(t)
	// -detach: the test waits for the release itself, with its own bound.
	res := r.cli(t, r.s, "job stop", "-detach", "web")
	must.Zero(t, res.Code, must.Sprint(res))
	r.waitFree(t)
	calls := r.callsSince(t, mark)
	for id, a := range r.holders {
		at := r.storageOf(t, a.NodeID)
		must.Eq(t, []string{
			nodeCall("NodeUnpublishVolume", at, codes.OK),
			nodeCall("NodeUnstageVolume", at, codes.OK),
			controllerCall("ControllerUnpublishVolume", at, codes.OK),
		}, callLines(calls, r.exts[id]), must.Sprintf("the release of %s (allocation %s on %s)", id, a.Name, at))
	}
}

// waitFree waits until no volume has a claim of any kind, and checks that
// each is claimable again: its current modes are reset, and the list shows
// no claim either.
func (r *releaseEnv) waitFree(t *testing.T) {
	t.Helper()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for i := range releaseVolumes {
			if err := noClaims(r.volume(t, r.s, volID(i))); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	for i := range releaseVolumes {
		vol := r.volume(t, r.s, volID(i))
		must.Eq(t, structs.CSIVolumeAccessModeUnknown, vol.AccessMode, must.Sprintf("access mode of free %s", vol.ID))
		must.Eq(t, structs.CSIVolumeAttachmentModeUnknown, vol.AttachmentMode, must.Sprintf("attachment mode of free %s", vol.ID))
	}
	res := r.cli(t, r.s, "volume status")
	must.Zero(t, res.Code, must.Sprint(res))
	for _, row := range tableRows(res.Stdout) {
		// ID Name Plugin Schedulable [Access Mode] Readers Writers Past
		must.Eq(t, []string{"0", "0", "0"}, row[len(row)-3:], must.Sprintf("claim counts of %s:\n%s", row[0], res.Stdout))
	}
}

// noClaims says which claims vol still has, nil when none.
func noClaims(vol *structs.CSIVolume) error {
	if len(vol.ReadClaims)+len(vol.WriteClaims)+len(vol.PastClaims) > 0 {
		return fmt.Errorf("%s still has claims: %d read, %d write, %d past", vol.ID,
			len(vol.ReadClaims), len(vol.WriteClaims), len(vol.PastClaims))
	}
	return nil
}

// testSecondJob runs another job with the same per_alloc source: it claims
// and publishes the freed volumes again, and its tasks write to them.
func (r *releaseEnv) testSecondJob(t *testing.T) {
	mark := r.callMark(t)
	res := r.cli(t, r.s, "job run", "-detach", r.writeJob(t, secondJob))
	must.Zero(t, res.Code, must.Sprint(res))
	r.holders = r.waitHolders(t, secondJob)
	calls := r.callsSince(t, mark)
	for id, a := range r.holders {
		at := r.storageOf(t, a.NodeID)
		must.Eq(t, []string{
			controllerCall("ControllerPublishVolume", at, codes.OK),
			nodeCall("NodeStageVolume", at, codes.OK),
			nodeCall("NodePublishVolume", at, codes.OK),
		}, callLines(calls, r.exts[id]), must.Sprintf("the claim of %s (allocation %s on %s)", id, a.Name, at))
		r.waitOwner(t, id, a)
	}
}

// writeJob writes a copy of the per_alloc job of the examples under
// another ID, whose task writes its allocation ID into its volume, so that
// the test can tell which allocation published it last.
func (r *releaseEnv) writeJob(t *testing.T, jobID string) string {
	t.Helper()
	return writeFile(t, r.specDir, jobID+".hcl", fmt.Sprintf(`job %q {
  type = "service"

  group "app" {
    count = %d

    volume "data" {
      type            = "csi"
      source          = "vol"
      per_alloc       = true
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }

    task "writer" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo $VOLPLANE_ALLOC_ID > $VOLPLANE_VOLUME_DATA/owner && sleep 3600"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
`, jobID, releaseVolumes))
}

// waitOwner waits until the allocation's task wrote its ID into the
// volume, as the storage system holds it.
func (r *releaseEnv) waitOwner(t *testing.T, id string, a *structs.Allocation) {
	t.Helper()
	owner := filepath.Join(devplugin.VolumeDataDir(r.stateDir, r.exts[id]), "owner")
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		b, err := os.ReadFile(owner)
		return err == nil && string(b) == a.ID+"\n", fmt.Errorf("%s: %q, %v; want %s", owner, b, err, a.ID)
	})
}

// testWaitsForHeldClaim stops the second job while node unpublish fails,
// so its claims stay held, and runs it again: its new allocations wait for
// the held claims, alloc status naming the allocation holding each, and
// run once the failure passes and the claims are freed.
func (r *releaseEnv) testWaitsForHeldClaim(t *testing.T) {
	must.NoError(t, devplugin.SetFault(r.stateDir, "NodeUnpublishVolume", devplugin.Fault{
		Code: codes.Unavailable, Message: "e2e: the storage node is busy",
	}))
	old := r.holders
	mark := r.callMark(t)
	// -detach: the releases fail until the fault is lifted, and job stop
	// would follow them until they are free.
	res := r.cli(t, r.s, "job stop", "-detach", secondJob)
	must.Zero(t, res.Code, must.Sprint(res))
	// Each release reached the plugin (the task had stopped) and failed:
	// the claim is held, and the failure is shown.
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for id, a := range old {
			past := r.volume(t, r.s, id).PastClaims[a.ID]
			if past == nil || past.Attempts == 0 || !strings.Contains(past.LastError, "NodeUnpublishVolume") {
				return false, fmt.Errorf("the release of %s has not failed in the plugin yet: %+v", id, past)
			}
		}
		return true, nil
	})
	for id, a := range old {
		vol := r.volume(t, r.s, id)
		must.NotNil(t, vol.WriteClaims[a.ID], must.Sprintf("the claim of %s on %s is held until freed", a.ID, id))
		past := vol.PastClaims[a.ID]
		must.Eq(t, structs.CSIVolumeClaimStateUnpublishing, past.State)
		must.StrContains(t, past.LastError, "Unavailable")
		must.NotEq(t, 0, past.NextAttempt)
		res := r.cli(t, r.s, "volume status", id)
		must.Zero(t, res.Code, must.Sprint(res))
		must.StrContains(t, res.Stdout, "NodeUnpublishVolume", must.Sprint(res))
	}

	res = r.cli(t, r.s, "job run", "-detach", r.writeJob(t, secondJob))
	must.Zero(t, res.Code, must.Sprint(res))
	waiting := map[string]*structs.Allocation{}
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		live, err := r.liveAllocs(secondJob)
		if err != nil {
			return false, err
		}
		for i := range releaseVolumes {
			id, name := volID(i), structs.AllocName(secondJob, "app", i)
			a := live[name]
			if a == nil || a.ID == old[id].ID {
				return false, fmt.Errorf("%s is not placed again yet", name)
			}
			st := a.VolumeStates["data"]
			if st == nil || st.Step != structs.AllocVolumeStepClaiming || !strings.Contains(st.Waiting, old[id].ID) {
				return false, fmt.Errorf("%s is not waiting for the claim of %s: %+v", name, old[id].ID, st)
			}
			waiting[id] = a
		}
		return true, nil
	})
	for id, a := range waiting {
		res := r.cli(t, r.s, "alloc status", a.ID)
		must.Zero(t, res.Code, must.Sprint(res))
		_, waits, found := strings.Cut(res.Stdout, "\n\nWaiting\n")
		must.True(t, found, must.Sprint(res))
		line := strings.SplitN(waits, "\n", 2)[0]
		must.StrHasPrefix(t, "data ("+id+", claiming): ", line, must.Sprint(res))
		must.StrContains(t, line, old[id].ID, must.Sprintf("the Waiting line names the holder:\n%s", res.Stdout))
		must.StrContains(t, line, "failed attempts", must.Sprint(res))
		t.Logf("alloc status %s: %s", a.Name, line)
	}

	must.NoError(t, devplugin.ClearFaults(r.stateDir))
	cleared := time.Now()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for id, a := range old {
			vol := r.volume(t, r.s, id)
			if vol.WriteClaims[a.ID] != nil || vol.PastClaims[a.ID] != nil {
				return false, fmt.Errorf("the claim of %s on %s is not freed yet", a.ID, id)
			}
		}
		return true, nil
	})
	freed := time.Now()
	r.holders = r.waitHolders(t, secondJob)
	t.Logf("claims freed %s after the fault was cleared; the waiting allocations ran %s later",
		freed.Sub(cleared).Round(time.Millisecond), time.Since(freed).Round(time.Millisecond))

	calls := r.callsSince(t, mark)
	for id, a := range r.holders {
		must.Eq(t, waiting[id].ID, a.ID, must.Sprintf("the allocation that waited holds %s", id))
		was, at := r.storageOf(t, old[id].NodeID), r.storageOf(t, a.NodeID)
		got := callLines(calls, r.exts[id])
		failed := nodeCall("NodeUnpublishVolume", was, codes.Unavailable)
		n := 0
		for n < len(got) && got[n] == failed {
			n++
		}
		must.Positive(t, n, must.Sprintf("%s: the release failed first:\n%s", id, strings.Join(got, "\n")))
		must.Eq(t, []string{
			nodeCall("NodeUnpublishVolume", was, codes.OK),
			nodeCall("NodeUnstageVolume", was, codes.OK),
			controllerCall("ControllerUnpublishVolume", was, codes.OK),
			controllerCall("ControllerPublishVolume", at, codes.OK),
			nodeCall("NodeStageVolume", at, codes.OK),
			nodeCall("NodePublishVolume", at, codes.OK),
		}, got[n:], must.Sprintf("%s: released from %s before it was published again to %s", id, old[id].Name, a.Name))
		for _, c := range volumeCalls(calls, r.exts[id]) {
			must.Eq(t, c.Code != codes.OK, c.Injected, must.Sprintf("%s: only the injected fault failed: %+v", id, c))
		}
		r.waitOwner(t, id, a)
	}
}

// testClientKilled kills the client that holds the most volumes: once its
// node is down, its claims are released through the controller only. The
// controller unpublish fails at first, so the past claims, noting the
// skipped node step, can be seen; the job's replacements then claim the
// volumes on the other node.
func (r *releaseEnv) testClientKilled(t *testing.T) {
	byNode := map[string][]string{}
	for id, a := range r.holders {
		byNode[a.NodeID] = append(byNode[a.NodeID], id)
	}
	victim, survivor := r.clients[0], r.clients[1]
	if len(byNode[r.nodeIDs["c2"]]) > len(byNode[r.nodeIDs["c1"]]) {
		victim, survivor = r.clients[1], r.clients[0]
	}
	victimNode := r.nodeIDs[victim.Name()]
	victimStorage := r.storageOf(t, victimNode)
	lost := byNode[victimNode]
	slices.Sort(lost)
	must.SliceNotEmpty(t, lost)
	t.Logf("killing %s, whose allocations hold %v", victim.Name(), lost)

	must.NoError(t, devplugin.SetFault(r.stateDir, "ControllerUnpublishVolume", devplugin.Fault{
		Code: codes.Unavailable, Message: "e2e: the storage controller is busy",
	}))
	mark := r.callMark(t)
	r.c.Kill(t, victim)
	killed := time.Now()
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for _, id := range lost {
			a := r.holders[id]
			past := r.volume(t, r.s, id).PastClaims[a.ID]
			if past == nil || !strings.Contains(past.Note, "node step skipped") ||
				!strings.Contains(past.LastError, "ControllerUnpublishVolume") {
				return false, fmt.Errorf("the release of %s has not skipped the node step and failed at the controller yet: %+v", id, past)
			}
		}
		return true, nil
	})
	skipped := time.Since(killed)
	t.Logf("node steps skipped, controller step failing %s after the kill (TTL %s, grace %s)",
		skipped.Round(time.Millisecond), clientHeartbeatTTL, clientNodeGrace)
	// The client heartbeats about every TTL/2: its node cannot be down
	// before the grace period has passed since the kill.
	must.GreaterEq(t, clientNodeGrace, skipped, must.Sprint("a claim must not be released before the node is down"))
	status, err := r.nodeStatus(victim.Name())
	must.NoError(t, err)
	must.Eq(t, structs.NodeStatusDown, status)
	for _, id := range lost {
		a := r.holders[id]
		past := r.volume(t, r.s, id).PastClaims[a.ID]
		must.Eq(t, structs.CSIVolumeClaimStateNodeDetached, past.State, must.Sprintf("%s: %+v", id, past))
		must.StrContains(t, past.Note, victimNode)
		must.Positive(t, past.Attempts)
		res := r.cli(t, r.s, "volume status", "-verbose", id)
		must.Zero(t, res.Code, must.Sprint(res))
		must.StrContains(t, res.Stdout, "node step skipped", must.Sprint(res))
		must.StrContains(t, res.Stdout, "node-detached", must.Sprint(res))
	}

	must.NoError(t, devplugin.ClearFaults(r.stateDir))
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		for _, id := range lost {
			a := r.holders[id]
			vol := r.volume(t, r.s, id)
			if vol.WriteClaims[a.ID] != nil || vol.PastClaims[a.ID] != nil {
				return false, fmt.Errorf("the claim of %s on %s is not freed yet", a.Name, id)
			}
		}
		return true, nil
	})

	// The replacements of the lost allocations claim the freed volumes on
	// the surviving node.
	lostAllocs := map[string]*structs.Allocation{}
	for _, id := range lost {
		lostAllocs[id] = r.holders[id]
	}
	r.holders = r.waitHolders(t, secondJob)
	calls := r.callsSince(t, mark)
	at := r.storageOf(t, r.nodeIDs[survivor.Name()])
	for id, a := range r.holders {
		got := callLines(calls, r.exts[id])
		if lostAllocs[id] == nil {
			must.SliceEmpty(t, got, must.Sprintf("%s, held on the surviving node, is left alone", id))
			continue
		}
		must.NotEq(t, lostAllocs[id].ID, a.ID)
		must.Eq(t, r.nodeIDs[survivor.Name()], a.NodeID)
		failed := controllerCall("ControllerUnpublishVolume", victimStorage, codes.Unavailable)
		n := 0
		for n < len(got) && got[n] == failed {
			n++
		}
		must.Positive(t, n, must.Sprintf("%s: the controller step failed first:\n%s", id, strings.Join(got, "\n")))
		must.Eq(t, []string{
			controllerCall("ControllerUnpublishVolume", victimStorage, codes.OK),
			controllerCall("ControllerPublishVolume", at, codes.OK),
			nodeCall("NodeStageVolume", at, codes.OK),
			nodeCall("NodePublishVolume", at, codes.OK),
		}, got[n:], must.Sprintf("%s: released through the controller only, then published to %s", id, a.Name))
		r.waitOwner(t, id, a)
	}
	for _, c := range calls {
		must.NotEq(t, victimStorage, c.Instance, must.Sprintf("the killed node's plugin instance is not called: %+v", c))
	}
}

// liveAllocs reads the job's allocations that are not terminal, by name.
func (r *releaseEnv) liveAllocs(jobID string) (map[string]*structs.Allocation, error) {
	var allocs []*structs.Allocation
	if err := r.get(r.s.HTTPAddr()+"/v1/job/"+jobID+"/allocations", &allocs); err != nil {
		return nil, err
	}
	out := map[string]*structs.Allocation{}
	for _, a := range allocs {
		if a.Terminal() {
			continue
		}
		if b := out[a.Name]; b != nil {
			return nil, fmt.Errorf("two live allocations are named %s: %s and %s", a.Name, a.ID, b.ID)
		}
		out[a.Name] = a
	}
	return out, nil
}

// storageOf is the storage system's node ID of the plugin instance on the
// client with the given node ID.
func (r *releaseEnv) storageOf(t *testing.T, nodeID string) string {
	t.Helper()
	for i, cl := range r.clients {
		if r.nodeIDs[cl.Name()] == nodeID {
			return r.plugins[i].NodeID()
		}
	}
	t.Fatalf("no client has node ID %s", nodeID)
	return ""
}

// callMark is where the storage system's call log ends now.
func (r *releaseEnv) callMark(t *testing.T) int {
	t.Helper()
	calls, err := devplugin.ReadCallLog(r.stateDir)
	must.NoError(t, err)
	return len(calls)
}

// callsSince returns the calls logged after mark.
func (r *releaseEnv) callsSince(t *testing.T, mark int) []devplugin.Call {
	t.Helper()
	calls, err := devplugin.ReadCallLog(r.stateDir)
	must.NoError(t, err)
	must.GreaterEq(t, mark, len(calls), must.Sprint("the call log only grows"))
	return calls[mark:]
}

// volumeCalls returns the calls that name the volume, in the order they
// finished.
func volumeCalls(calls []devplugin.Call, externalID string) []devplugin.Call {
	var out []devplugin.Call
	for _, c := range calls {
		if c.VolumeID == externalID {
			out = append(out, c)
		}
	}
	return out
}

// callLines describes the calls that name the volume, one line each: a
// node call by the instance that served it, a controller call by the node
// it names.
func callLines(calls []devplugin.Call, externalID string) []string {
	var out []string
	for _, c := range volumeCalls(calls, externalID) {
		if strings.HasPrefix(c.Method, "Controller") {
			out = append(out, controllerCall(c.Method, c.NodeID, c.Code))
		} else {
			out = append(out, nodeCall(c.Method, c.Instance, c.Code))
		}
	}
	return out
}

// nodeCall is how callLines shows a node call served by instance.
func nodeCall(method, instance string, code codes.Code) string {
	return fmt.Sprintf("%s by %s: %s", method, instance, code)
}

// controllerCall is how callLines shows a controller call naming node.
func controllerCall(method, node string, code codes.Code) string {
	return fmt.Sprintf("%s for %s: %s", method, node, code)
}
