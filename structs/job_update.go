package structs

// UpdateStrategy is a job's or group's update block, Nomad's: how the
// allocations of an older job version are replaced by those of a new one.
// volplane honours MaxParallel only (Nomad's other fields, health checks,
// canaries and deadlines, are accepted from Nomad's API and ignored).
type UpdateStrategy struct {
	// MaxParallel is how many allocations of a group are replaced at a
	// time: an old allocation is stopped only while fewer than MaxParallel
	// replacements are not yet healthy. 0 replaces them all at once.
	MaxParallel int
}

// DefaultUpdateMaxParallel is max_parallel when an update block leaves it
// out, as Nomad's.
const DefaultUpdateMaxParallel = 1

// Copy returns a copy.
func (u *UpdateStrategy) Copy() *UpdateStrategy {
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

// MaxParallel is how many of the group's allocations of an older job
// version may be replaced at a time (see UpdateStrategy): the group's update
// block's max_parallel; without one, 1 for a group that runs a CSI plugin
// (replacing every instance of a plugin at once would leave its volumes
// with no node plugin to unpublish them, and a node with none to publish
// them) and 0, all at once, for any other group. Job.Canonicalize gives
// groups the job's update block when they have none.
func (tg *TaskGroup) MaxParallel() int {
	if tg.Update != nil {
		return tg.Update.MaxParallel
	}
	if tg.RunsPlugin() {
		return DefaultUpdateMaxParallel
	}
	return 0
}

// RunsPlugin reports whether a task of the group is a CSI plugin.
func (tg *TaskGroup) RunsPlugin() bool {
	for _, t := range tg.Tasks {
		if t != nil && t.CSIPluginConfig != nil {
			return true
		}
	}
	return false
}

// canonicalizeUpdate gives each group without an update block the job's,
// as Nomad's API does, so that a group's MaxParallel is all the placer
// reads.
func (j *Job) canonicalizeUpdate() {
	if j.Update == nil {
		return
	}
	for _, tg := range j.TaskGroups {
		if tg != nil && tg.Update == nil {
			tg.Update = j.Update.Copy()
		}
	}
}

func validateUpdate(m *MultiError, where string, u *UpdateStrategy) {
	if u != nil && u.MaxParallel < 0 {
		m.Add("%s: update max_parallel must not be negative, not %d", where, u.MaxParallel)
	}
}
