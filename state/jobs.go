package state

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func jobsTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableJobs,
		Indexes: map[string]*memdb.IndexSchema{
			// Job IDs are unique per namespace.
			indexID: {
				Name:   indexID,
				Unique: true,
				Indexer: &memdb.CompoundIndex{Indexes: []memdb.Indexer{
					&memdb.StringFieldIndex{Field: "Namespace"},
					&memdb.StringFieldIndex{Field: "ID"},
				}},
			},
		},
	}
}

// UpsertJob registers a job or a new version of it; the job must pass
// structs.Job.Validate. Each registration that changes the job's
// specification bumps its Version and JobModifyIndex; the placement
// explanation and the stop flag of a stopped job re-registered are reset,
// so the placer looks at it afresh.
func (s *StateStore) UpsertJob(index uint64, now int64, job *structs.Job) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if err := upsertJobTxn(txn, index, now, job); err != nil {
		return err
	}
	return commit(txn, index)
}

func upsertJobTxn(txn *memdb.Txn, index uint64, now int64, job *structs.Job) error {
	if job == nil || job.ID == "" || job.Namespace == "" {
		return structs.ErrInvalid("job upsert: missing job, job ID or namespace")
	}
	// The rules the endpoint checked before the write, on the job as the
	// endpoint canonicalized it; the placer and the claim path rely on
	// them (a single-node volume shared by a group's allocations, say).
	if err := job.Validate(); err != nil {
		return err
	}
	existing, err := jobByIDTxn(txn, nil, job.Namespace, job.ID)
	if err != nil {
		return err
	}
	j := job.Copy()
	j.Placement, j.Stop = nil, false
	j.ModifyIndex, j.JobModifyIndex = index, index
	j.SubmitTime = now
	if existing == nil {
		if err := namespaceExistsTxn(txn, "job", j.ID, j.Namespace); err != nil {
			return err
		}
		j.CreateIndex, j.Version = index, 0
		j.Status = structs.JobStatusPending
		return insertJobTxn(txn, j)
	}
	if !existing.Stop && reflect.DeepEqual(existing.TaskGroups, j.TaskGroups) &&
		reflect.DeepEqual(existing.Update, j.Update) && existing.Type == j.Type && existing.Name == j.Name {
		// The same specification again: nothing to do.
		return nil
	}
	j.CreateIndex = existing.CreateIndex
	j.Version = existing.Version
	if existing.Stop || existing.Type != j.Type || !sameExceptCounts(existing.TaskGroups, j.TaskGroups) {
		// A new version replaces the allocations of the old one; scaling a
		// group up or down is not one, so running allocations stay.
		j.Version++
	}
	j.Status = existing.Status
	if j.Status == structs.JobStatusDead {
		j.Status = structs.JobStatusPending
	}
	return insertJobTxn(txn, j)
}

// JobVersionAfter is the version job would have once registered over
// existing (nil for a new job), and whether the registration would change
// anything: the rule UpsertJob applies, for a dry run (a plan).
func JobVersionAfter(existing, job *structs.Job) (uint64, bool) {
	if existing == nil {
		return 0, true
	}
	// Compared as UpsertJob compares them: both as copies, whose empty
	// lists are all non-nil.
	job = job.Copy()
	if !existing.Stop && reflect.DeepEqual(existing.TaskGroups, job.TaskGroups) &&
		reflect.DeepEqual(existing.Update, job.Update) && existing.Type == job.Type && existing.Name == job.Name {
		return existing.Version, false
	}
	if existing.Stop || existing.Type != job.Type || !sameExceptCounts(existing.TaskGroups, job.TaskGroups) {
		return existing.Version + 1, true
	}
	return existing.Version, true
}

// sameExceptCounts reports whether two versions of a job's groups differ at
// most in their counts and update blocks: neither changes what an
// allocation runs, so neither replaces allocations (as in Nomad, where an
// update block's change is not destructive).
func sameExceptCounts(a, b []*structs.TaskGroup) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i].Copy(), b[i].Copy()
		x.Count, y.Count = 0, 0
		x.Update, y.Update = nil, nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// DeregisterJob stops a job: its allocations get the stop desired status in
// the same write. With purge the job is removed as well.
func (s *StateStore) DeregisterJob(index uint64, now int64, namespace, id string, purge bool) error {
	txn := s.writeTxn()
	defer txn.Abort()
	job, err := jobByIDTxn(txn, nil, namespace, id)
	if err != nil {
		return err
	}
	if job == nil {
		return structs.ErrNotFound("job %q not found", id)
	}
	allocs, err := collectAllocs(txn, nil, indexJob, namespace, id)
	if err != nil {
		return err
	}
	why := "job stopped"
	if purge {
		why = "job purged"
	}
	for _, a := range allocs {
		if a.ServerTerminal() {
			continue
		}
		c := a.Copy()
		c.DesiredStatus = structs.AllocDesiredStatusStop
		c.DesiredDescription = why
		c.ModifyTime = now
		if err := upsertAllocTxn(txn, index, c); err != nil {
			return err
		}
	}
	if purge {
		if err := txn.Delete(TableJobs, job); err != nil {
			return fmt.Errorf("state: deleting job %q: %w", id, err)
		}
		return commit(txn, index)
	}
	if !job.Stop {
		j := job.Copy()
		j.Stop = true
		j.Status = jobStatus(j, allocs, true)
		j.ModifyIndex = index
		if err := insertJobTxn(txn, j); err != nil {
			return err
		}
	}
	return commit(txn, index)
}

// ApplyPlan writes what the placer decided for a job: new and stopped
// allocations and the job's placement explanation. A plan computed for an
// older version of the job, or for a job gone since, is refused, so a slow
// placer never undoes a newer registration. Each allocation is checked
// against the state as it is in this write, in the plan's order (a plan
// stops the allocations it replaces before it places their successors):
// an existing one may only be stopped (structs.Allocation.MergePlanUpdate,
// which keeps what its client reported since the plan was computed); a new
// one must pass structs.Allocation.CheckNew, go to a node that exists and
// is not down, and take a slot no live allocation of the job holds, so no
// two plans, even from two leaders, can place one slot twice or more
// allocations than the group's count. Refusals that come from the state
// having moved on are conflicts, which tell the placer to look again.
func (s *StateStore) ApplyPlan(index uint64, req *structs.PlanApplyRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	job, err := jobByIDTxn(txn, nil, req.Namespace, req.JobID)
	if err != nil {
		return err
	}
	if job == nil {
		return structs.NewError(structs.ErrCodeConflict, "plan for job %q: the job no longer exists", req.JobID)
	}
	if job.JobModifyIndex != req.JobModifyIndex {
		return structs.NewError(structs.ErrCodeConflict, "plan for job %q was computed for version index %d; the job is at %d",
			req.JobID, req.JobModifyIndex, job.JobModifyIndex)
	}
	for name, gp := range req.Placement {
		if gp == nil {
			return structs.ErrInvalid("plan for job %q: empty placement of group %q", req.JobID, name)
		}
	}
	slots, err := liveSlotsTxn(txn, job)
	if err != nil {
		return err
	}
	for _, a := range req.Allocs {
		if a == nil {
			return structs.ErrInvalid("plan for job %q: empty allocation", req.JobID)
		}
		if a.JobID != req.JobID || a.Namespace != req.Namespace {
			return structs.ErrInvalid("plan for job %q carries allocation %q of job %q", req.JobID, a.ID, a.JobID)
		}
		existing, err := allocByIDTxn(txn, nil, a.ID)
		if err != nil {
			return err
		}
		write := a
		if existing != nil {
			if write, err = existing.MergePlanUpdate(a); err != nil {
				return err
			}
			write.ModifyTime = a.ModifyTime
			if write.Terminal() {
				slots.free(job, existing)
			}
		} else if err := checkPlacementTxn(txn, job, a, slots); err != nil {
			return err
		}
		if err := upsertAllocTxn(txn, index, write); err != nil {
			return err
		}
	}
	if err := refreshJobTxn(txn, index, job, req.Placement); err != nil {
		return err
	}
	return commit(txn, index)
}

// jobSlots maps each slot of a job that live allocations hold to their
// IDs (more than one only in a state written before slots were checked). A
// slot is a group's allocation name for service and batch jobs and the
// group on a node for system and sysbatch jobs.
type jobSlots map[[2]string][]string

func slotOf(job *structs.Job, a *structs.Allocation) [2]string {
	if job.IsSystem() {
		return [2]string{a.TaskGroup, a.NodeID}
	}
	return [2]string{a.TaskGroup, a.Name}
}

func (s jobSlots) free(job *structs.Job, a *structs.Allocation) {
	k := slotOf(job, a)
	s[k] = slices.DeleteFunc(s[k], func(id string) bool { return id == a.ID })
	if len(s[k]) == 0 {
		delete(s, k)
	}
}

// liveSlotsTxn returns the slots the job's live (not terminal) allocations
// hold.
func liveSlotsTxn(txn *memdb.Txn, job *structs.Job) (jobSlots, error) {
	allocs, err := collectAllocs(txn, nil, indexJob, job.Namespace, job.ID)
	if err != nil {
		return nil, err
	}
	slots := jobSlots{}
	for _, a := range allocs {
		if !a.Terminal() {
			k := slotOf(job, a)
			slots[k] = append(slots[k], a.ID)
		}
	}
	return slots, nil
}

// checkPlacementTxn checks a new allocation of a plan and takes its slot.
func checkPlacementTxn(txn *memdb.Txn, job *structs.Job, a *structs.Allocation, slots jobSlots) error {
	if err := a.CheckNew(job); err != nil {
		return err
	}
	node, err := nodeByIDTxn(txn, nil, a.NodeID)
	if err != nil {
		return err
	}
	switch {
	case node == nil:
		return structs.ErrConflict("allocation %q: node %q is not registered", a.ID, a.NodeID)
	case node.Status == structs.NodeStatusDown:
		return structs.ErrConflict("allocation %q: node %q is down", a.ID, a.NodeID)
	}
	k := slotOf(job, a)
	if holders := slots[k]; len(holders) > 0 {
		return structs.ErrConflict("allocation %q: allocation %q holds %s already", a.ID, holders[0], describeSlot(job, a))
	}
	slots[k] = []string{a.ID}
	return nil
}

func describeSlot(job *structs.Job, a *structs.Allocation) string {
	if job.IsSystem() {
		return fmt.Sprintf("group %q's place on node %q", a.TaskGroup, a.NodeID)
	}
	return fmt.Sprintf("%q", a.Name)
}

// refreshJobTxn recomputes a job's status from its allocations and, when
// placement is not nil, replaces its placement explanation. It writes only
// what changed.
func refreshJobTxn(txn *memdb.Txn, index uint64, job *structs.Job, placement map[string]*structs.GroupPlacement) error {
	allocs, err := collectAllocs(txn, nil, indexJob, job.Namespace, job.ID)
	if err != nil {
		return err
	}
	j := job.Copy()
	if placement != nil {
		j.Placement = map[string]*structs.GroupPlacement{}
		for k, v := range placement {
			c := *v
			j.Placement[k] = &c
		}
	}
	j.Status = jobStatus(j, allocs, j.Stop)
	if j.Status == job.Status && placementEqual(j.Placement, job.Placement) {
		return nil
	}
	j.ModifyIndex = index
	return insertJobTxn(txn, j)
}

func placementEqual(a, b map[string]*structs.GroupPlacement) bool {
	return maps.EqualFunc(a, b, func(x, y *structs.GroupPlacement) bool {
		return x.Desired == y.Desired && x.Placed == y.Placed && reflect.DeepEqual(x.Blocked, y.Blocked) &&
			reflect.DeepEqual(x.Waiting, y.Waiting)
	})
}

// jobStatus derives a job's status: dead once stopped (or a batch job
// finished) with nothing left running, running while an allocation runs or
// waits to, pending before that.
func jobStatus(job *structs.Job, allocs []*structs.Allocation, stopped bool) string {
	live := 0
	for _, a := range allocs {
		if !a.ClientTerminal() && !(a.ServerTerminal() && a.ClientStatus == structs.AllocClientStatusPending) {
			live++
		}
	}
	switch {
	case stopped && live == 0:
		return structs.JobStatusDead
	case live > 0:
		return structs.JobStatusRunning
	}
	return structs.JobStatusPending
}

func insertJobTxn(txn *memdb.Txn, j *structs.Job) error {
	if err := txn.Insert(TableJobs, j); err != nil {
		return fmt.Errorf("state: writing job %q: %w", j.ID, err)
	}
	return nil
}

// JobByID returns the job, or nil when it is unknown.
func (s *StateStore) JobByID(ws memdb.WatchSet, namespace, id string) (*structs.Job, error) {
	return jobByIDTxn(s.db.Txn(false), ws, namespace, id)
}

func jobByIDTxn(txn *memdb.Txn, ws memdb.WatchSet, namespace, id string) (*structs.Job, error) {
	ch, raw, err := txn.FirstWatch(TableJobs, indexID, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading job %q: %w", id, err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Job), nil
}

// Jobs iterates over every job (*structs.Job), by namespace and ID.
func (s *StateStore) Jobs(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableJobs, indexID)
}

// JobsByIDPrefix iterates over a namespace's jobs whose ID starts with
// prefix.
func (s *StateStore) JobsByIDPrefix(ws memdb.WatchSet, namespace, prefix string) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableJobs, indexIDPrefix, namespace, prefix)
}

// JobRestore restores one job from a snapshot.
func (r *StateRestore) JobRestore(j *structs.Job) error {
	return insertJobTxn(r.txn, j)
}
