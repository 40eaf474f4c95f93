package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/rpc"
	"github.com/volplane/volplane/structs"
)

// The client agents' part of the fault suite: jobs that really run on the
// client agents, claim volumes of the development plugin, and publish
// them through it, started and stopped while the nemesis works. The
// plugin's call log is the evidence of what reached the storage.

// agentVolume is a volume of the development plugin and the jobs that
// compete for it: writers, and readers where the mode has room for them.
type agentVolume struct {
	id      string
	access  structs.CSIVolumeAccessMode
	writers int
	readers int
}

var agentVolumes = []agentVolume{
	{id: "dev-snw-1", access: snw, writers: 2},
	{id: "dev-snw-2", access: snw, writers: 2},
	{id: "dev-mnsw", access: mnsw, writers: 2, readers: 1},
}

// agentJobSpec is one job of the client agents.
type agentJobSpec struct {
	id    string
	vol   agentVolume
	write bool
}

func agentJobs() []agentJobSpec {
	var out []agentJobSpec
	for _, v := range agentVolumes {
		for i := range v.writers {
			out = append(out, agentJobSpec{id: fmt.Sprintf("agent-%s-w%d", v.id, i), vol: v, write: true})
		}
		for i := range v.readers {
			out = append(out, agentJobSpec{id: fmt.Sprintf("agent-%s-r%d", v.id, i), vol: v})
		}
	}
	return out
}

// job is the job: one allocation whose task sleeps with the volume mounted.
func (j agentJobSpec) job() *structs.Job {
	return &structs.Job{ID: j.id, Namespace: structs.DefaultNamespace, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "app", Count: 1,
			Volumes: map[string]*structs.VolumeRequest{"data": {
				Name: "data", Type: structs.VolumeTypeCSI, Source: j.vol.id, ReadOnly: !j.write,
				AccessMode: j.vol.access, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
			}},
			Tasks: []*structs.Task{{Name: "sleep", Driver: structs.TaskDriverExec,
				Config:       structs.TaskConfig{Command: "/bin/sleep", Args: []string{"3600"}},
				VolumeMounts: []*structs.VolumeMount{{Volume: "data", Destination: "/data", ReadOnly: !j.write}}}},
		}}}
}

// agentDriver runs and stops the client agents' jobs at random while the
// faults go on. What the servers answer is not judged here (the API
// clients' history is); the effects are, in the call log and in the state
// after healing.
type agentDriver struct {
	suite *faultSuite
	rng   *rand.Rand
	pool  *rpc.ConnPool
	jobs  []agentJobSpec
	runs  int
	stops int
}

func (d *agentDriver) run(ctx context.Context) {
	running := map[string]bool{}
	for ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(300+d.rng.IntN(900))*time.Millisecond)
		if ctx.Err() != nil {
			return
		}
		j := d.jobs[d.rng.IntN(len(d.jobs))]
		var err error
		if running[j.id] {
			err = d.pool.RPC(d.suite.anyServer(), "Job.Deregister", &structs.JobDeregisterRequest{JobID: j.id,
				WriteRequest: structs.WriteRequest{Namespace: structs.DefaultNamespace}}, &structs.JobDeregisterResponse{})
			d.stops++
		} else {
			err = d.pool.RPC(d.suite.anyServer(), "Job.Register", &structs.JobRegisterRequest{Job: j.job()}, &structs.JobRegisterResponse{})
			d.runs++
		}
		if err == nil {
			running[j.id] = !running[j.id]
		}
	}
}

// stopAll stops every job of the client agents, retrying each until the
// servers say it is stopped (or was never registered).
func (d *agentDriver) stopAll(ctx context.Context) error {
	for _, j := range d.jobs {
		var err error
		for ctx.Err() == nil {
			err = d.pool.RPC(d.suite.anyServer(), "Job.Deregister", &structs.JobDeregisterRequest{JobID: j.id,
				WriteRequest: structs.WriteRequest{Namespace: structs.DefaultNamespace}}, &structs.JobDeregisterResponse{})
			if err == nil || structs.CodeOf(err) == structs.ErrCodeNotFound {
				err = nil
				break
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("stopping job %s: %w", j.id, err)
		}
	}
	return ctx.Err()
}

// publication is a writable NodePublishVolume that has not been undone.
type publication struct {
	instance, target string
	at               time.Time
}

// checkPublications reads the storage system's call log and reports every
// moment a volume was published writable on two nodes at once: a
// successful writable NodePublishVolume of a volume while another node's
// writable publication of it stands. A publication ends with the
// NodeUnpublishVolume of its target, or when its machine crashed. It also
// returns how many publications it saw.
func checkPublications(calls []devplugin.Call, downs []machineDown) (int, []string) {
	open := map[string][]publication{} // by volume
	var problems []string
	published := 0
	crashes := append([]machineDown(nil), downs...)
	sort.Slice(crashes, func(i, j int) bool { return crashes[i].at.Before(crashes[j].at) })
	end := func(instance string, at time.Time) {
		for vol, pubs := range open {
			open[vol] = dropPublications(pubs, func(p publication) bool { return p.instance == instance && !p.at.After(at) })
		}
	}
	for _, c := range calls {
		for len(crashes) > 0 && !crashes[0].at.After(c.Time) {
			end(crashes[0].instance, crashes[0].at)
			crashes = crashes[1:]
		}
		if c.Code != codes.OK {
			continue
		}
		switch c.Method {
		case "NodePublishVolume":
			if c.ReadOnly {
				continue
			}
			published++
			for _, p := range open[c.VolumeID] {
				if p.instance != c.Instance {
					problems = append(problems, fmt.Sprintf("%s: volume %s published writable on %s at %s while published writable on %s at %s since %s",
						c.Time.Format("15:04:05.000"), c.VolumeID, c.Instance, c.TargetPath, p.instance, p.target, p.at.Format("15:04:05.000")))
				}
			}
			open[c.VolumeID] = append(dropPublications(open[c.VolumeID], func(p publication) bool {
				return p.instance == c.Instance && p.target == c.TargetPath
			}), publication{instance: c.Instance, target: c.TargetPath, at: c.Time})
		case "NodeUnpublishVolume":
			open[c.VolumeID] = dropPublications(open[c.VolumeID], func(p publication) bool {
				return p.instance == c.Instance && p.target == c.TargetPath
			})
		}
	}
	return published, problems
}

func dropPublications(pubs []publication, drop func(publication) bool) []publication {
	var out []publication
	for _, p := range pubs {
		if !drop(p) {
			out = append(out, p)
		}
	}
	return out
}

// leftInStorage replays the call log and returns what is still done in
// the storage system at its end: controller publications, stagings and
// node publications that were never undone, one a line.
func leftInStorage(calls []devplugin.Call) []string {
	open := map[string]bool{}
	for _, c := range calls {
		if c.Code != codes.OK {
			continue
		}
		switch c.Method {
		case "ControllerPublishVolume":
			open[fmt.Sprintf("%s controller-published to %s", c.VolumeID, c.NodeID)] = true
		case "ControllerUnpublishVolume":
			delete(open, fmt.Sprintf("%s controller-published to %s", c.VolumeID, c.NodeID))
		case "NodeStageVolume":
			open[fmt.Sprintf("%s staged on %s at %s", c.VolumeID, c.Instance, c.StagingPath)] = true
		case "NodeUnstageVolume":
			delete(open, fmt.Sprintf("%s staged on %s at %s", c.VolumeID, c.Instance, c.StagingPath))
		case "NodePublishVolume":
			open[fmt.Sprintf("%s published on %s at %s", c.VolumeID, c.Instance, c.TargetPath)] = true
		case "NodeUnpublishVolume":
			delete(open, fmt.Sprintf("%s published on %s at %s", c.VolumeID, c.Instance, c.TargetPath))
		}
	}
	out := make([]string, 0, len(open))
	for k := range open {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// describeCalls shows a volume's calls in the log, one a line, for a
// failure report.
func describeCalls(calls []devplugin.Call, volumeID string) string {
	var b strings.Builder
	for _, c := range calls {
		if c.VolumeID == volumeID {
			fmt.Fprintf(&b, "%s %s by %s node=%s target=%s ro=%t: %s\n", c.Time.Format("15:04:05.000"), c.Method,
				c.Instance, c.NodeID, c.TargetPath, c.ReadOnly, c.Code)
		}
	}
	return b.String()
}
