package state

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestUpsertAllocs(t *testing.T) {
	s := TestStateStore(t)
	a1 := testAlloc("a1", "n1")
	a1.CreateTime, a1.ModifyTime = 100, 100
	a2 := testAlloc("a2", "n2")
	a3 := testAlloc("a3", "n1")
	a3.JobID = "other"
	pending := testAlloc("a4", "") // not placed yet
	must.NoError(t, s.UpsertAllocs(10, []*structs.Allocation{a1, a2, a3, pending}))

	got, err := s.AllocsByNode(nil, "n1")
	must.NoError(t, err)
	must.Len(t, 2, got)
	must.Eq(t, "a1", got[0].ID)
	must.Eq(t, "a3", got[1].ID)

	got, err = s.AllocsByJob(nil, ns, "web")
	must.NoError(t, err)
	must.Len(t, 3, got)
	got, err = s.AllocsByJob(nil, "other-ns", "web")
	must.NoError(t, err)
	must.Len(t, 0, got)

	// Only a time differs: nothing is written.
	same := a1.Copy()
	same.ModifyTime = 200
	must.NoError(t, s.UpsertAllocs(11, []*structs.Allocation{same}))
	mustIndex(t, s, TableAllocs, 10)

	upd := a1.Copy()
	upd.ClientStatus = structs.AllocClientStatusComplete
	upd.CreateTime, upd.ModifyTime = 300, 300
	must.NoError(t, s.UpsertAllocs(12, []*structs.Allocation{upd}))
	a, err := s.AllocByID(nil, "a1")
	must.NoError(t, err)
	must.True(t, a.Terminal())
	must.Eq(t, uint64(10), a.CreateIndex)
	must.Eq(t, uint64(12), a.ModifyIndex)
	must.Eq(t, int64(100), a.CreateTime)
	must.Eq(t, int64(300), a.ModifyTime)
	mustIndex(t, s, TableAllocs, 12)

	mustCode(t, s.UpsertAllocs(13, []*structs.Allocation{{}}), structs.ErrCodeInvalid)
	a, err = s.AllocByID(nil, "nope")
	must.NoError(t, err)
	must.Nil(t, a)
}
