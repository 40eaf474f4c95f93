package server

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/scheduler"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// volumeJob is a service job whose group uses one CSI volume.
func volumeJob(id string, count int, req *structs.VolumeRequest) *structs.Job {
	req.Name, req.Type = "data", structs.VolumeTypeCSI
	if req.AttachmentMode == "" {
		req.AttachmentMode = structs.CSIVolumeAttachmentModeFilesystem
	}
	return &structs.Job{
		ID: id, Namespace: structs.DefaultNamespace, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: count,
			Volumes: map[string]*structs.VolumeRequest{"data": req},
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"},
				VolumeMounts: []*structs.VolumeMount{{Volume: "data", Destination: "/data", ReadOnly: req.ReadOnly}}}},
		}},
	}
}

func registerJob(t *testing.T, s *Server, job *structs.Job) error {
	t.Helper()
	return s.RPC("Job.Register", &structs.JobRegisterRequest{Job: job}, &structs.JobRegisterResponse{})
}

// waitPlaced waits until the job has n live allocations and returns them by
// name.
func waitPlaced(t *testing.T, s *Server, jobID string, n int) map[string]*structs.Allocation {
	t.Helper()
	out := map[string]*structs.Allocation{}
	testutil.WaitForResult(t, 15*time.Second, func() (bool, error) {
		allocs, err := s.State().AllocsByJob(nil, structs.DefaultNamespace, jobID)
		if err != nil {
			return false, err
		}
		clear(out)
		for _, a := range allocs {
			if !a.Terminal() {
				out[a.Name] = a
			}
		}
		job, _ := s.State().JobByID(nil, structs.DefaultNamespace, jobID)
		if len(out) != n {
			return false, fmt.Errorf("job %s has %d live allocations, want %d; placement %+v", jobID, len(out), n, placementOf(job))
		}
		return true, nil
	})
	return out
}

func placementOf(j *structs.Job) any {
	if j == nil {
		return nil
	}
	out := map[string]structs.GroupPlacement{}
	for k, p := range j.Placement {
		out[k] = *p
	}
	return out
}

func claimFor(t *testing.T, s *Server, node *structs.Node, a *structs.Allocation, volID string, req *structs.VolumeRequest) (*structs.CSIVolumeClaimResponse, error) {
	t.Helper()
	var resp structs.CSIVolumeClaimResponse
	err := s.RPC("CSIVolume.Claim", &structs.CSIVolumeClaimRequest{
		VolumeID:     volID,
		NodeSecretID: node.SecretID,
		Claim: &structs.CSIVolumeClaim{
			AllocationID: a.ID, NodeID: a.NodeID, Mode: req.ClaimMode(),
			AccessMode: req.AccessMode, AttachmentMode: req.AttachmentMode, ReadOnly: req.ReadOnly,
			State: structs.CSIVolumeClaimStateTaken,
		},
	}, &resp)
	return &resp, err
}

func namedVolume(id string) *structs.CSIVolume {
	v := mock.CSIVolume("dev")
	v.ID, v.Name, v.ExternalID = id, id, "ext-"+id
	return v
}

func TestClaim_PerAllocJobPlacedClaimedAndPublished(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)

	// Two client nodes, each connected to a different server, running the
	// plugin with a controller that publishes volumes.
	eps := map[string]*agentEndpoint{}
	nodes := map[string]*structs.Node{}
	for i := 0; i < 2; i++ {
		n := mock.NodeWithController("dev")
		eps[n.ID] = &agentEndpoint{}
		nodes[n.ID] = n
		connectAgent(t, f[i], n, eps[n.ID])
	}
	for i := 0; i < 3; i++ {
		registerVolume(t, leader, namedVolume(fmt.Sprintf("vol[%d]", i)))
	}

	req := &structs.VolumeRequest{Source: "vol", PerAlloc: true, AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}
	must.NoError(t, registerJob(t, f[0], volumeJob("web", 3, req)))
	allocs := waitPlaced(t, leader, "web", 3)

	for i := 0; i < 3; i++ {
		a := allocs[structs.AllocName("web", "g", i)]
		must.NotNil(t, a)
		volID := fmt.Sprintf("vol[%d]", i)
		// Through a follower, as a client would.
		resp, err := claimFor(t, f[1], nodes[a.NodeID], a, volID, req)
		must.NoError(t, err)
		must.MapContainsKey(t, nodes, resp.PublishContext["served-by"], must.Sprint("the controller publish reached an agent"))
		vol := getVolume(t, leader, volID, false)
		held := vol.WriteClaims[a.ID]
		must.NotNil(t, held, must.Sprintf("%s write claim of %s", volID, a.Name))
		must.Eq(t, "ext-"+a.NodeID, held.ExternalNodeID)
		must.Eq(t, structs.CSIVolumeAccessModeSingleNodeWriter, vol.AccessMode)
		// The claim is retried by clients: a repeat changes nothing.
		_, err = claimFor(t, f[0], nodes[a.NodeID], a, volID, req)
		must.NoError(t, err)
	}
	stored, err := leader.State().CSIVolumeByID(nil, structs.DefaultNamespace, "vol[0]")
	must.NoError(t, err)
	for _, c := range stored.WriteClaims {
		must.MapNotEmpty(t, c.PublishContext, must.Sprint("the publish context is kept with the claim"))
	}

	// Another job wanting vol[0] as a writer is not placed while web holds
	// it, and says why.
	other := &structs.VolumeRequest{Source: "vol[0]", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}
	must.NoError(t, registerJob(t, leader, volumeJob("other", 1, other)))
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		j, err := leader.State().JobByID(nil, structs.DefaultNamespace, "other")
		if err != nil || j == nil || j.Placement["g"] == nil {
			return false, err
		}
		p := j.Placement["g"]
		return p.Placed == 0 && len(p.Blocked) > 0, fmt.Errorf("placement %+v", *p)
	})
	j, _ := leader.State().JobByID(nil, structs.DefaultNamespace, "other")
	must.StrContains(t, fmt.Sprint(j.Placement["g"].Blocked), allocs["web.g[0]"].ID)

	// A refused claim costs no Raft entry.
	before, _ := leader.State().LatestIndex()
	wa := allocs["web.g[1]"]
	_, err = claimFor(t, leader, nodes[wa.NodeID], wa, "vol[0]", other)
	must.Error(t, err)
	after, _ := leader.State().LatestIndex()
	must.Eq(t, before, after)
}

func TestClaim_MultiNodeReaderFromBothNodes(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	nodes := map[string]*structs.Node{}
	for i := 0; i < 2; i++ {
		n := mock.NodeWithController("dev")
		nodes[n.ID] = n
		connectAgent(t, s, n, &agentEndpoint{})
	}
	registerVolume(t, s, namedVolume("shared"))
	req := &structs.VolumeRequest{Source: "shared", ReadOnly: true, AccessMode: structs.CSIVolumeAccessModeMultiNodeReader}
	must.NoError(t, registerJob(t, s, volumeJob("readers", 2, req)))
	allocs := waitPlaced(t, s, "readers", 2)
	onNodes := map[string]bool{}
	for _, a := range allocs {
		_, err := claimFor(t, s, nodes[a.NodeID], a, "shared", req)
		must.NoError(t, err)
		onNodes[a.NodeID] = true
	}
	must.MapLen(t, 2, onNodes, must.Sprint("placement spreads over both nodes"))
	vol := getVolume(t, s, "shared", false)
	must.MapLen(t, 2, vol.ReadClaims)
	must.Eq(t, structs.CSIVolumeAccessModeMultiNodeReader, vol.AccessMode)
}

func TestJob_RegisterRefusesSingleNodeWriterCountTwo(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	before, _ := s.State().LatestIndex()
	err := registerJob(t, s, volumeJob("bad", 2, &structs.VolumeRequest{Source: "v", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}))
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "single-node-writer access mode allows only one reader or writer")
	after, _ := s.State().LatestIndex()
	must.Eq(t, before, after)
}

// Many allocations claim one single-node-writer volume at once through
// different servers: exactly one wins, every other gets the max-claims
// error, and the volume has one writer.
func TestClaim_ConcurrentWritersOneWins(t *testing.T) {
	servers := TestCluster(t, 3, nil)
	leader := WaitForLeader(t, servers...)
	node := mock.NodeWithController("dev")
	connectAgent(t, leader, node, &agentEndpoint{})
	registerVolume(t, leader, namedVolume("contended"))

	const n = 12
	req := &structs.VolumeRequest{Source: "contended", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem}
	var allocs []*structs.Allocation
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("writer-%02d", i)
		must.NoError(t, registerJob(t, leader, volumeJob(id, 1, &structs.VolumeRequest{
			Source: req.Source, AccessMode: req.AccessMode})))
	}
	for i := 0; i < n; i++ {
		for _, a := range waitPlaced(t, leader, fmt.Sprintf("writer-%02d", i), 1) {
			allocs = append(allocs, a)
		}
	}

	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i, a := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = claimFor(t, servers[i%3], node, a, "contended", req)
		}()
	}
	close(start)
	wg.Wait()

	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		must.Eq(t, structs.ErrCodeMaxClaims, structs.CodeOf(err), must.Sprint(err))
		must.StrContains(t, err.Error(), `volume "contended"`)
	}
	must.Eq(t, 1, won)
	vol := getVolume(t, leader, "contended", false)
	must.MapLen(t, 1, vol.WriteClaims)
	must.MapLen(t, 0, vol.ReadClaims)
}

// A group whose volume does not exist yet waits, with the reason in its
// placement, and is placed as soon as the volume is registered.
func TestPlacer_WaitsForVolumeThenPlaces(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	connectAgent(t, s, mock.NodeWithController("dev"), &agentEndpoint{})
	req := &structs.VolumeRequest{Source: "later", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}
	must.NoError(t, registerJob(t, s, volumeJob("waiting", 1, req)))

	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		j, err := s.State().JobByID(nil, structs.DefaultNamespace, "waiting")
		if err != nil || j == nil || j.Placement["g"] == nil {
			return false, err
		}
		return fmt.Sprint(j.Placement["g"].Blocked) == `[volume "later" does not exist]`, fmt.Errorf("placement %+v", placementOf(j))
	})
	registerVolume(t, s, namedVolume("later"))
	waitPlaced(t, s, "waiting", 1)
	j, _ := s.State().JobByID(nil, structs.DefaultNamespace, "waiting")
	must.SliceEmpty(t, j.Placement["g"].Blocked)
	must.Eq(t, structs.JobStatusRunning, j.Status)

	// Stopping the job stops its allocation.
	must.NoError(t, s.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "waiting"}, &structs.JobDeregisterResponse{}))
	allocs, _ := s.State().AllocsByJob(nil, structs.DefaultNamespace, "waiting")
	must.Len(t, 1, allocs)
	must.Eq(t, structs.AllocDesiredStatusStop, allocs[0].DesiredStatus)
}

// A failed allocation is replaced only after the reschedule delay: the job
// says why and until when, and the placer wakes on its own at that time,
// with no other change to the state.
func TestPlacer_FailedAllocationReplacedAfterDelay(t *testing.T) {
	const delay = 1500 * time.Millisecond
	s := TestServer(t, func(c *Config) {
		c.ReschedulePolicy = scheduler.ReschedulePolicy{BaseDelay: delay, MaxDelay: time.Minute}
	})
	WaitForLeader(t, s)
	node := mock.NodeWithController("dev")
	connectAgent(t, s, node, &agentEndpoint{})
	registerVolume(t, s, namedVolume("data"))
	req := &structs.VolumeRequest{Source: "data", AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}
	must.NoError(t, registerJob(t, s, volumeJob("crashy", 1, req)))
	first := waitPlaced(t, s, "crashy", 1)["crashy.g[0]"]

	update := &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID, Allocs: []*structs.AllocClientUpdate{{
		ID: first.ID, ClientStatus: structs.AllocClientStatusFailed, ClientDescription: "task t: exit code 1",
	}}}
	must.NoError(t, s.RPC("Node.UpdateAlloc", update, &structs.GenericResponse{}))
	failed, err := s.State().AllocByID(nil, first.ID)
	must.NoError(t, err)
	until := failed.ModifyTime + int64(delay)

	// The job and its allocations are read from one snapshot, so that what
	// the job says and what was placed are of the same moment.
	var job *structs.Job
	var allocs []*structs.Allocation
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		snap, err := s.State().Snapshot()
		if err != nil {
			return false, err
		}
		job, err = snap.JobByID(nil, structs.DefaultNamespace, "crashy")
		if err != nil || job == nil || job.Placement["g"] == nil {
			return false, err
		}
		if allocs, err = snap.AllocsByJob(nil, structs.DefaultNamespace, "crashy"); err != nil {
			return false, err
		}
		return job.Placement["g"].NextPlacement == until, fmt.Errorf("placement %+v", placementOf(job))
	})
	gp := job.Placement["g"]
	must.Eq(t, []string{"allocation crashy.g[0] failed once; it is replaced after " +
		time.Unix(0, until).UTC().Format(time.RFC3339)}, gp.Blocked)
	must.Eq(t, 0, gp.Placed)
	must.Len(t, 1, allocs, must.Sprint("no replacement while the job says it waits"))

	second := waitPlaced(t, s, "crashy", 1)["crashy.g[0]"]
	must.NotEq(t, first.ID, second.ID)
	must.GreaterEq(t, until, second.CreateTime, must.Sprint("placed once the delay was over"))
	job, _ = s.State().JobByID(nil, structs.DefaultNamespace, "crashy")
	must.SliceEmpty(t, job.Placement["g"].Blocked)
	must.Zero(t, job.Placement["g"].NextPlacement)
}

// A count over the cluster's limit is refused with a 400 that names the
// group, the count and the setting, and nothing is written.
func TestJob_RegisterRefusesCountOverLimit(t *testing.T) {
	s := TestServer(t, func(c *Config) { c.MaxGroupCount = 50 })
	WaitForLeader(t, s)
	before, _ := s.State().LatestIndex()
	req := &structs.VolumeRequest{Source: "v", PerAlloc: true, AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter}
	err := registerJob(t, s, volumeJob("big", 51, req))
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, err.Error(), `group "g": count 51 is over this cluster's limit of 50 (server { job_max_group_count })`)
	err = registerJob(t, s, volumeJob("huge", 2_000_000_000, req))
	must.StrContains(t, err.Error(), "count 2000000000 is over the limit of 100000")
	after, _ := s.State().LatestIndex()
	must.Eq(t, before, after)
	must.NoError(t, registerJob(t, s, volumeJob("ok", 50, req)))
}
