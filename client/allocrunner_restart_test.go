package client

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"

	"github.com/volplane/volplane/client/execdriver"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// A per_alloc service job of count 3 over two clients gets vol[0]..vol[2]
// claimed and published, each task writing into its own volume. A client
// that is shut down and started again takes its allocations over: the
// same task processes, the same claims, and no second claim, stage or
// publish in the plugin's call log. Stopping the job stops the tasks, and
// the servers release every volume.
func TestAllocRunner_PerAllocAndClientRestart(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 3)
	leader := server.WaitForLeader(t, servers...)
	e := newAllocEnv(t, servers, 2)
	// Each client keeps one finished allocation, forgetting the others.
	keepOne := func(cfg *Config) { cfg.FinishedAllocsKept = 1 }
	clients := []*Client{e.startClient(0, keepOne), e.startClient(1, keepOne)}
	e.waitNodesHealthy(leader, 2)
	exts := map[string]string{}
	var extIDs []string
	for i := range 3 {
		id := fmt.Sprintf("vol[%d]", i)
		exts[id] = e.createVolume(leader, id)
		extIDs = append(extIDs, exts[id])
	}

	registerJob(t, leader, writerJob("web", 3, "vol", true, taskScript))
	allocs := waitAllocs(t, leader, "web", 3, clientStatus(structs.AllocClientStatusRunning))
	claimed := map[string]*structs.CSIVolumeClaim{}
	for i := range 3 {
		a := allocs[structs.AllocName("web", "g", i)]
		must.NotNil(t, a)
		volID := fmt.Sprintf("vol[%d]", i)
		must.Eq(t, a.Name, readHello(t, e.stateDir, exts[volID]), must.Sprintf("%s wrote into %s", a.Name, volID))
		vol, err := leader.State().CSIVolumeByID(nil, structs.DefaultNamespace, volID)
		must.NoError(t, err)
		claim := vol.WriteClaims[a.ID]
		must.NotNil(t, claim, must.Sprintf("%s holds the write claim on %s", a.Name, volID))
		must.Eq(t, a.NodeID, claim.NodeID)
		claimed[volID] = claim
	}
	// Each volume was staged and published once. A claim whose publish
	// context met a change of leader is taken again, and its controller
	// publish repeated (an idempotent call the plugin answers alike), so that
	// count is only at least one; what matters is that the restart below
	// adds none.
	oneEach := map[string]int{extIDs[0]: 1, extIDs[1]: 1, extIDs[2]: 1}
	published := countCalls(t, e.stateDir, "ControllerPublishVolume", extIDs...)
	must.MapContainsKeys(t, published, extIDs, must.Sprint("every volume was controller published"))
	for _, method := range []string{"NodeStageVolume", "NodePublishVolume"} {
		must.Eq(t, oneEach, countCalls(t, e.stateDir, method, extIDs...), must.Sprintf("one %s per volume", method))
	}

	// Restart the client that runs the most allocations.
	victim := 0
	if len(clients[1].AllocIDs()) > len(clients[0].AllocIDs()) {
		victim = 1
	}
	ids := clients[victim].AllocIDs()
	must.SliceNotEmpty(t, ids)
	pids := map[string]int{}
	for _, id := range ids {
		st, ok := clients[victim].AllocState(id)
		must.True(t, ok)
		must.Positive(t, st.Tasks["t"].PID)
		pids[id] = st.Tasks["t"].PID
	}
	must.NoError(t, clients[victim].Shutdown())
	restarted := e.startClient(victim, keepOne)
	must.Eq(t, ids, restarted.AllocIDs(), must.Sprint("the allocations are restored from the state file"))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		if restarted.allocs.Reconciled() == 0 {
			return false, fmt.Errorf("the restarted client has not heard from the servers yet")
		}
		for _, id := range ids {
			st, _ := restarted.AllocState(id)
			if st.Tasks["t"].State != state.TaskRunning || st.Tasks["t"].PID != pids[id] {
				return false, fmt.Errorf("allocation %s: task %+v, want running with PID %d", id, st.Tasks["t"], pids[id])
			}
		}
		return true, nil
	})
	must.Eq(t, published, countCalls(t, e.stateDir, "ControllerPublishVolume", extIDs...),
		must.Sprint("no controller publish after the restart"))
	for _, method := range []string{"NodeStageVolume", "NodePublishVolume"} {
		must.Eq(t, oneEach, countCalls(t, e.stateDir, method, extIDs...), must.Sprintf("no second %s after the restart", method))
	}
	for volID, before := range claimed {
		vol, err := leader.State().CSIVolumeByID(nil, structs.DefaultNamespace, volID)
		must.NoError(t, err)
		must.Eq(t, before, vol.WriteClaims[before.AllocationID], must.Sprintf("the claim on %s is unchanged", volID))
	}
	waitAllocs(t, leader, "web", 3, clientStatus(structs.AllocClientStatusRunning))

	// The restarted client still supervises what it took over: a task
	// that exits is reported.
	finishTask(t, restarted, ids[0])
	waitAlloc(t, leader, ids[0], clientStatus(structs.AllocClientStatusComplete))

	// Stopping the job stops every task (SIGTERM), and the servers
	// release every volume from the nodes and the controller. Each client
	// forgets all but its latest finished allocation.
	clients[victim] = restarted
	retryWrite(t, "stopping job web", func() error {
		return leader.RPC("Job.Deregister", &structs.JobDeregisterRequest{JobID: "web"}, &structs.JobDeregisterResponse{})
	})
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		for _, c := range clients {
			ids := c.AllocIDs()
			if len(ids) > 1 {
				return false, fmt.Errorf("client %s still knows allocations %v", c.NodeID(), ids)
			}
			for _, id := range ids {
				if st, _ := c.AllocState(id); len(st.Volumes) > 0 || st.ClientStatus != structs.AllocClientStatusComplete {
					return false, fmt.Errorf("client %s: allocation %s is %+v", c.NodeID(), id, st)
				}
			}
		}
		for volID := range claimed {
			vol, err := leader.State().CSIVolumeByID(nil, structs.DefaultNamespace, volID)
			if err != nil {
				return false, err
			}
			if vol.InUse() {
				return false, fmt.Errorf("volume %s is still claimed", volID)
			}
		}
		// Every allocation ends, a replacement placed for the one that
		// completed included: its client reports it stopped before it
		// started.
		all, err := leader.State().AllocsByJob(nil, structs.DefaultNamespace, "web")
		if err != nil {
			return false, err
		}
		for _, a := range all {
			if !a.ClientTerminal() {
				return false, fmt.Errorf("allocation %s is %s", a.Name, a.ClientStatus)
			}
		}
		return true, nil
	})
	// The release ran in the CSI order. A step whose checkpoint met a
	// change of leader is repeated (idempotent calls the plugin answers
	// alike), so repeats in a row count as one.
	for _, ext := range extIDs {
		got := slices.Compact(methodsFor(t, e.stateDir, ext))
		must.GreaterEq(t, 3, len(got), must.Sprintf("calls of %s: %v", ext, got))
		must.Eq(t, []string{"NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"}, got[len(got)-3:])
	}
}

// A client restarted while every server is down keeps its allocations: a
// task that still runs is taken over, a task that ended while the agent
// was down is seen to have ended; both without any server. When a server
// is back, the client reports what happened.
func TestAllocRunner_RestartWhileServersDown(t *testing.T) {
	t.Parallel()
	cfg := server.TestConfig(t)
	cfg.HeartbeatTTL, cfg.NodeGracePeriod, cfg.HTTPAddr = testTTL, testGrace, ""
	srv, err := server.NewServer(cfg)
	must.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown() })
	server.WaitForLeader(t, srv)
	e := newAllocEnv(t, []*server.Server{srv}, 1)
	c := e.startClient(0, nil)
	e.waitNodesHealthy(srv, 1)
	exts := []string{e.createVolume(srv, "kept[0]"), e.createVolume(srv, "kept[1]")}
	job := writerJob("kept", 2, "kept", true, taskScript)
	job.Type = structs.JobTypeBatch
	registerJob(t, srv, job)
	allocs := waitAllocs(t, srv, "kept", 2, clientStatus(structs.AllocClientStatusRunning))
	keeps, ends := allocs["kept.g[0]"], allocs["kept.g[1]"]
	for i, ext := range exts {
		must.Eq(t, fmt.Sprintf("kept.g[%d]", i), readHello(t, e.stateDir, ext))
	}
	st, _ := c.AllocState(keeps.ID)
	pid := st.Tasks["t"].PID

	// Every server goes down, then the client; one task ends meanwhile.
	rpcAddr := srv.RPCAddr()
	must.NoError(t, srv.Shutdown())
	must.NoError(t, c.Shutdown())
	finishTask(t, c, ends.ID)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		_, err := execdriver.ReadExit(execdriver.NewTaskPaths(c.allocDir(ends.ID), "t"))
		return err == nil, fmt.Errorf("the task has not ended: %v", err)
	})

	c = e.startClient(0, nil)
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		st, _ := c.AllocState(ends.ID)
		if st.ClientStatus != structs.AllocClientStatusComplete {
			return false, fmt.Errorf("allocation that ended is %q (%s)", st.ClientStatus, st.ClientDescription)
		}
		st, _ = c.AllocState(keeps.ID)
		if st.ClientStatus != structs.AllocClientStatusRunning || st.Tasks["t"].PID != pid || st.Tasks["t"].State != state.TaskRunning {
			return false, fmt.Errorf("allocation that runs is %+v", st)
		}
		return true, nil
	})
	st, _ = c.AllocState(keeps.ID)
	must.Eq(t, structs.AllocVolumeStepPublished, st.Volumes["data"].Step)
	_, err = os.Lstat(c.Paths().TargetPath(keeps.ID, "kept[0]"))
	must.NoError(t, err, must.Sprint("the volume stays published"))
	select {
	case <-c.Registered():
		t.Fatal("the client registered with no server up")
	default:
	}

	// A server is back (same address and data dir): the client registers,
	// reports the allocation that ended, and keeps the other.
	cfg2 := *cfg
	cfg2.RPCAddr = rpcAddr
	srv2, err := server.NewServer(&cfg2)
	must.NoError(t, err)
	t.Cleanup(func() { srv2.Shutdown() })
	waitAlloc(t, srv2, ends.ID, clientStatus(structs.AllocClientStatusComplete))
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return c.allocs.Reconciled() > 0, fmt.Errorf("the client has not heard from the server yet")
	})
	waitAlloc(t, srv2, keeps.ID, clientStatus(structs.AllocClientStatusRunning))
	st, _ = c.AllocState(keeps.ID)
	must.Eq(t, pid, st.Tasks["t"].PID)
	must.Eq(t, map[string]int{exts[0]: 1, exts[1]: 1}, countCalls(t, e.stateDir, "NodePublishVolume", exts...))
	must.Eq(t, []string{keeps.ID}, slices.Collect(maps.Keys(liveTasks(c))), must.Sprint("only the running task is left"))
}

// liveTasks returns, by allocation, the tasks the client sees running.
func liveTasks(c *Client) map[string][]string {
	out := map[string][]string{}
	for _, id := range c.AllocIDs() {
		st, _ := c.AllocState(id)
		for name, task := range st.Tasks {
			if task.State == state.TaskRunning {
				out[id] = append(out[id], name)
			}
		}
	}
	return out
}

// A damaged state file does not stop a restarted client: it reports the
// damage, naming the file, and recovers what it can. A task record that
// cannot be read is made up for by the task's PID file; a whole file that
// cannot be opened is moved aside, and the allocation the servers list is
// taken up again: claimed and published again (both are idempotent), its
// task found running and adopted rather than started twice.
func TestAllocRunner_DamagedStateFile(t *testing.T) {
	t.Parallel()
	srv, e, c := newOneClientEnv(t, nil)
	ext := e.createVolume(srv, "damaged")
	registerJob(t, srv, writerJob("damaged", 1, "damaged", false, taskScript))
	a := waitAllocs(t, srv, "damaged", 1, clientStatus(structs.AllocClientStatusRunning))["damaged.g[0]"]
	st, _ := c.AllocState(a.ID)
	pid := st.Tasks["t"].PID
	path := filepath.Join(e.dataDirs[0], state.DBFile)

	restart := func(damage func()) (*Client, string) {
		t.Helper()
		must.NoError(t, c.Shutdown())
		damage()
		var logs testutil.Buffer
		c = e.startClient(0, func(cfg *Config) { cfg.Logger = testLogger(t, cfg.NodeName, &logs) })
		testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
			st, ok := c.AllocState(a.ID)
			if !ok || st.Tasks["t"].State != state.TaskRunning || st.Volumes["data"].Step != structs.AllocVolumeStepPublished {
				return false, fmt.Errorf("allocation is %+v", st)
			}
			return true, nil
		})
		return c, logs.String()
	}

	// One record: the task's, written as the file lays it out (bucket
	// "tasks", key <alloc ID> NUL <task>).
	c, logs := restart(func() {
		db, err := bolt.Open(path, 0o600, nil)
		must.NoError(t, err)
		must.NoError(t, db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("tasks")).Put([]byte(a.ID+"\x00t"), []byte("\x00garbage"))
		}))
		must.NoError(t, db.Close())
	})
	must.StrContains(t, logs, "[ERROR]")
	must.StrContains(t, logs, "client state file has a record that cannot be read")
	must.StrContains(t, logs, "file="+path)
	must.StrContains(t, logs, "bucket=tasks key="+a.ID+"/t")
	st, _ = c.AllocState(a.ID)
	must.Eq(t, pid, st.Tasks["t"].PID, must.Sprint("the task was found from its PID file, not started again"))
	must.Eq(t, map[string]int{ext: 1}, countCalls(t, e.stateDir, "NodePublishVolume", ext))

	// The whole file.
	c, logs = restart(func() {
		must.NoError(t, os.WriteFile(path, []byte(strings.Repeat("\xde\xad", 8192)), 0o600))
	})
	must.StrContains(t, logs, "[ERROR]")
	must.StrContains(t, logs, "client state file cannot be opened")
	must.StrContains(t, logs, "file="+path)
	aside, err := filepath.Glob(path + ".corrupt-*")
	must.NoError(t, err)
	must.Len(t, 1, aside)
	st, _ = c.AllocState(a.ID)
	must.Eq(t, pid, st.Tasks["t"].PID, must.Sprint("the task was found from its PID file, not started again"))
	waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusRunning))

	// And the task still counts: its end is reported.
	finishTask(t, c, a.ID)
	waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusComplete))
}

// A client that was away long enough for its node to go down finds its
// allocations marked lost when it is back (their claims released through
// the controller): it stops their tasks rather than let them use volumes
// the servers gave up on.
func TestAllocRunner_LostAllocationStopped(t *testing.T) {
	t.Parallel()
	srv, e, c := newOneClientEnv(t, nil)
	e.createVolume(srv, "lost")
	registerJob(t, srv, writerJob("lost", 1, "lost", false, taskScript))
	a := waitAllocs(t, srv, "lost", 1, clientStatus(structs.AllocClientStatusRunning))["lost.g[0]"]
	st, _ := c.AllocState(a.ID)
	shim := st.Tasks["t"]

	must.NoError(t, c.Shutdown())
	waitAlloc(t, srv, a.ID, clientStatus(structs.AllocClientStatusLost))
	c = e.startClient(0, nil)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		st, _ := c.AllocState(a.ID)
		return st.ClientStatus == structs.AllocClientStatusComplete && st.Tasks["t"].State == state.TaskDead,
			fmt.Errorf("allocation is %+v", st)
	})
	st, _ = c.AllocState(a.ID)
	must.StrContains(t, st.ClientDescription, "the servers marked the allocation lost")
	must.Eq(t, "task t: stopped (SIGTERM)", st.Tasks["t"].Description)
	must.False(t, execdriver.PIDExists(shim.PID) && !execdriver.IsZombie(shim.PID), must.Sprint("the task's supervisor is gone"))
}

// When the servers marked an allocation lost and released its volume
// without the node step, they never call the node for it again: the
// client that is back stops the task, and then unpublishes and unstages
// the volume itself, at the recorded paths, and forgets its use, so that
// the allocation can be forgotten too.
func TestAllocRunner_LostAllocationVolumeDetached(t *testing.T) {
	t.Parallel()
	l := newLostAlloc(t, "lost", nil)
	var logs testutil.Buffer
	c := l.restart(t, &logs)
	l.waitStopped(t, c)
	st, _ := c.AllocState(l.alloc.ID)
	must.StrContains(t, st.ClientDescription, "the servers marked the allocation lost")
	must.False(t, execdriver.PIDExists(l.shim.PID) && !execdriver.IsZombie(l.shim.PID), must.Sprint("the task's supervisor is gone"))

	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		for _, method := range []string{"NodeUnpublishVolume", "NodeUnstageVolume"} {
			if len(l.nodeCalls(t, method)) == 0 {
				return false, fmt.Errorf("no %s of the volume on the node since it was lost: calls %v",
					method, methodsFor(t, l.e.stateDir, l.ext))
			}
		}
		if _, ok := c.Usage().Get(l.alloc.ID, "lost"); ok {
			return false, fmt.Errorf("the volume's use is still recorded")
		}
		if st, _ := c.AllocState(l.alloc.ID); len(st.Volumes) > 0 {
			return false, fmt.Errorf("the allocation still holds volumes %+v", st.Volumes)
		}
		return true, nil
	})
	unpublish, unstage := l.nodeCalls(t, "NodeUnpublishVolume"), l.nodeCalls(t, "NodeUnstageVolume")
	must.Len(t, 1, unpublish)
	must.Len(t, 1, unstage)
	must.Eq(t, codes.OK, unpublish[0].Code)
	must.Eq(t, codes.OK, unstage[0].Code)
	must.Eq(t, l.usage.TargetPath, unpublish[0].TargetPath)
	must.Eq(t, l.usage.StagingPath, unstage[0].StagingPath)
	must.True(t, unpublish[0].Time.Before(unstage[0].Time), must.Sprint("unpublished before unstaged"))
	for _, path := range []string{l.usage.TargetPath, c.Paths().AllocDir(l.alloc.ID), l.usage.StagingPath} {
		_, err := os.Lstat(path)
		must.ErrorIs(t, err, fs.ErrNotExist, must.Sprintf("%s is gone", path))
	}
	out := logs.String()
	must.StrContains(t, out, "volume released by the servers without the node step; detached it locally")
	must.StrNotContains(t, out, "noatime", must.Sprint("mount flags are never logged"))
}
