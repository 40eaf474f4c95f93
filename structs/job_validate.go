package structs

import (
	"fmt"
	"maps"
	"slices"
)

// TaskDriverExec is the one task driver: it runs a command on the node.
const TaskDriverExec = "exec"

// Bounds on the size of a job, so that no caller can make a server hold or
// compute without limit. A group's count is bounded again, lower, by the
// server's configuration (DefaultMaxGroupCount); MaxGroupCountCeiling is the
// highest that setting may be and what every replica checks.
const (
	DefaultMaxGroupCount = 10_000
	MaxGroupCountCeiling = 100_000
	MaxGroupsPerJob      = 100
	MaxTasksPerGroup     = 100
	MaxVolumesPerGroup   = 100
	MaxMountsPerTask     = 100
	MaxArgsPerTask       = 1_000
)

// Canonicalize fills in the defaults of a job as submitted, so that the
// rest of the system never has to guess: the default namespace, type
// service, the name from the ID, a count of 1 for groups of service and
// batch jobs that give none (0 stands for "not given": a job's allocations
// are stopped with a job stop, not with count 0), each volume request's
// name from its alias, private mount propagation, and the job's update
// block for groups that have none. The volume type is
// not defaulted: a volume block must say it is "csi". It is safe to call
// more than once.
func (j *Job) Canonicalize() {
	if j == nil {
		return
	}
	if j.Namespace == "" {
		j.Namespace = DefaultNamespace
	}
	if j.Type == "" {
		j.Type = JobTypeService
	}
	if j.Name == "" {
		j.Name = j.ID
	}
	j.canonicalizeUpdate()
	for _, tg := range j.TaskGroups {
		if tg == nil {
			continue
		}
		if tg.Count == 0 && !j.IsSystem() {
			tg.Count = 1
		}
		for alias, req := range tg.Volumes {
			if req != nil && req.Name == "" {
				req.Name = alias
			}
		}
		for _, task := range tg.Tasks {
			if task == nil {
				continue
			}
			for _, m := range task.VolumeMounts {
				if m != nil && m.PropagationMode == "" {
					m.PropagationMode = VolumeMountPropagationPrivate
				}
			}
			if task.CSIPluginConfig != nil {
				task.CSIPluginConfig.Canonicalize()
			}
		}
	}
}

// Validate checks a job as it is registered and returns one invalid error
// that lists every problem, each naming the group, and the volume or task,
// it is about; nil when there is none. It expects a canonicalized job.
func (j *Job) Validate() error {
	var m MultiError
	m.AddErr(ValidateID("job id", j.ID))
	if j.Namespace == "" {
		m.Add("missing namespace")
	}
	if len(j.Name) > MaxNameLength {
		m.Add("name is longer than %d characters", MaxNameLength)
	}
	switch j.Type {
	case JobTypeService, JobTypeBatch, JobTypeSystem, JobTypeSysBatch:
	case "":
		m.Add("missing job type")
	default:
		m.Add("unknown job type %q: must be one of %q, %q, %q or %q",
			j.Type, JobTypeService, JobTypeBatch, JobTypeSystem, JobTypeSysBatch)
	}

	validateUpdate(&m, "job", j.Update)
	if len(j.TaskGroups) == 0 {
		m.Add("job has no task groups")
	}
	if len(j.TaskGroups) > MaxGroupsPerJob {
		m.Add("job has %d task groups; the limit is %d", len(j.TaskGroups), MaxGroupsPerJob)
		return m.ErrorOrNil(fmt.Sprintf("job %q validation failed", j.ID))
	}
	seen := map[string]bool{}
	for i, tg := range j.TaskGroups {
		if tg == nil {
			m.Add("task group %d is empty", i+1)
			continue
		}
		if tg.Name != "" {
			if seen[tg.Name] {
				m.Add("group %q is defined more than once", tg.Name)
				continue
			}
			seen[tg.Name] = true
		}
		j.validateGroup(&m, i, tg)
	}

	subject := "job"
	if j.ID != "" {
		subject = fmt.Sprintf("job %q", j.ID)
	}
	return m.ErrorOrNil(subject + " validation failed")
}

// validateGroup adds the problems of one task group, each prefixed with the
// group's name.
func (j *Job) validateGroup(m *MultiError, i int, tg *TaskGroup) {
	where := fmt.Sprintf("group %q", tg.Name)
	if tg.Name == "" {
		where = fmt.Sprintf("task group %d", i+1)
		m.Add("%s: missing group name", where)
	} else if err := ValidateID("group name", tg.Name); err != nil {
		m.Add("%s: %s", where, MessageOf(err))
	}
	// System and sysbatch jobs place one allocation per eligible node, so
	// their count means nothing and is not checked.
	if !j.IsSystem() && tg.Count < 0 {
		m.Add("%s: count must not be negative, not %d", where, tg.Count)
	}
	if tg.Count > MaxGroupCountCeiling {
		m.Add("%s: count %d is over the limit of %d", where, tg.Count, MaxGroupCountCeiling)
	}
	validateUpdate(m, where, tg.Update)
	if len(tg.Tasks) > MaxTasksPerGroup {
		m.Add("%s: %d tasks; the limit is %d", where, len(tg.Tasks), MaxTasksPerGroup)
		return
	}
	if len(tg.Volumes) > MaxVolumesPerGroup {
		m.Add("%s: %d volumes; the limit is %d", where, len(tg.Volumes), MaxVolumesPerGroup)
		return
	}

	for _, alias := range slices.Sorted(maps.Keys(tg.Volumes)) {
		j.validateVolume(m, fmt.Sprintf("%s volume %q", where, alias), alias, tg, tg.Volumes[alias])
	}

	if len(tg.Tasks) == 0 {
		m.Add("%s: group has no tasks", where)
	}
	tasks := map[string]bool{}
	for k, task := range tg.Tasks {
		if task == nil {
			m.Add("%s: task %d is empty", where, k+1)
			continue
		}
		twhere := fmt.Sprintf("%s task %q", where, task.Name)
		switch {
		case task.Name == "":
			twhere = fmt.Sprintf("%s task %d", where, k+1)
			m.Add("%s: missing task name", twhere)
		case tasks[task.Name]:
			m.Add("%s: task is defined more than once", twhere)
			continue
		}
		tasks[task.Name] = true
		validateTask(m, twhere, tg, task)
	}
}

// validateVolume adds the problems of one volume request. Most of the rules
// exist because the scheduler checks each placement only against claims
// already written: two allocations of one plan are not counted against each
// other, so a group whose own allocations would contend for a single-node
// or single-writer volume is refused here, at registration.
func (j *Job) validateVolume(m *MultiError, where, alias string, tg *TaskGroup, req *VolumeRequest) {
	if req == nil {
		m.Add("%s: volume is empty", where)
		return
	}
	if req.Name != alias {
		m.Add("%s: volume name %q does not match its alias", where, req.Name)
	}
	if req.Type != VolumeTypeCSI {
		m.Add("%s: volume has unrecognized type %q: the only type is %q", where, req.Type, VolumeTypeCSI)
	}
	if req.Source == "" {
		m.Add("%s: volume has an empty source", where)
	} else if err := ValidateID("volume source", req.Source); err != nil {
		// A source that could never be a volume ID is a typo worth
		// reporting now rather than as a group that never gets placed.
		m.Add("%s: %s", where, MessageOf(err))
	}
	if req.PerAlloc && j.IsSystem() {
		// Allocations of system jobs are not numbered 0..count-1 in a way an
		// operator can create volumes for in advance.
		m.Add("%s: volume cannot be per_alloc for system or sysbatch jobs", where)
	}

	switch {
	case req.AttachmentMode == CSIVolumeAttachmentModeUnknown:
		m.Add("%s: CSI volumes must have an attachment mode", where)
	case !req.AttachmentMode.Valid():
		m.Add("%s: unknown attachment mode %q: must be %q or %q", where, req.AttachmentMode,
			CSIVolumeAttachmentModeFilesystem, CSIVolumeAttachmentModeBlockDevice)
	case req.AttachmentMode == CSIVolumeAttachmentModeBlockDevice && hasMountOptions(req.MountOptions):
		m.Add("%s: block devices cannot have mount options", where)
	}

	// Several allocations of this group would claim the same volume only
	// when there are several and the volume is not per_alloc.
	shared := !j.IsSystem() && tg.Count > 1 && !req.PerAlloc
	switch req.AccessMode {
	case CSIVolumeAccessModeUnknown:
		m.Add("%s: CSI volumes must have an access mode", where)
	case CSIVolumeAccessModeSingleNodeReader:
		if !req.ReadOnly {
			m.Add("%s: single-node-reader-only volumes must be read-only", where)
		}
		if shared {
			m.Add("%s: volume with single-node-reader-only access mode allows only one reader", where)
		}
	case CSIVolumeAccessModeSingleNodeWriter:
		if shared {
			m.Add("%s: volume with single-node-writer access mode allows only one reader or writer", where)
		}
	case CSIVolumeAccessModeMultiNodeReader:
		if !req.ReadOnly {
			m.Add("%s: multi-node-reader-only volumes must be read-only", where)
		}
	case CSIVolumeAccessModeMultiNodeSingleWriter:
		if !req.ReadOnly && shared {
			m.Add("%s: volume with multi-node-single-writer access mode allows only one writer", where)
		}
	case CSIVolumeAccessModeMultiNodeMultiWriter:
		// Any number of readers and writers.
	default:
		m.Add("%s: unknown access mode %q", where, req.AccessMode)
	}
}

func hasMountOptions(o *CSIMountOptions) bool {
	return o != nil && (o.FSType != "" || o.HasFlags())
}

// validateTask adds the problems of one task and its volume mounts.
func validateTask(m *MultiError, where string, tg *TaskGroup, task *Task) {
	if len(task.VolumeMounts) > MaxMountsPerTask {
		m.Add("%s: %d volume mounts; the limit is %d", where, len(task.VolumeMounts), MaxMountsPerTask)
		return
	}
	if len(task.Config.Args) > MaxArgsPerTask {
		m.Add("%s: %d arguments; the limit is %d", where, len(task.Config.Args), MaxArgsPerTask)
	}
	switch task.Driver {
	case TaskDriverExec:
		if task.Config.Command == "" {
			m.Add("%s: the exec driver needs a command in the task config", where)
		}
	case "":
		m.Add("%s: missing driver", where)
	default:
		m.Add("%s: unknown driver %q: the only driver is %q", where, task.Driver, TaskDriverExec)
	}

	if task.CSIPluginConfig != nil {
		task.CSIPluginConfig.validate(m, where)
	}

	// Mounts are numbered from 1, as capabilities are in volume errors.
	for k, vm := range task.VolumeMounts {
		n := k + 1
		if vm == nil {
			m.Add("%s: Volume Mount (%d) is empty", where, n)
			continue
		}
		req, ok := tg.Volumes[vm.Volume]
		if !ok || req == nil {
			m.Add("%s: Volume Mount (%d) references undefined volume %s", where, n, vm.Volume)
		}
		switch vm.PropagationMode {
		case "", VolumeMountPropagationPrivate, VolumeMountPropagationHostToTask:
		case VolumeMountPropagationBidirectional:
			// Bidirectional propagation lets the task's mounts reach the
			// host through the volume, which is a write to it.
			if vm.ReadOnly || (req != nil && req.ReadOnly) {
				m.Add("%s: Volume Mount (%d) is invalid: bidirectional propagation requires a read-write volume", where, n)
			}
		default:
			m.Add("%s: Volume Mount (%d) is invalid: volume mount has an invalid propagation mode: %q", where, n, vm.PropagationMode)
		}
	}
}
