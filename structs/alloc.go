package structs

// Allocation desired statuses (what the servers want).
const (
	AllocDesiredStatusRun   = "run"
	AllocDesiredStatusStop  = "stop"
	AllocDesiredStatusEvict = "evict"
)

// Allocation client statuses (what the client reports).
const (
	AllocClientStatusPending  = "pending"
	AllocClientStatusRunning  = "running"
	AllocClientStatusComplete = "complete"
	AllocClientStatusFailed   = "failed"
	AllocClientStatusLost     = "lost"
)

// Allocation is one placed instance of a job's task group.
type Allocation struct {
	ID        string
	Namespace string
	// Name is "job.group[N]"; N is the index per_alloc volume IDs use.
	Name      string
	JobID     string
	TaskGroup string
	NodeID    string

	// JobVersion is the version of the job the allocation runs.
	JobVersion uint64

	DesiredStatus      string
	DesiredDescription string
	ClientStatus       string
	ClientDescription  string

	// VolumeStates are the client's progress with each of the group's
	// volumes, by alias, as the client last reported them.
	VolumeStates map[string]*AllocVolumeState

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  int64
	ModifyTime  int64
}

// Copy returns a deep copy.
func (a *Allocation) Copy() *Allocation {
	if a == nil {
		return nil
	}
	c := *a
	if a.VolumeStates != nil {
		c.VolumeStates = make(map[string]*AllocVolumeState, len(a.VolumeStates))
		for k, v := range a.VolumeStates {
			vc := *v
			c.VolumeStates[k] = &vc
		}
	}
	return &c
}

// Steps a client reports for an allocation's volume.
const (
	AllocVolumeStepClaiming  = "claiming"
	AllocVolumeStepClaimed   = "claimed"
	AllocVolumeStepStaged    = "staged"
	AllocVolumeStepPublished = "published"
	AllocVolumeStepFailed    = "failed"
)

// AllocVolumeState is a client's progress with one volume of an
// allocation: the step reached and, while it waits, why and until when.
type AllocVolumeState struct {
	VolumeID string
	Step     string
	// Waiting says why the client has not reached the next step, e.g. the
	// claim error naming the allocation whose claim it waits for.
	Waiting   string
	Attempts  int
	NextRetry int64
	UpdatedAt int64
}

// ClientTerminal reports whether the client has finished with the
// allocation: its task no longer runs, so its volumes may be released.
func (a *Allocation) ClientTerminal() bool {
	switch a.ClientStatus {
	case AllocClientStatusComplete, AllocClientStatusFailed, AllocClientStatusLost:
		return true
	}
	return false
}

// ServerTerminal reports whether the servers want the allocation stopped.
func (a *Allocation) ServerTerminal() bool {
	return a.DesiredStatus == AllocDesiredStatusStop || a.DesiredStatus == AllocDesiredStatusEvict
}

// Terminal reports whether the allocation is terminal on either side.
func (a *Allocation) Terminal() bool { return a.ClientTerminal() || a.ServerTerminal() }

// AllocUpdateRequest writes allocations (placement and status updates).
type AllocUpdateRequest struct {
	Allocs []*Allocation
	// Timestamp is stamped by the leader before the Raft apply.
	Timestamp int64
	WriteRequest
}

// NodeClientAllocsRequest is a client asking for the allocations placed on
// its node, usually as a blocking query.
type NodeClientAllocsRequest struct {
	NodeID   string
	SecretID string
	QueryOptions
}

// NodeClientAllocsResponse carries the node's allocations and the jobs they
// belong to (keyed by namespace + "/" + job ID), which the client needs to
// run them.
type NodeClientAllocsResponse struct {
	Allocs []*Allocation
	Jobs   map[string]*Job
	QueryMeta
}

// JobKey is the key of a job in NodeClientAllocsResponse.Jobs.
func JobKey(namespace, jobID string) string { return namespace + "/" + jobID }

// AllocClientUpdate is what a client reports about one allocation.
type AllocClientUpdate struct {
	ID                string
	ClientStatus      string
	ClientDescription string
	VolumeStates      map[string]*AllocVolumeState
}

// NodeUpdateAllocRequest is a client reporting its allocations' status.
type NodeUpdateAllocRequest struct {
	NodeID   string
	SecretID string
	Allocs   []*AllocClientUpdate
	WriteRequest
}
