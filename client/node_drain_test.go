package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"github.com/shoenig/test/must"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// The test lives with the client's in-process cluster helpers (a real
// 3-server cluster, client agents, the development plugin on unix
// sockets); it tests the servers' drainer, and changes nothing of the
// client.

// pluginStandIn is a system job standing in for the job of the CSI node
// plugins: one allocation per eligible node, running until stopped.
func pluginStandIn() *structs.Job {
	return &structs.Job{
		ID: "plugin", Namespace: structs.DefaultNamespace, Type: structs.JobTypeSystem,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: 1,
			Tasks: []*structs.Task{{Name: "t", Driver: "exec",
				Config: structs.TaskConfig{Command: "/bin/sh", Args: []string{"-c", "while :; do sleep 0.05; done"}}}},
		}},
	}
}

// drainOrder watches a server's state and records a violation of the
// drain's order: the system job's allocation on the drained node stopped
// while an allocation of another job on that node still held a claim.
type drainOrder struct {
	mu        sync.Mutex
	violation string
	seen      int
}

func watchDrainOrder(t *testing.T, srv *server.Server, nodeID, systemJob string) *drainOrder {
	o := &drainOrder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			st := srv.State()
			ws := memdb.NewWatchSet()
			ws.Add(st.AbandonCh())
			if _, err := st.IndexWatch(ws, state.TableAllocs, state.TableCSIVolumes); err != nil {
				return
			}
			o.check(st, nodeID, systemJob)
			_ = ws.WatchCtx(ctx)
		}
	}()
	return o
}

func (o *drainOrder) check(st *state.StateStore, nodeID, systemJob string) {
	allocs, err := st.AllocsByNode(nil, nodeID)
	if err != nil {
		return
	}
	systemStopped := false
	var holding []string
	for _, a := range allocs {
		if a.JobID == systemJob {
			systemStopped = systemStopped || a.ServerTerminal()
			continue
		}
		vols, err := st.CSIVolumesByClaimAlloc(nil, a.ID)
		if err != nil {
			return
		}
		for _, v := range vols {
			holding = append(holding, fmt.Sprintf("%s on %s", a.ID, v.ID))
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen++
	if systemStopped && len(holding) > 0 && o.violation == "" {
		o.violation = fmt.Sprintf("system allocation stopped while claims are held: %v", holding)
	}
}

func (o *drainOrder) result() (string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.violation, o.seen
}

func updateDrain(t *testing.T, srv *server.Server, nodeID string, spec *structs.DrainSpec, markEligible bool) {
	t.Helper()
	req := &structs.NodeUpdateDrainRequest{NodeID: nodeID, MarkEligible: markEligible}
	if spec != nil {
		req.DrainStrategy = &structs.DrainStrategy{DrainSpec: *spec}
	}
	retryWrite(t, "updating the drain of "+nodeID, func() error {
		return srv.RPC("Node.UpdateDrain", req, &structs.NodeDrainUpdateResponse{})
	})
}

func setEligibility(t *testing.T, srv *server.Server, nodeID, eligibility string) {
	t.Helper()
	retryWrite(t, "setting the eligibility of "+nodeID, func() error {
		return srv.RPC("Node.UpdateEligibility", &structs.NodeUpdateEligibilityRequest{NodeID: nodeID, Eligibility: eligibility},
			&structs.NodeEligibilityUpdateResponse{})
	})
}

// jobAllocOn returns the job's allocation on the node that is still to
// run, nil when there is none.
func jobAllocOn(t *testing.T, srv *server.Server, jobID, nodeID string) *structs.Allocation {
	t.Helper()
	allocs, err := srv.State().AllocsByJob(nil, structs.DefaultNamespace, jobID)
	must.NoError(t, err)
	for _, a := range allocs {
		if a.NodeID == nodeID && !a.Terminal() {
			return a
		}
	}
	return nil
}

func waitRunningOn(t *testing.T, srv *server.Server, jobID, nodeID string) *structs.Allocation {
	t.Helper()
	var out *structs.Allocation
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		out = jobAllocOn(t, srv, jobID, nodeID)
		if out == nil || out.ClientStatus != structs.AllocClientStatusRunning {
			return false, fmt.Errorf("job %s runs nothing on node %s yet: %+v", jobID, nodeID, out)
		}
		return true, nil
	})
	return out
}

func waitLastDrain(t *testing.T, srv *server.Server, nodeID string, status structs.DrainStatus) *structs.Node {
	t.Helper()
	return waitNode(t, srv, nodeID, func(n *structs.Node) error {
		if n.DrainStrategy != nil || n.LastDrain == nil || n.LastDrain.Status != status {
			return fmt.Errorf("drain %+v, last drain %+v", n.DrainStrategy, n.LastDrain)
		}
		return nil
	})
}

// TestNodeDrain_ReleasesVolumesBeforeSystemJobs drains the node that runs a
// consumer of a single-node-writer volume and the system job standing in
// for the node plugins: the consumer is stopped and placed again on the
// other node, its claim on the drained node is released (node unpublish,
// then controller unpublish) before the system job's allocation there is
// stopped, and the drain completes with the node ineligible. Then:
// eligibility brings the system job back; -disable cancels a drain that
// waits for a release that cannot finish, leaving the plugin running; and
// a deadline forces such a drain.
func TestNodeDrain_ReleasesVolumesBeforeSystemJobs(t *testing.T) {
	servers := testCluster(t, 3)
	srv := servers[0]
	e := newAllocEnv(t, servers, 2)
	clients := []*Client{e.startClient(0, nil), e.startClient(1, nil)}
	e.waitNodesHealthy(srv, 2)
	ext := e.createVolume(srv, "vol")

	registerJob(t, srv, pluginStandIn())
	for _, c := range clients {
		waitRunningOn(t, srv, "plugin", c.NodeID())
	}
	registerJob(t, srv, writerJob("consumer", 1, "vol", false, taskScript))
	first := waitAllocs(t, srv, "consumer", 1, clientStatus(structs.AllocClientStatusRunning))["consumer.g[0]"]
	drained, other := clients[0], clients[1]
	if first.NodeID != drained.NodeID() {
		drained, other = other, drained
	}
	drainedExt := e.plugins[0].NodeID()
	if drained == clients[1] {
		drainedExt = e.plugins[1].NodeID()
	}
	sysOnDrained := jobAllocOn(t, srv, "plugin", drained.NodeID())
	must.NotNil(t, sysOnDrained)

	t.Run("drain releases the volume before stopping the plugin", func(t *testing.T) {
		order := watchDrainOrder(t, srv, drained.NodeID(), "plugin")
		updateDrain(t, srv, drained.NodeID(), &structs.DrainSpec{}, false)

		// The consumer moves to the other node.
		moved := waitRunningOn(t, srv, "consumer", other.NodeID())
		must.NotEq(t, first.ID, moved.ID)
		old := waitAlloc(t, srv, first.ID, clientStatus(structs.AllocClientStatusComplete))
		must.Eq(t, structs.AllocDrainDescription, old.DesiredDescription)

		n := waitLastDrain(t, srv, drained.NodeID(), structs.DrainStatusComplete)
		must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)
		sys := waitAlloc(t, srv, sysOnDrained.ID, clientStatus(structs.AllocClientStatusComplete))
		must.Eq(t, structs.AllocDesiredStatusStop, sys.DesiredStatus)
		must.Eq(t, structs.AllocDrainDescription, sys.DesiredDescription)
		// The plugin stand-in on the other node was left alone.
		must.NotNil(t, jobAllocOn(t, srv, "plugin", other.NodeID()))

		// The order, from the state: never the plugin stopped while a
		// claim on the node was held ...
		violation, seen := order.result()
		must.Eq(t, "", violation)
		must.Positive(t, seen)
		// ... and from the plugin's call log: the drained node's
		// unpublishes came before the plugin stand-in's task ended.
		unpub := callsFor(t, e.stateDir, "NodeUnpublishVolume", ext)
		ctrl := callsFor(t, e.stateDir, "ControllerUnpublishVolume", ext)
		var nodeUnpub, ctrlUnpub time.Time
		for _, c := range unpub {
			if c.Instance == drainedExt {
				nodeUnpub = c.Time
			}
		}
		for _, c := range ctrl {
			if c.NodeID == drainedExt {
				ctrlUnpub = c.Time
			}
		}
		must.False(t, nodeUnpub.IsZero(), must.Sprint("no NodeUnpublishVolume on the drained node"))
		must.False(t, ctrlUnpub.IsZero(), must.Sprint("no ControllerUnpublishVolume for the drained node"))
		must.True(t, nodeUnpub.Before(ctrlUnpub))
		ended := sys.TaskStates["t"]
		must.NotNil(t, ended)
		must.True(t, ctrlUnpub.Before(time.Unix(0, ended.FinishedAt)),
			must.Sprintf("controller unpublish at %v, plugin stand-in ended at %v", ctrlUnpub, time.Unix(0, ended.FinishedAt)))
	})

	t.Run("eligibility brings the system job back", func(t *testing.T) {
		setEligibility(t, srv, drained.NodeID(), structs.NodeSchedulingIneligible)
		must.Nil(t, jobAllocOn(t, srv, "plugin", drained.NodeID()))
		setEligibility(t, srv, drained.NodeID(), structs.NodeSchedulingEligible)
		waitRunningOn(t, srv, "plugin", drained.NodeID())
	})

	// From here on the volume's controller unpublish fails, so a release
	// from the consumer's node cannot finish.
	must.NoError(t, devplugin.SetFault(e.stateDir, "ControllerUnpublishVolume",
		devplugin.Fault{Code: codes.Unavailable, Message: "storage API down"}))
	stuck := other
	sysOnStuck := jobAllocOn(t, srv, "plugin", stuck.NodeID())
	must.NotNil(t, sysOnStuck)

	t.Run("disable cancels a drain that waits for a release", func(t *testing.T) {
		consumer := jobAllocOn(t, srv, "consumer", stuck.NodeID())
		must.NotNil(t, consumer)
		updateDrain(t, srv, stuck.NodeID(), &structs.DrainSpec{}, false)
		waitAlloc(t, srv, consumer.ID, clientStatus(structs.AllocClientStatusComplete))
		// The claim cannot be released: the drain waits, the plugin runs.
		testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
			v, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "vol")
			if err != nil || v == nil || v.PastClaims[consumer.ID] == nil || v.PastClaims[consumer.ID].Attempts == 0 {
				return false, fmt.Errorf("no failed release of %s yet: %v", consumer.ID, err)
			}
			return true, nil
		})
		n := waitNode(t, srv, stuck.NodeID(), func(n *structs.Node) error {
			if n.DrainStrategy == nil {
				return fmt.Errorf("not draining")
			}
			return nil
		})
		must.Eq(t, structs.DrainStatusDraining, n.LastDrain.Status)
		a, err := srv.State().AllocByID(nil, sysOnStuck.ID)
		must.NoError(t, err)
		must.False(t, a.Terminal(), must.Sprintf("plugin stand-in stopped while a claim is held: %+v", a))

		updateDrain(t, srv, stuck.NodeID(), nil, false)
		n = waitLastDrain(t, srv, stuck.NodeID(), structs.DrainStatusCanceled)
		must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)
		a, err = srv.State().AllocByID(nil, sysOnStuck.ID)
		must.NoError(t, err)
		must.False(t, a.Terminal())
	})

	t.Run("the deadline forces the drain", func(t *testing.T) {
		updateDrain(t, srv, stuck.NodeID(), &structs.DrainSpec{Deadline: 2 * time.Second}, false)
		n := waitLastDrain(t, srv, stuck.NodeID(), structs.DrainStatusComplete)
		must.Eq(t, structs.NodeSchedulingIneligible, n.SchedulingEligibility)
		sys := waitAlloc(t, srv, sysOnStuck.ID, func(a *structs.Allocation) error {
			if !a.ServerTerminal() {
				return fmt.Errorf("plugin stand-in not stopped: %s", a.DesiredStatus)
			}
			return nil
		})
		must.Eq(t, structs.AllocDrainForcedDescription, sys.DesiredDescription)
	})
	must.NoError(t, devplugin.ClearFaults(e.stateDir))
}
