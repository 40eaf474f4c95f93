package state

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// TestJobVersionAfter: the dry run of UpsertJob's versioning agrees with
// what UpsertJob does, for a new job, the same job, a scaled job, a changed
// job and a stopped one registered again.
func TestJobVersionAfter(t *testing.T) {
	s := TestStateStore(t)
	check := func(name string, index uint64, job *structs.Job) {
		t.Helper()
		existing, err := s.JobByID(nil, job.Namespace, job.ID)
		must.NoError(t, err)
		version, changes := JobVersionAfter(existing, job)
		must.NoError(t, s.UpsertJob(index, int64(index), job))
		stored, err := s.JobByID(nil, job.Namespace, job.ID)
		must.NoError(t, err)
		must.Eq(t, stored.Version, version, must.Sprint(name))
		must.Eq(t, changes, stored.JobModifyIndex == index, must.Sprint(name))
	}
	check("new", 10, testJob("web"))
	check("same", 11, testJob("web"))
	scaled := testJob("web")
	scaled.TaskGroups[0].Count = 5
	check("scaled", 12, scaled)
	changed := testJob("web")
	changed.TaskGroups[0].Tasks[0].Config.Args = []string{"x"}
	check("changed", 13, changed)
	must.NoError(t, s.DeregisterJob(14, 14, "default", "web", false))
	check("stopped, registered again", 15, changed.Copy())
}
