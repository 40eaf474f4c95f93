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

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  int64
	ModifyTime  int64
}

// Copy returns a copy.
func (a *Allocation) Copy() *Allocation {
	if a == nil {
		return nil
	}
	c := *a
	return &c
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
