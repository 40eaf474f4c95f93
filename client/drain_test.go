package client

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/clienttest"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// A drain stops every allocation (its tasks are gone), and the servers
// release its volumes as for any stop: node unpublish and unstage, then
// controller unpublish and the claim freed, before the drain returns.
// Nothing is started afterwards.
func TestDrainAllocations_StopsTasksAndServersRelease(t *testing.T) {
	t.Parallel()
	srv, e, c := newOneClientEnv(t, nil)
	ext := e.createVolume(srv, "drained")
	registerJob(t, srv, writerJob("drained", 1, "drained", false, taskScript))
	a := waitAllocs(t, srv, "drained", 1, clientStatus(structs.AllocClientStatusRunning))["drained.g[0]"]
	must.SliceNotEmpty(t, clienttest.ProcessesUnder(e.dataDirs[0]), must.Sprint("the task runs"))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must.NoError(t, c.DrainAllocations(ctx, 30*time.Second))

	must.SliceEmpty(t, clienttest.ProcessesUnder(e.dataDirs[0]), must.Sprint("no task or shim is left"))
	must.SliceEmpty(t, c.Usage().All(), must.Sprint("no volume is left published on the node"))
	st, _ := c.AllocState(a.ID)
	must.Eq(t, structs.AllocClientStatusComplete, st.ClientStatus)
	must.Eq(t, "tasks stopped: "+drainStopReason, st.ClientDescription)
	vol, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, "drained")
	must.NoError(t, err)
	must.False(t, vol.InUse(), must.Sprint("the claim is freed"))
	methods := slices.Compact(methodsFor(t, e.stateDir, ext))
	must.Eq(t, []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"}, methods[len(methods)-3:])

	// The servers replace the service job's allocation; it is not started.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		all, err := srv.State().AllocsByJob(nil, structs.DefaultNamespace, "drained")
		return len(all) == 2, fmt.Errorf("%d allocations, %v", len(all), err)
	})
	must.Eq(t, []string{a.ID}, c.AllocIDs(), must.Sprint("the replacement is not taken up"))
	must.SliceEmpty(t, clienttest.ProcessesUnder(e.dataDirs[0]))
}

// With the servers gone, a drain still stops the tasks and, once its wait
// for the servers is over, unpublishes and unstages the volumes itself.
func TestDrainAllocations_DetachesWhatTheServersDoNot(t *testing.T) {
	t.Parallel()
	srv, e, c := newOneClientEnv(t, nil)
	ext := e.createVolume(srv, "orphan")
	registerJob(t, srv, writerJob("orphan", 1, "orphan", false, taskScript))
	a := waitAllocs(t, srv, "orphan", 1, clientStatus(structs.AllocClientStatusRunning))["orphan.g[0]"]
	u, ok := c.Usage().Get(a.ID, "orphan")
	must.True(t, ok)
	must.NoError(t, srv.Shutdown())

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	must.NoError(t, c.DrainAllocations(ctx, 200*time.Millisecond))

	must.SliceEmpty(t, clienttest.ProcessesUnder(e.dataDirs[0]), must.Sprint("no task or shim is left"))
	must.SliceEmpty(t, c.Usage().All(), must.Sprint("no volume is left published on the node"))
	unpublish := callsFor(t, e.stateDir, "NodeUnpublishVolume", ext)
	unstage := callsFor(t, e.stateDir, "NodeUnstageVolume", ext)
	must.Len(t, 1, unpublish)
	must.Len(t, 1, unstage)
	must.Eq(t, u.TargetPath, unpublish[0].TargetPath)
	must.Eq(t, u.StagingPath, unstage[0].StagingPath)
}
