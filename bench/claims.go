package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/volplane/volplane/structs"
)

const (
	// claimGroupCount is the count of each claim job's per_alloc group:
	// allocation i of job j claims volume cvolJJJJJ[i]. One job whose count
	// is the number of claims would be simplest, but the leader's placer
	// re-examines every job after every volume write (each claim is one),
	// and its cost per job grows with the square of the group's count (it
	// looks each allocation's name up among the group's names); thousands
	// of jobs of one cost it a fixed overhead each instead. Groups of 20
	// are near the cheapest point between the two, and a plausible size for
	// a per_alloc group.
	claimGroupCount = 20
	// claimSettleTimeout bounds the wait for the leader's Raft log to stop
	// growing before the refused claims are counted.
	claimSettleTimeout = 10 * time.Second
	// placeTimeout bounds the wait for the placer to place every claim
	// job's allocations.
	placeTimeout = 2 * time.Minute
	// jobRegisterers is how many Job.Register calls are in flight while the
	// claim jobs are set up.
	jobRegisterers = 8
)

// claimSlot is an allocation placed on a node and the volume its group
// asks it to claim as a single-node writer.
type claimSlot struct {
	allocID  string
	volumeID string
	// node is the node the allocation was placed on, whose ID and secret
	// the claim carries.
	node *structs.Node
}

// claimFixture is what the claim phase claims: slots, handed out in order,
// each used once, so every measured claim takes a fresh volume; and rivals,
// allocations of other jobs whose groups ask for the volumes of the first
// len(rivals) slots with the same modes, so that once those are claimed,
// every rival's claim must be refused with max claims.
type claimFixture struct {
	slots  []claimSlot
	rivals []claimSlot
	next   int
	// jobs and allocs count what the setup put in the state.
	jobs, allocs int
}

// take returns the next n unused slots.
func (f *claimFixture) take(n int) ([]claimSlot, error) {
	if f.next+n > len(f.slots) {
		return nil, fmt.Errorf("the claim phase set up %d volumes and needs more than that (%d)", len(f.slots), f.next+n)
	}
	s := f.slots[f.next : f.next+n]
	f.next += n
	return s, nil
}

// claimSourcePrefix starts the per_alloc sources of the claim jobs.
const claimSourcePrefix = "cvol"

// claimSource is the per_alloc source of claim job j, as perAllocJobs
// names it: its allocation i claims claimSource(j)+"[i]".
func claimSource(j int) string { return fmt.Sprintf("%s%05d", claimSourcePrefix, j) }

// claimJob is a service job of one per_alloc group of count count, asking
// for source[i] as a single-node writer with a file-system attachment.
func claimJob(id, source string, count int) *structs.Job {
	req := &structs.VolumeRequest{
		Name: "data", Type: structs.VolumeTypeCSI, Source: source, PerAlloc: true,
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}
	return &structs.Job{
		ID: id, Namespace: structs.DefaultNamespace, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: count,
			Volumes: map[string]*structs.VolumeRequest{"data": req},
			Tasks: []*structs.Task{{
				Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/true"},
				VolumeMounts: []*structs.VolumeMount{{Volume: "data", Destination: "/data"}},
			}},
		}},
	}
}

// claimVolume is a volume of plugin that takes one single-node writer
// with a file-system attachment, and nothing else.
func claimVolume(plugin, id string) *structs.CSIVolume {
	v := benchVolume(0)
	v.ID, v.Name, v.ExternalID, v.PluginID = id, id, "ext-"+id, plugin
	v.RequestedCapabilities = []*structs.CSIVolumeCapability{{
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
		AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
	}}
	return v
}

// perAllocJobs returns the jobs and the volumes for allocs allocations,
// each claiming a volume of its own: jobs of one per_alloc group of
// claimGroupCount (the last one smaller when allocs is not a multiple),
// job j named prefix-JJJJJ, its allocation i asking for volume
// sourcePrefixJJJJJ[i] of plugin.
func perAllocJobs(prefix, sourcePrefix, plugin string, allocs int) ([]*structs.Job, []*structs.CSIVolume) {
	var jobs []*structs.Job
	var vols []*structs.CSIVolume
	for j := 0; allocs > 0; j++ {
		count := min(allocs, claimGroupCount)
		source := fmt.Sprintf("%s%05d", sourcePrefix, j)
		jobs = append(jobs, claimJob(fmt.Sprintf("%s-%05d", prefix, j), source, count))
		for i := range count {
			vols = append(vols, claimVolume(plugin, fmt.Sprintf("%s[%d]", source, i)))
		}
		allocs -= count
	}
	return jobs, vols
}

// setupClaims registers the volumes, the claim jobs and the rival jobs for
// claims measured claims and refused refused ones, and waits until the
// placer has placed every allocation on the benchmark node. All of it
// happens before any claim, so the rivals are placed while their volumes
// are still free. phase names the phase in the progress lines.
func (vp *volplane) setupClaims(ctx context.Context, cfg *Config, phase string, claims, refused int) (*claimFixture, error) {
	jobs := (claims + claimGroupCount - 1) / claimGroupCount
	rivalJobs := (refused + claimGroupCount - 1) / claimGroupCount

	specs, vols := perAllocJobs("claim", claimSourcePrefix, benchPlugin, jobs*claimGroupCount)
	cfg.progress("%s: registering %d volumes, %d per request", phase, len(vols), cfg.ListBatch)
	if err := vp.registerVolumes(ctx, vols, cfg.ListBatch); err != nil {
		return nil, err
	}

	// Rival job j asks for the volumes of claim job j.
	for j := range rivalJobs {
		specs = append(specs, claimJob(fmt.Sprintf("rival-%05d", j), claimSource(j), claimGroupCount))
	}
	cfg.progress("%s: registering %d jobs of a per_alloc group of %d (%d of them rivals for the refused claims)",
		phase, len(specs), claimGroupCount, rivalJobs)
	if err := vp.registerJobs(ctx, specs); err != nil {
		return nil, err
	}

	cfg.progress("%s: waiting for the placer to place %d allocations", phase, len(specs)*claimGroupCount)
	start := time.Now()
	slots, err := vp.placedSlots(ctx, specs)
	if err != nil {
		return nil, err
	}
	f := &claimFixture{jobs: len(specs), allocs: len(slots)}
	for _, s := range slots {
		if s.node != vp.node {
			return nil, fmt.Errorf("allocation %s was placed on node %q, not the benchmark node", s.allocID, s.node.ID)
		}
	}
	cfg.progress("%s: every allocation placed after %v", phase, time.Since(start).Round(time.Millisecond))
	f.slots = slots[:claims]
	f.rivals = slots[jobs*claimGroupCount:][:refused]
	return f, nil
}

// registerVolumes registers vols, batch per request.
func (vp *volplane) registerVolumes(ctx context.Context, vols []*structs.CSIVolume, batch int) error {
	for len(vols) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(len(vols), batch)
		if err := vp.register(&structs.CSIVolumeRegisterRequest{Volumes: vols[:k]}); err != nil {
			return fmt.Errorf("registering %d volumes: %w", k, err)
		}
		vols = vols[k:]
	}
	return nil
}

// registerJobs registers specs, jobRegisterers at a time.
func (vp *volplane) registerJobs(ctx context.Context, specs []*structs.Job) error {
	if _, _, err := drive(ctx, len(specs), jobRegisterers, func(i int) error {
		var reply structs.JobRegisterResponse
		return vp.call("Job.Register", &structs.JobRegisterRequest{Job: specs[i]}, &reply)
	}); err != nil {
		return fmt.Errorf("registering %d jobs: %w", len(specs), err)
	}
	return nil
}

// stopJobs stops specs (Job.Deregister, no purge) with conc calls at once,
// and then, as the client agents do once they stopped the tasks, reports
// each allocation complete from its node: the stop turns the allocations'
// claims into past claims that wait for their client, the report lets
// their release start.
func (vp *volplane) stopJobs(ctx context.Context, specs []*structs.Job, conc int) error {
	if _, _, err := drive(ctx, len(specs), conc, func(i int) error {
		var reply structs.JobDeregisterResponse
		if err := vp.call("Job.Deregister", &structs.JobDeregisterRequest{JobID: specs[i].ID}, &reply); err != nil {
			return err
		}
		return vp.reportStopped(specs[i].ID)
	}); err != nil {
		return fmt.Errorf("stopping %d jobs: %w", len(specs), err)
	}
	return nil
}

// reportStopped reports the job's allocations complete, one Node.UpdateAlloc
// per node, signed with the node's secret as its client's report is.
func (vp *volplane) reportStopped(jobID string) error {
	var allocs structs.JobAllocationsResponse
	if err := vp.call("Job.Allocations", &structs.JobSpecificRequest{JobID: jobID}, &allocs); err != nil {
		return fmt.Errorf("reading the allocations of job %s: %w", jobID, err)
	}
	byNode := map[string][]*structs.AllocClientUpdate{}
	for _, a := range allocs.Allocations {
		if !a.ClientTerminal() {
			byNode[a.NodeID] = append(byNode[a.NodeID], &structs.AllocClientUpdate{ID: a.ID,
				ClientStatus: structs.AllocClientStatusComplete, ClientDescription: "tasks stopped"})
		}
	}
	for nodeID, updates := range byNode {
		node := vp.knownNode(nodeID)
		if node == nil {
			return fmt.Errorf("allocations of job %s run on node %q, which the benchmark did not register", jobID, nodeID)
		}
		req := &structs.NodeUpdateAllocRequest{NodeID: node.ID, SecretID: node.SecretID, Allocs: updates}
		if err := vp.call("Node.UpdateAlloc", req, &structs.GenericResponse{}); err != nil {
			return fmt.Errorf("reporting the allocations of job %s stopped on node %s: %w", jobID, nodeID, err)
		}
	}
	return nil
}

// placedSlots waits until the placer has placed every allocation of specs
// (each of one per_alloc group) and returns their slots, job after job, in
// the order of the allocations' indexes.
func (vp *volplane) placedSlots(ctx context.Context, specs []*structs.Job) ([]claimSlot, error) {
	deadline := time.Now().Add(placeTimeout)
	var out []claimSlot
	for _, job := range specs {
		tg := job.TaskGroups[0]
		byName, err := vp.waitPlaced(ctx, job.ID, tg.Count, deadline)
		if err != nil {
			return nil, err
		}
		for i := range tg.Count {
			name := structs.AllocName(job.ID, tg.Name, i)
			a := byName[name]
			node := vp.knownNode(a.NodeID)
			if node == nil {
				return nil, fmt.Errorf("allocation %s was placed on node %q, which the benchmark did not register", name, a.NodeID)
			}
			out = append(out, claimSlot{allocID: a.ID, volumeID: tg.Volumes["data"].VolumeID(name), node: node})
		}
	}
	return out, nil
}

// knownNode returns the node the benchmark registered under id, or nil.
func (vp *volplane) knownNode(id string) *structs.Node {
	if vp.node != nil && vp.node.ID == id {
		return vp.node
	}
	for _, a := range vp.agents {
		if a.node.ID == id {
			return a.node
		}
	}
	return nil
}

// waitPlaced polls Job.Allocations on the leader, as a client would, until
// the job has count live allocations, and returns them by name.
func (vp *volplane) waitPlaced(ctx context.Context, jobID string, count int, deadline time.Time) (map[string]*structs.Allocation, error) {
	for {
		var reply structs.JobAllocationsResponse
		if err := vp.call("Job.Allocations", &structs.JobSpecificRequest{JobID: jobID}, &reply); err != nil {
			return nil, fmt.Errorf("reading the allocations of job %s: %w", jobID, err)
		}
		live := map[string]*structs.Allocation{}
		for _, a := range reply.Allocations {
			if !a.Terminal() && a.DesiredStatus == structs.AllocDesiredStatusRun {
				live[a.Name] = a
			}
		}
		if len(live) == count {
			return live, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("job %s has %d of %d allocations placed after %s", jobID, len(live), count, placeTimeout)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// claimRequests builds the claim requests of slots, as the client agent of
// each slot's node sends them, outside the timed calls.
func (vp *volplane) claimRequests(slots []claimSlot) []*structs.CSIVolumeClaimRequest {
	out := make([]*structs.CSIVolumeClaimRequest, len(slots))
	for i, s := range slots {
		out[i] = &structs.CSIVolumeClaimRequest{
			VolumeID:     s.volumeID,
			NodeSecretID: s.node.SecretID,
			Claim: &structs.CSIVolumeClaim{
				AllocationID:   s.allocID,
				NodeID:         s.node.ID,
				Mode:           structs.CSIVolumeClaimWrite,
				AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
				AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
				State:          structs.CSIVolumeClaimStateTaken,
			},
		}
	}
	return out
}

// claimEntryBytes is the size of the Raft entry the leader writes for the
// claim of slot: the request with the provider's node ID filled in and the
// leader's timestamp. Volume IDs differ in length by a digit or two, so
// entries do too; this is the size of a typical one.
func (vp *volplane) claimEntryBytes(s claimSlot) (int, error) {
	req := vp.claimRequests([]claimSlot{s})[0]
	req.Claim.ExternalNodeID = vp.node.CSINodePlugins[benchPlugin].NodeInfo.ID
	req.Timestamp = time.Now().UnixNano()
	buf, err := structs.Encode(structs.CSIVolumeClaimRequestType, req)
	if err != nil {
		return 0, fmt.Errorf("encoding a claim request: %w", err)
	}
	return len(buf), nil
}

// claim sends one claim to the leader.
func (vp *volplane) claim(req *structs.CSIVolumeClaimRequest) error {
	var reply structs.CSIVolumeClaimResponse
	return vp.call("CSIVolume.Claim", req, &reply)
}

// settledIndex waits until the leader's last Raft index has stayed the same
// for a few polls, so that nothing still in flight (a placer pass, a
// heartbeat) is counted for or against the refused claims, and returns it.
func (vp *volplane) settledIndex(ctx context.Context) (uint64, error) {
	const quietPolls = 5
	deadline := time.Now().Add(claimSettleTimeout)
	last, same := vp.leader.Raft().LastIndex(), 0
	for same < quietPolls {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the leader's Raft log kept growing for %s after the last claim (at index %d)", claimSettleTimeout, last)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
		if idx := vp.leader.Raft().LastIndex(); idx == last {
			same++
		} else {
			last, same = idx, 0
		}
	}
	return last, nil
}
