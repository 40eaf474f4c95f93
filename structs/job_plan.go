package structs

// JobPlanRequest asks what registering a job would do, without doing it.
type JobPlanRequest struct {
	Job *Job
	WriteRequest
}

// JobPlanResponse is what a registration of the job would do now: per
// group, the allocations it would place, stop and leave alone, and the
// placement explanation the placer would give.
type JobPlanResponse struct {
	// Existing is the job as registered now, nil for a new job.
	Existing *Job
	// Job is the job as it would be registered (canonicalized, with the
	// version it would get).
	Job *Job
	// Groups are the changes per task group.
	Groups    map[string]*GroupPlanUpdates
	Placement map[string]*GroupPlacement
	// JobModifyIndex is the existing job's (0 for a new job).
	JobModifyIndex uint64
	Warnings       []string
	QueryMeta
}

// GroupPlanUpdates counts what a plan does to one group's allocations.
type GroupPlanUpdates struct {
	Place  int
	Stop   int
	Ignore int
}
