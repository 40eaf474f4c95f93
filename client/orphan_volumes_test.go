package client

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/client/allocrunner"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// lostAlloc is an allocation whose client was away long enough for the
// servers to mark it lost and to skip the node step of its volume's
// release.
type lostAlloc struct {
	srv   *server.Server
	e     *allocEnv
	alloc *structs.Allocation
	// victim is the index of the client that ran the allocation; it is
	// shut down.
	victim int
	// ext is the volume's external ID, usage its recorded use on the
	// victim before it went away.
	ext   string
	usage state.VolumeUsage
	shim  allocrunner.TaskState
	// lostAt is a time after which the victim's node was never called for
	// the volume.
	lostAt time.Time
}

// newLostAlloc runs a job of one allocation writing into volume volID on
// one of two clients (each running the development plugin as a monolith),
// calls prepare (when set) once it runs, shuts its client down, and waits
// until the servers marked the allocation lost and took its claim past the
// node step (the node is down: the step is skipped). The replacement
// allocation is placed on the other client, the only one up then, so that
// the victim's node has no other use of the volume when it is back.
func newLostAlloc(t *testing.T, volID string, prepare func(*allocEnv)) *lostAlloc {
	t.Helper()
	servers := server.TestCluster(t, 1, func(_ int, c *server.Config) {
		c.HeartbeatTTL, c.NodeGracePeriod, c.HTTPAddr = testTTL, testGrace, ""
		// Failed release steps are retried often, so a release completes
		// soon after its fault is cleared.
		c.ReleaseBaseDelay, c.ReleaseMaxDelay = 50*time.Millisecond, 250*time.Millisecond
	})
	l := &lostAlloc{srv: servers[0], e: newAllocEnv(t, servers, 2)}
	clients := []*Client{l.e.startClient(0, nil), l.e.startClient(1, nil)}
	l.e.waitNodesHealthy(l.srv, 2)
	l.ext = l.e.createVolume(l.srv, volID)
	registerJob(t, l.srv, writerJob(volID, 1, volID, false, taskScript))
	l.alloc = waitAllocs(t, l.srv, volID, 1, clientStatus(structs.AllocClientStatusRunning))[volID+".g[0]"]
	if l.alloc.NodeID == clients[1].NodeID() {
		l.victim = 1
	}
	c := clients[l.victim]
	st, _ := c.AllocState(l.alloc.ID)
	l.shim = st.Tasks["t"]
	var ok bool
	l.usage, ok = c.Usage().Get(l.alloc.ID, volID)
	must.True(t, ok, must.Sprint("the volume's use is recorded"))
	must.NotEq(t, "", l.usage.StagingPath, must.Sprint("the development plugin stages"))
	if prepare != nil {
		prepare(l.e)
	}

	must.NoError(t, c.Shutdown())
	waitAlloc(t, l.srv, l.alloc.ID, clientStatus(structs.AllocClientStatusLost))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		vol, err := l.srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, volID)
		if err != nil {
			return false, err
		}
		// The live claim stays until the release frees it, the past
		// claim going with it.
		claim := vol.PastClaims[l.alloc.ID]
		switch {
		case claim == nil && (vol.ReadClaims[l.alloc.ID] != nil || vol.WriteClaims[l.alloc.ID] != nil):
			return false, fmt.Errorf("the allocation's claim is not being released yet")
		case claim != nil && (claim.State == structs.CSIVolumeClaimStateTaken || claim.State == structs.CSIVolumeClaimStateUnpublishing):
			return false, fmt.Errorf("the release is at %s", claim.State)
		}
		return true, nil
	})
	l.lostAt = time.Now()
	return l
}

// restart starts the victim client again, logging to logs as well.
func (l *lostAlloc) restart(t *testing.T, logs *testutil.Buffer) *Client {
	t.Helper()
	return l.e.startClient(l.victim, func(cfg *Config) { cfg.Logger = testLogger(t, cfg.NodeName, logs) })
}

// waitStopped waits until the restarted client stopped the lost
// allocation's task.
func (l *lostAlloc) waitStopped(t *testing.T, c *Client) {
	t.Helper()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		st, _ := c.AllocState(l.alloc.ID)
		return st.ClientStatus == structs.AllocClientStatusComplete && st.Tasks["t"].State == state.TaskDead,
			fmt.Errorf("allocation is %+v", st)
	})
}

// nodeCalls returns the calls of method the victim's plugin instance served
// for the volume since it was lost.
func (l *lostAlloc) nodeCalls(t *testing.T, method string) []devplugin.Call {
	t.Helper()
	var out []devplugin.Call
	for _, c := range callsFor(t, l.e.stateDir, method, l.ext) {
		if c.Time.After(l.lostAt) && c.Instance == fmt.Sprintf("storage-%d", l.victim) {
			out = append(out, c)
		}
	}
	return out
}

// While the servers still hold a past claim of a lost allocation (their
// release is stuck at the controller step, which fails), the client that
// is back leaves the volume published and staged however many times it
// looks: the release is the servers'. Once they free the claim, it detaches
// the volume itself.
func TestOrphanSweep_PastClaimKeepsVolume(t *testing.T) {
	t.Parallel()
	l := newLostAlloc(t, "held", func(e *allocEnv) {
		must.NoError(t, devplugin.SetFault(e.stateDir, "ControllerUnpublishVolume",
			devplugin.Fault{Code: codes.Unavailable, Message: "controller busy (test)"}))
	})
	vol, err := l.srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "held")
	must.NoError(t, err)
	claim := vol.PastClaims[l.alloc.ID]
	must.NotNil(t, claim, must.Sprint("the servers' release is stuck"))
	must.Eq(t, structs.CSIVolumeClaimStateNodeDetached, claim.State)
	must.StrContains(t, claim.Note, "node step skipped")

	var logs testutil.Buffer
	c := l.restart(t, &logs)
	l.waitStopped(t, c)
	// The sweep looks several times (after the end of the allocation,
	// then with backoff) and finds the past claim each time.
	const kept = "the servers still hold a claim of the ended allocation on the volume; leaving its release to them"
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n := strings.Count(logs.String(), kept)
		return n >= 3, fmt.Errorf("the sweep found the claim held %d times", n)
	})
	vol, err = l.srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "held")
	must.NoError(t, err)
	must.NotNil(t, vol.PastClaims[l.alloc.ID], must.Sprint("the servers' release is still stuck"))
	must.SliceEmpty(t, l.nodeCalls(t, "NodeUnpublishVolume"))
	must.SliceEmpty(t, l.nodeCalls(t, "NodeUnstageVolume"))
	_, ok := c.Usage().Get(l.alloc.ID, "held")
	must.True(t, ok, must.Sprint("the volume's use is still recorded"))
	st, _ := c.AllocState(l.alloc.ID)
	must.Eq(t, structs.AllocVolumeStepPublished, st.Volumes["data"].Step)

	// The controller recovers: the servers free the claim, and the client
	// detaches the volume.
	must.NoError(t, devplugin.ClearFaults(l.e.stateDir))
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		if _, ok := c.Usage().Get(l.alloc.ID, "held"); ok {
			return false, fmt.Errorf("the volume's use is still recorded; calls %v", methodsFor(t, l.e.stateDir, l.ext))
		}
		return true, nil
	})
	must.Len(t, 1, l.nodeCalls(t, "NodeUnpublishVolume"))
	must.Len(t, 1, l.nodeCalls(t, "NodeUnstageVolume"))
	must.StrContains(t, logs.String(), "volume released by the servers without the node step; detached it locally")
}

// The sweep detaches a volume only when the servers' answer says they hold
// no claim of the allocation on it: none current or past, or no volume at
// all. A read that failed says nothing.
func TestOrphanSweep_ClaimReleased(t *testing.T) {
	t.Parallel()
	const alloc = "alloc-1"
	claim := func(id string) map[string]*structs.CSIVolumeClaim {
		return map[string]*structs.CSIVolumeClaim{id: {AllocationID: id}}
	}
	readErr := structs.NewError(structs.ErrCodeNoLeader, "no cluster leader")
	cases := []struct {
		name     string
		vol      *structs.CSIVolume
		err      error
		released bool
		wantErr  error
	}{
		{name: "write claim", vol: &structs.CSIVolume{WriteClaims: claim(alloc)}},
		{name: "read claim", vol: &structs.CSIVolume{ReadClaims: claim(alloc)}},
		{name: "past claim", vol: &structs.CSIVolume{PastClaims: claim(alloc), WriteClaims: claim("other")}},
		{name: "claims of others only", vol: &structs.CSIVolume{WriteClaims: claim("other"), PastClaims: claim("another")}, released: true},
		{name: "no claim", vol: &structs.CSIVolume{}, released: true},
		{name: "volume not found", released: true},
		{name: "namespace not found", err: structs.ErrNotFound("namespace %q not found", "ns"), released: true},
		{name: "read failed", err: readErr, wantErr: readErr},
		{name: "read failed with a plain error", err: errors.New("connection reset"), wantErr: errors.New("connection reset")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			released, err := claimReleased(alloc, tc.vol, tc.err)
			if tc.wantErr != nil {
				must.EqError(t, err, tc.wantErr.Error())
				must.False(t, released)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.released, released)
		})
	}
}
