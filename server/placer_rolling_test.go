package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// pluginSystemJob is a system job whose task runs the node plugin "dev".
func pluginSystemJob(command string) *structs.Job {
	return &structs.Job{ID: "plugin", Type: structs.JobTypeSystem, TaskGroups: []*structs.TaskGroup{{
		Name: "nodes",
		Tasks: []*structs.Task{{Name: "plugin", Driver: structs.TaskDriverExec, Config: structs.TaskConfig{Command: command},
			CSIPluginConfig: &structs.TaskCSIPluginConfig{ID: "dev", Type: structs.CSIPluginTypeNode}}},
	}}}
}

// liveByNode waits until cond holds of the job's live allocations, by node,
// and returns them with the job, both read from one snapshot.
func liveByNode(t *testing.T, s *Server, jobID string, cond func(*structs.Job, map[string]*structs.Allocation) error) (*structs.Job, map[string]*structs.Allocation) {
	t.Helper()
	var job *structs.Job
	out := map[string]*structs.Allocation{}
	testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
		snap, err := s.State().Snapshot()
		if err != nil {
			return false, err
		}
		if job, err = snap.JobByID(nil, structs.DefaultNamespace, jobID); err != nil || job == nil {
			return false, fmt.Errorf("job %s: %v", jobID, err)
		}
		allocs, err := snap.AllocsByJob(nil, structs.DefaultNamespace, jobID)
		if err != nil {
			return false, err
		}
		clear(out)
		for _, a := range allocs {
			if !a.Terminal() {
				if out[a.NodeID] != nil {
					return false, fmt.Errorf("two live allocations on %s", a.NodeID)
				}
				out[a.NodeID] = a
			}
		}
		err = cond(job, out)
		return err == nil, err
	})
	return job, out
}

// runsPlugin reports the allocation running on its node, with its plugin
// instance healthy or not, as the node's client would.
func runsPlugin(t *testing.T, s *Server, node *structs.Node, a *structs.Allocation, healthy bool) {
	t.Helper()
	must.NoError(t, s.RPC("Node.UpdateAlloc", &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID,
		Allocs: []*structs.AllocClientUpdate{{ID: a.ID, ClientStatus: structs.AllocClientStatusRunning}}}, &structs.GenericResponse{}))
	info := mock.NodeInfo("dev", node.ID, healthy)
	info.AllocID = a.ID
	must.NoError(t, s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: node.ID, SecretID: node.SecretID,
		Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{"dev": info}}, &structs.NodeUpdateResponse{}))
}

// TestPlacer_RollingPluginUpdate: a new version of a plugin system job is
// rolled out by the leader's placer one node at a time: the second node's
// allocation is replaced only once the first node's replacement runs and
// its own plugin instance is healthy, which the placer notices from the
// node's fingerprint alone.
func TestPlacer_RollingPluginUpdate(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	nodes := map[string]*structs.Node{}
	for range 2 {
		n := mock.Node("dev")
		nodes[n.ID] = n
		connectAgent(t, s, n, &agentEndpoint{})
	}
	first, second := "", ""
	for id := range nodes {
		if first == "" || id < first {
			first, second = id, first
		} else {
			second = id
		}
	}

	must.NoError(t, registerJob(t, s, pluginSystemJob("/bin/plugin-v0")))
	_, v0 := liveByNode(t, s, "plugin", func(_ *structs.Job, live map[string]*structs.Allocation) error {
		if len(live) != 2 {
			return fmt.Errorf("%d live allocations", len(live))
		}
		return nil
	})
	for id, a := range v0 {
		runsPlugin(t, s, nodes[id], a, true)
	}

	must.NoError(t, registerJob(t, s, pluginSystemJob("/bin/plugin-v1")))
	// The first node's allocation is replaced; the second's stays.
	_, live := liveByNode(t, s, "plugin", func(j *structs.Job, live map[string]*structs.Allocation) error {
		if a := live[first]; a == nil || a.JobVersion != 1 {
			return fmt.Errorf("first node: %+v", a)
		}
		return nil
	})
	must.Eq(t, v0[second].ID, live[second].ID)

	// Running, its plugin instance not healthy yet: the update waits, and
	// says for what.
	runsPlugin(t, s, nodes[first], live[first], false)
	want := fmt.Sprintf(`rolling update: waiting for the CSI plugin "dev" of allocation %s (task "plugin") to be healthy on node %s`,
		live[first].ID, first)
	_, live = liveByNode(t, s, "plugin", func(j *structs.Job, _ map[string]*structs.Allocation) error {
		if gp := j.Placement["nodes"]; gp == nil || len(gp.Waiting) != 2 || gp.Waiting[1] != want {
			return fmt.Errorf("placement %+v", placementOf(j))
		}
		return nil
	})
	must.Eq(t, v0[second].ID, live[second].ID, must.Sprint("the second node waits"))

	// Healthy: the second node's turn.
	runsPlugin(t, s, nodes[first], live[first], true)
	_, live = liveByNode(t, s, "plugin", func(j *structs.Job, live map[string]*structs.Allocation) error {
		if a := live[second]; a == nil || a.JobVersion != 1 {
			return fmt.Errorf("second node: %+v", a)
		}
		return nil
	})
	runsPlugin(t, s, nodes[second], live[second], true)
	liveByNode(t, s, "plugin", func(j *structs.Job, _ map[string]*structs.Allocation) error {
		if gp := j.Placement["nodes"]; gp == nil || len(gp.Waiting) != 0 || gp.Placed != 2 {
			return fmt.Errorf("placement %+v", placementOf(j))
		}
		return nil
	})
}
