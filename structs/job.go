package structs

import (
	"fmt"
	"maps"
	"slices"
)

// Job types.
const (
	JobTypeService  = "service"
	JobTypeBatch    = "batch"
	JobTypeSystem   = "system"
	JobTypeSysBatch = "sysbatch"
)

// Job statuses, derived by the servers.
const (
	JobStatusPending = "pending"
	JobStatusRunning = "running"
	JobStatusDead    = "dead"
)

// Volume mount propagation modes.
const (
	VolumeMountPropagationPrivate       = "private"
	VolumeMountPropagationHostToTask    = "host-to-task"
	VolumeMountPropagationBidirectional = "bidirectional"
)

// Job is a workload: task groups, each placed as Count allocations (or one
// per eligible node for system and sysbatch jobs).
type Job struct {
	ID        string
	Namespace string
	Name      string
	Type      string

	TaskGroups []*TaskGroup

	// Stop is set by a job stop: the job stays, its allocations stop.
	Stop bool
	// Status is derived from the allocations by the servers.
	Status string
	// Version counts registrations of the job.
	Version uint64
	// Update is the job's update block: the default of its groups'.
	Update *UpdateStrategy `json:",omitempty"`

	// Placement is, per task group, what the servers placed and, while
	// allocations are missing, why. Written by the placer on the leader.
	Placement map[string]*GroupPlacement

	SubmitTime     int64
	CreateIndex    uint64
	ModifyIndex    uint64
	JobModifyIndex uint64
}

// GroupPlacement explains a task group's placement.
type GroupPlacement struct {
	Desired int
	Placed  int
	// Blocked lists why allocations are missing, e.g. a volume that does
	// not exist yet, or per node why it was filtered.
	Blocked []string
	// UpdatedAt is stamped by the leader.
	UpdatedAt int64
	// NextPlacement is when the earliest delayed replacement of a failed
	// allocation of the group may be placed (Unix nanoseconds, by the
	// leader's clock); 0 when none waits.
	NextPlacement int64
	// Waiting lists what a rolling update (the group's update max_parallel)
	// waits for before it replaces more allocations of an older job
	// version, e.g. a replacement that is not running yet.
	Waiting []string `json:",omitempty"`
}

// TaskGroup is a set of tasks placed together, with the volumes they use.
type TaskGroup struct {
	Name    string
	Count   int
	Volumes map[string]*VolumeRequest
	Tasks   []*Task
	// Update is the group's update block (the job's when it has none).
	Update *UpdateStrategy `json:",omitempty"`
}

// VolumeRequest is a task group's use of a volume, under an alias.
type VolumeRequest struct {
	// Name is the alias tasks mount it by.
	Name           string
	Type           string
	Source         string
	ReadOnly       bool
	AccessMode     CSIVolumeAccessMode
	AttachmentMode CSIVolumeAttachmentMode
	PerAlloc       bool
	// MountOptions, when given, replace the volume's for this request.
	MountOptions *CSIMountOptions
}

// VolumeID is the volume this request means for an allocation.
func (r *VolumeRequest) VolumeID(allocName string) string {
	return VolumeIDForAlloc(r.Source, r.PerAlloc, allocName)
}

// ClaimMode is the claim mode the request needs.
func (r *VolumeRequest) ClaimMode() CSIVolumeClaimMode {
	if r.ReadOnly {
		return CSIVolumeClaimRead
	}
	return CSIVolumeClaimWrite
}

// Task is one process of a task group.
type Task struct {
	Name         string
	Driver       string
	Config       TaskConfig
	VolumeMounts []*VolumeMount
	// CSIPluginConfig, when set, makes the task a CSI plugin the client
	// supervises (the csi_plugin block).
	CSIPluginConfig *TaskCSIPluginConfig `json:",omitempty"`
}

// TaskConfig is the exec driver's configuration.
type TaskConfig struct {
	Command string
	Args    []string
}

// VolumeMount mounts a group's volume into a task.
type VolumeMount struct {
	Volume          string
	Destination     string
	ReadOnly        bool
	PropagationMode string
}

// Copy returns a deep copy.
func (j *Job) Copy() *Job {
	if j == nil {
		return nil
	}
	c := *j
	c.Update = j.Update.Copy()
	c.TaskGroups = make([]*TaskGroup, len(j.TaskGroups))
	for i, tg := range j.TaskGroups {
		c.TaskGroups[i] = tg.Copy()
	}
	if j.Placement != nil {
		c.Placement = make(map[string]*GroupPlacement, len(j.Placement))
		for k, p := range j.Placement {
			if p == nil {
				c.Placement[k] = nil
				continue
			}
			pc := *p
			pc.Blocked = slices.Clone(p.Blocked)
			pc.Waiting = slices.Clone(p.Waiting)
			c.Placement[k] = &pc
		}
	}
	return &c
}

// Copy returns a deep copy.
func (tg *TaskGroup) Copy() *TaskGroup {
	if tg == nil {
		return nil
	}
	c := *tg
	c.Update = tg.Update.Copy()
	// A job as submitted may hold null elements (`"Tasks":[null]`); they
	// are copied as nil for Validate to report, never dereferenced here:
	// the endpoints copy a job before they validate it.
	if tg.Volumes != nil {
		c.Volumes = make(map[string]*VolumeRequest, len(tg.Volumes))
		for k, v := range tg.Volumes {
			if v == nil {
				c.Volumes[k] = nil
				continue
			}
			vc := *v
			vc.MountOptions = v.MountOptions.Copy()
			c.Volumes[k] = &vc
		}
	}
	c.Tasks = make([]*Task, len(tg.Tasks))
	for i, t := range tg.Tasks {
		if t == nil {
			continue
		}
		tc := *t
		tc.Config.Args = slices.Clone(t.Config.Args)
		tc.CSIPluginConfig = t.CSIPluginConfig.Copy()
		tc.VolumeMounts = make([]*VolumeMount, len(t.VolumeMounts))
		for k, m := range t.VolumeMounts {
			if m == nil {
				continue
			}
			mc := *m
			tc.VolumeMounts[k] = &mc
		}
		c.Tasks[i] = &tc
	}
	return &c
}

// LookupTaskGroup returns the named group, or nil.
func (j *Job) LookupTaskGroup(name string) *TaskGroup {
	for _, tg := range j.TaskGroups {
		if tg.Name == name {
			return tg
		}
	}
	return nil
}

// IsSystem reports whether the job places one allocation per node.
func (j *Job) IsSystem() bool { return j.Type == JobTypeSystem || j.Type == JobTypeSysBatch }

// AllocName is the name of a group's N-th allocation, "job.group[N]".
func AllocName(jobID, group string, index int) string {
	return fmt.Sprintf("%s.%s[%d]", jobID, group, index)
}

// Stub returns the list view.
func (j *Job) Stub() *JobListStub {
	s := &JobListStub{ID: j.ID, Namespace: j.Namespace, Name: j.Name, Type: j.Type, Status: j.Status,
		Stop: j.Stop, Version: j.Version, SubmitTime: j.SubmitTime, CreateIndex: j.CreateIndex, ModifyIndex: j.ModifyIndex,
		JobModifyIndex: j.JobModifyIndex}
	for _, name := range slices.Sorted(maps.Keys(j.Placement)) {
		p := j.Placement[name]
		s.Desired += p.Desired
		s.Placed += p.Placed
	}
	return s
}

// JobListStub is the list view of a job.
type JobListStub struct {
	ID          string
	Namespace   string
	Name        string
	Type        string
	Status      string
	Stop        bool
	Version     uint64
	Desired     int
	Placed      int
	SubmitTime  int64
	CreateIndex uint64
	ModifyIndex uint64
	// JobModifyIndex is the index of the job's last registration that
	// changed it, as Nomad's stub has it.
	JobModifyIndex uint64
}

// JobRegisterRequest registers or updates a job.
type JobRegisterRequest struct {
	Job *Job
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// JobRegisterResponse returns the index of the write.
type JobRegisterResponse struct {
	Warnings []string
	// JobModifyIndex is the job's after the write: the write's index when
	// it changed the job, the earlier one when it did not.
	JobModifyIndex uint64
	QueryMeta
}

// JobDeregisterRequest stops a job (its allocations stop) or, with Purge,
// also removes it.
type JobDeregisterRequest struct {
	JobID string
	Purge bool
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// JobDeregisterResponse returns the index of the write.
type JobDeregisterResponse struct {
	// JobModifyIndex is the stopped job's (0 once purged).
	JobModifyIndex uint64
	QueryMeta
}

// JobSpecificRequest reads one job or its allocations.
type JobSpecificRequest struct {
	JobID string
	QueryOptions
}

// SingleJobResponse carries one job, nil when unknown.
type SingleJobResponse struct {
	Job *Job
	QueryMeta
}

// JobListRequest lists jobs, by ID prefix.
type JobListRequest struct {
	QueryOptions
}

// JobListResponse carries job stubs.
type JobListResponse struct {
	Jobs []*JobListStub
	QueryMeta
}

// JobAllocationsResponse carries a job's allocations.
type JobAllocationsResponse struct {
	Allocations []*Allocation
	QueryMeta
}

// PlanApplyRequest is what one run of the placer decided for one job: new
// or changed allocations and the job's placement explanation.
type PlanApplyRequest struct {
	Namespace string
	JobID     string
	// JobModifyIndex is the job version the plan was computed for; a plan
	// for an older version is refused by the FSM.
	JobModifyIndex uint64
	Allocs         []*Allocation
	Placement      map[string]*GroupPlacement
	Timestamp      int64
	WriteRequest
}

// AllocSpecificRequest reads one allocation.
type AllocSpecificRequest struct {
	AllocID string
	QueryOptions
}

// SingleAllocResponse carries one allocation, nil when unknown.
type SingleAllocResponse struct {
	Alloc *Allocation
	QueryMeta
}

// AllocListRequest lists allocations, by ID prefix.
type AllocListRequest struct {
	QueryOptions
}

// AllocListResponse carries allocations.
type AllocListResponse struct {
	Allocations []*Allocation
	QueryMeta
}

// Sanitize returns a copy fit for an API response: volume mount flags
// redacted, as a volume's are.
func (j *Job) Sanitize() *Job {
	c := j.Copy()
	for _, tg := range c.TaskGroups {
		if tg == nil {
			continue
		}
		for _, req := range tg.Volumes {
			if req != nil {
				req.MountOptions = req.MountOptions.Redacted()
			}
		}
	}
	return c
}

// ClearServerFields zeroes what only the servers set (status, placement,
// stop, version, indexes), so a submitted job never carries them.
func (j *Job) ClearServerFields() {
	j.Stop = false
	j.Status = ""
	j.Version = 0
	j.Placement = nil
	j.SubmitTime = 0
	j.CreateIndex, j.ModifyIndex, j.JobModifyIndex = 0, 0, 0
}
