package allocrunner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/clienttest"
	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/plugins/csi"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// These tests drive a Manager through its Config alone, with fakes for
// the servers and the plugin manager: no Client and no server. The tests
// of package client run it inside whole agents, with real servers and
// plugins.

// fakeServers answers the allocation query from a fixed answer, blocking
// while the caller has seen it, and records the reports.
type fakeServers struct {
	done <-chan struct{}

	mu      sync.Mutex
	reply   structs.NodeClientAllocsResponse
	reports map[string]*structs.AllocClientUpdate
	// queries counts the allocation queries; queried is signalled after
	// each.
	queries int
	queried chan struct{}
}

func (f *fakeServers) NodeGetClientAllocs(args *structs.NodeClientAllocsRequest, reply *structs.NodeClientAllocsResponse) error {
	f.mu.Lock()
	seen := args.MinQueryIndex >= f.reply.Index
	*reply = f.reply
	f.queries++
	f.mu.Unlock()
	select {
	case f.queried <- struct{}{}:
	default:
	}
	if seen {
		// Nothing changes: wait as a blocking query does.
		t := time.NewTimer(args.MaxQueryTime)
		defer t.Stop()
		select {
		case <-f.done:
		case <-t.C:
		}
	}
	return nil
}

func (f *fakeServers) NodeUpdateAlloc(args *structs.NodeUpdateAllocRequest, _ *structs.GenericResponse) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range args.Allocs {
		f.reports[u.ID] = u
	}
	return nil
}

func (f *fakeServers) CSIVolumeClaim(*structs.CSIVolumeClaimRequest, *structs.CSIVolumeClaimResponse) error {
	return structs.NewError(structs.ErrCodeInvalid, "no volumes in these tests")
}

// reported returns the last status the servers were told of an allocation.
func (f *fakeServers) reported(allocID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.reports[allocID]; u != nil {
		return u.ClientStatus
	}
	return ""
}

// noPlugins is a node without CSI plugins.
type noPlugins struct{}

func (noPlugins) Node(pluginID string) (*csi.Client, *structs.CSIInfo, error) {
	return nil, nil, structs.NewError(structs.ErrCodeRetryable, "no plugin %q on this node", pluginID)
}
func (noPlugins) Register(string, csimanager.PluginConfig, csimanager.HealthChange) error {
	return errors.New("no plugins in these tests")
}
func (noPlugins) Deregister(string)            {}
func (noPlugins) MarkUnhealthy(string, string) {}

// noLocks never waits: these tests publish nothing.
type noLocks struct{}

func (noLocks) LockVolume(context.Context, string, string, string) (func(), error) {
	return func() {}, nil
}

// testManager is one start of a Manager on dataDir, as an agent's.
type testManager struct {
	*Manager
	servers *fakeServers
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	db      *state.DB
	once    sync.Once
	// goCalls counts the goroutines the Manager started; afterGo, when
	// set, is called after each has started, with its number.
	goCalls atomic.Int64
	afterGo func(tm *testManager, n int64)
}

// startManager starts a Manager on dataDir whose servers list the
// allocations of job, placed on node "node-1"; stop ends it as a shutdown
// does, leaving its tasks running.
func startManager(t *testing.T, dataDir string, job *structs.Job, allocs ...*structs.Allocation) *testManager {
	t.Helper()
	return startManagerHooked(t, dataDir, nil, job, allocs...)
}

// startManagerHooked is startManager with afterGo set (see testManager).
func startManagerHooked(t *testing.T, dataDir string, afterGo func(tm *testManager, n int64), job *structs.Job, allocs ...*structs.Allocation) *testManager {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Name: "allocs", Level: hclog.Debug, Output: &testutil.Buffer{}})
	db, restored, err := state.OpenDB(dataDir, logger)
	must.NoError(t, err)
	usage, err := state.OpenUsageRegistry(dataDir)
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	tm := &testManager{cancel: cancel, db: db, afterGo: afterGo}
	tm.servers = &fakeServers{done: ctx.Done(), reports: map[string]*structs.AllocClientUpdate{}, queried: make(chan struct{}, 1)}
	tm.servers.reply.Index = 10
	tm.servers.reply.Allocs = allocs
	tm.servers.reply.Jobs = map[string]*structs.Job{structs.JobKey(job.Namespace, job.ID): job}
	registered := make(chan struct{})
	close(registered)
	tm.Manager = New(Config{
		Logger: logger, DataDir: dataDir, NodeID: "node-1", SecretID: "secret", NodeName: "n1", Registered: registered,
		Servers: tm.servers, Plugins: noPlugins{}, Locks: noLocks{},
		State: db, Restored: restored, Usage: usage, Paths: state.NewCSIPaths(dataDir),
		GoFunc: func(f func()) bool {
			tm.wg.Add(1)
			go func() { defer tm.wg.Done(); f() }()
			if n := tm.goCalls.Add(1); tm.afterGo != nil {
				tm.afterGo(tm, n)
			}
			return true
		},
		Timing: Timing{
			AllocWatchWait: time.Second, ClaimBackoffMin: 10 * time.Millisecond, ClaimBackoffMax: 100 * time.Millisecond,
			TaskKillTimeout: 2 * time.Second, TaskPollInterval: 20 * time.Millisecond, TaskRestartDelay: 100 * time.Millisecond,
			FinishedAllocsKept: 10,
		},
		ServerRetryMin: 10 * time.Millisecond, ServerRetryMax: 100 * time.Millisecond,
	})
	tm.Start(ctx)
	t.Cleanup(tm.stop)
	return tm
}

func (tm *testManager) stop() {
	tm.once.Do(func() {
		tm.cancel()
		tm.wg.Wait()
		tm.db.Close()
	})
}

func shellJob(script string) *structs.Job {
	return &structs.Job{
		ID: "j", Namespace: structs.DefaultNamespace, Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{{
			Name: "g", Count: 1,
			Tasks: []*structs.Task{{
				Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "/bin/sh", Args: []string{"-c", script}},
			}},
		}},
	}
}

func allocOf(job *structs.Job, id string) *structs.Allocation {
	return &structs.Allocation{
		ID: id, Namespace: job.Namespace, Name: job.ID + ".g[0]", JobID: job.ID, TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: structs.AllocDesiredStatusRun, ClientStatus: structs.AllocClientStatusPending, CreateIndex: 5,
	}
}

// waitReported waits until the servers were told the allocation's status.
func waitReported(t *testing.T, tm *testManager, allocID, status string) {
	t.Helper()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		got := tm.servers.reported(allocID)
		return got == status, errors.New("reported " + got + ", want " + status)
	})
}

// An allocation the servers list is run: its task starts, its output goes
// to its log, its end is reported and judged.
func TestManager_RunsReportsAndLogs(t *testing.T) {
	t.Parallel()
	job := shellJob(`echo "hello from $VOLPLANE_ALLOC_NAME"`)
	tm := startManager(t, t.TempDir(), job, allocOf(job, "a1"))
	waitReported(t, tm, "a1", structs.AllocClientStatusComplete)

	st, ok := tm.AllocState("a1")
	must.True(t, ok)
	must.Eq(t, TaskState{PID: st.Tasks["t"].PID, State: state.TaskDead, Description: "task t: exit code 0"}, st.Tasks["t"])
	must.Eq(t, []string{"a1"}, tm.AllocIDs())
	must.NoError(t, tm.CheckDetach("a1"))

	log, ok, err := tm.TaskLog("a1", "")
	must.True(t, ok)
	must.NoError(t, err)
	must.True(t, log.Done())
	out, err := os.ReadFile(log.Paths.Stdout)
	must.NoError(t, err)
	must.Eq(t, "hello from j.g[0]\n", string(out))
	_, _, err = tm.TaskLog("a1", "other")
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))
	_, ok, _ = tm.TaskLog("unknown", "")
	must.False(t, ok)
}

// A Manager started again on the same data dir (an agent restarted) takes
// over the running task from the state file rather than start it twice,
// refuses the release of its volumes while it runs, and stops it on
// StopAll.
func TestManager_RestartAdoptsThenStopAll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The task must not outlive the test, whatever failed: a Manager's
	// shutdown leaves tasks running, as an agent's does.
	t.Cleanup(func() { clienttest.KillTasksUnder(t, dir) })
	job := shellJob(`touch "$VOLPLANE_ALLOC_DIR/started"; while [ ! -e "$VOLPLANE_ALLOC_DIR/done" ]; do sleep 0.05; done`)
	first := startManager(t, dir, job, allocOf(job, "a1"))
	waitReported(t, first, "a1", structs.AllocClientStatusRunning)
	// The shim has started the command once the command runs: a SIGTERM
	// that came before the shim handles it would leave no exit record.
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		_, err := os.Stat(filepath.Join(AllocDir(dir, "a1"), "started"))
		return err == nil, err
	})
	st, _ := first.AllocState("a1")
	pid := st.Tasks["t"].PID
	must.Positive(t, pid)
	first.stop()

	again := startManager(t, dir, job, allocOf(job, "a1"))
	st, ok := again.AllocState("a1")
	must.True(t, ok, must.Sprint("the allocation was restored from the state file"))
	must.Eq(t, pid, st.Tasks["t"].PID)
	must.Eq(t, structs.ErrCodeRetryable, structs.CodeOf(again.CheckDetach("a1")))
	waitReported(t, again, "a1", structs.AllocClientStatusRunning)
	st, _ = again.AllocState("a1")
	must.Eq(t, pid, st.Tasks["t"].PID, must.Sprint("the running task was taken over, not started again"))

	ids := again.StopAll("test ends")
	must.Eq(t, []string{"a1"}, ids)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		left := again.Running(ids)
		return len(left) == 0, errors.New("still running")
	})
	waitReported(t, again, "a1", structs.AllocClientStatusComplete)
	st, _ = again.AllocState("a1")
	must.Eq(t, "task t: stopped (SIGTERM)", st.Tasks["t"].Description)
}
