package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/client/execdriver"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// runnerPhase is where an allocation is in its life on this node.
type runnerPhase int

const (
	// phaseSetup: claiming, staging and publishing its volumes.
	phaseSetup runnerPhase = iota
	// phaseRunning: its tasks were started; some may have ended.
	phaseRunning
	// phaseDone: every task ended, or the allocation ended before they
	// started. Its volumes may be released.
	phaseDone
)

// allocRunner runs one allocation: it sets up its volumes, starts its
// tasks, supervises them until they end or the allocation is stopped, and
// reports each change. Its goroutine (run) is the only writer of its
// records; others read them under mu.
type allocRunner struct {
	m      *Manager
	id     string
	logger hclog.Logger
	// stopCh is closed once the allocation is asked to stop.
	stopCh   chan struct{}
	stopOnce sync.Once

	mu    sync.Mutex
	rec   *state.AllocRecord
	vols  map[string]*state.VolumeRecord
	tasks map[string]*state.TaskRecord
	// gone is set once the servers no longer list the allocation.
	gone bool
	// plugins are the supervisor's records of its plugin tasks, by task
	// name (see plugin_supervisor.go).
	plugins map[string]*pluginTask
}

func newAllocRunner(m *Manager, rec *state.AllocRecord, vols map[string]*state.VolumeRecord, tasks map[string]*state.TaskRecord) *allocRunner {
	if vols == nil {
		vols = map[string]*state.VolumeRecord{}
	}
	if tasks == nil {
		tasks = map[string]*state.TaskRecord{}
	}
	r := &allocRunner{
		m: m, id: rec.ID, rec: rec, vols: vols, tasks: tasks,
		logger: m.logger.With("alloc_id", rec.ID),
		stopCh: make(chan struct{}),
	}
	if rec.StopReason != "" {
		r.stopOnce.Do(func() { close(r.stopCh) })
	}
	return r
}

func (r *allocRunner) getPhase() runnerPhase {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.phaseLocked()
}

func (r *allocRunner) phaseLocked() runnerPhase {
	switch {
	case r.rec.Done:
		return phaseDone
	case r.rec.SetupDone:
		return phaseRunning
	}
	return phaseSetup
}

// stop asks the allocation to stop: its setup ends, its tasks are
// signalled. Asking again changes nothing.
func (r *allocRunner) stop(reason string) {
	r.mu.Lock()
	changed := r.rec.StopReason == "" && !r.rec.Done
	if changed {
		r.rec.StopReason = reason
	}
	r.mu.Unlock()
	if changed {
		r.logger.Info("stopping allocation", "reason", reason)
		r.persist(true, nil, nil)
	}
	r.stopOnce.Do(func() { close(r.stopCh) })
}

// forgotten is the servers no longer listing the allocation: it stops, and
// its updates are not expected to be accepted any more.
func (r *allocRunner) forgotten() {
	r.mu.Lock()
	r.gone = true
	r.mu.Unlock()
	r.stop("the servers no longer list the allocation")
}

func (r *allocRunner) createIndex() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.CreateIndex
}

func (r *allocRunner) stopped() bool {
	select {
	case <-r.stopCh:
		return true
	default:
		return false
	}
}

// run drives the allocation from where its records say it is. It returns
// when the allocation is done, or when the agent shuts down: a shutdown
// leaves tasks running and volumes published, for the next start to take
// over.
func (r *allocRunner) run(ctx context.Context) {
	r.report()
	switch r.getPhase() {
	case phaseDone:
		r.m.collect()
		return
	case phaseSetup:
		if r.rec.Group == nil {
			r.finish(structs.AllocClientStatusFailed, "the allocation's job or task group is gone from the servers")
			return
		}
		err := r.setupVolumes(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errAllocStopped):
			r.finish(structs.AllocClientStatusComplete, "stopped before its tasks started: "+r.stopReason())
			return
		case err != nil:
			r.finish(structs.AllocClientStatusFailed, err.Error())
			return
		}
		if r.stopped() {
			r.finish(structs.AllocClientStatusComplete, "stopped before its tasks started: "+r.stopReason())
			return
		}
		r.mu.Lock()
		r.rec.SetupDone = true
		r.mu.Unlock()
		r.persist(true, nil, nil)
	}
	r.startTasks()
	r.supervise(ctx)
}

func (r *allocRunner) stopReason() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec.StopReason
}

// startTasks starts the tasks that have not started, and takes over those
// that run from an earlier start of the agent.
func (r *allocRunner) startTasks() {
	allocDir := r.m.allocDir(r.id)
	targets := r.publishedTargets()
	// Once a task could not start, or the allocation is stopping, the
	// tasks not started yet are not: they would only be killed.
	abandon := ""
	for _, task := range r.rec.Group.Tasks {
		paths := execdriver.NewTaskPaths(allocDir, task.Name)
		t := r.task(task.Name)
		switch t.State {
		case state.TaskDead:
			continue
		case state.TaskRunning:
			// Running from before the agent restarted. One that ended
			// meanwhile is collected by the first poll.
			if execdriver.Alive(t.Process) {
				r.logger.Info("task still running from before the agent restarted; supervising it", "task", t.Name, "pid", t.Process.PID)
			}
			continue
		}
		// Pending. A shim may have started it before the agent could
		// record so (the agent stopped, or its state file was lost).
		// Its shim may have ended since, leaving processes of the task
		// running: taken over too, the first poll kills them and judges
		// the task once they are gone, rather than start it twice.
		// (A task waiting to restart has its last run's PID file, whose
		// end was judged already.)
		// Without a PID file, the agent may have stopped between starting
		// the shim and writing it, before the shim wrote it itself: the
		// shim is found by its environment.
		p, ok := execdriver.ReadPIDFile(paths)
		if !ok && t.RestartAt == 0 {
			p, ok = execdriver.FindShim(paths)
		}
		if ok && (execdriver.Alive(p) || t.RestartAt == 0 && !execdriver.Ended(p)) {
			r.updateTask(t.Name, func(t *state.TaskRecord) { t.State, t.Process = state.TaskRunning, p })
			r.logger.Info("task found running from an earlier start; supervising it", "task", t.Name, "pid", p.PID)
			continue
		}
		if t.RestartAt != 0 {
			// Waiting to be restarted (the exit file is the last run's):
			// restartDue starts it when its delay passed.
			continue
		}
		if exit, err := execdriver.ReadExit(paths); err == nil {
			t = r.updateTask(t.Name, func(t *state.TaskRecord) { judgeExit(t, exit) })
			r.logger.Info("task ended before the agent could record it", "task", t.Name, "outcome", t.Description)
			continue
		}
		if abandon == "" && r.stopped() {
			abandon = "the allocation is stopping"
		}
		if abandon != "" {
			r.updateTask(t.Name, func(t *state.TaskRecord) {
				t.State, t.Description = state.TaskDead, fmt.Sprintf("task %s: not started: %s", task.Name, abandon)
			})
			continue
		}
		if err := r.startTask(task, paths, allocDir, targets); err != nil {
			abandon = fmt.Sprintf("task %s could not be started", task.Name)
		}
	}
	if abandon == "" {
		r.setStatus(structs.AllocClientStatusRunning, "tasks are running")
	}
}

// startTask starts one task (again), recording its start or why it could
// not start.
func (r *allocRunner) startTask(task *structs.Task, paths execdriver.TaskPaths, allocDir string, targets map[string]string) error {
	env := taskEnv(r.rec, task.Name, paths, allocDir, targets)
	// The node's identity, as Nomad's node attributes: a plugin task
	// names its node by it (the development plugin's default node ID).
	env = append(env, "VOLPLANE_NODE_ID="+r.m.cfg.NodeID, "VOLPLANE_NODE_NAME="+r.m.cfg.NodeName)
	p := r.pluginTaskFor(task)
	var err error
	if p != nil {
		var endpoint string
		if endpoint, err = preparePluginTask(p); err == nil {
			env = append(env, endpoint)
		}
	}
	var proc state.ProcessID
	if err == nil {
		proc, err = execdriver.Start(r.m.shimExe, task, paths, env)
	}
	now := time.Now()
	if err != nil {
		r.updateTask(task.Name, func(t *state.TaskRecord) {
			t.State, t.Failed, t.Description = state.TaskDead, true, fmt.Sprintf("task %s: %v", task.Name, err)
			t.Events = structs.AppendTaskEvent(t.Events, structs.NewTaskEvent(structs.TaskDriverFailure, now.UnixNano()).SetMessage(err.Error()))
		})
		r.logger.Warn("task could not be started", "task", task.Name, "error", err)
		r.report()
		return err
	}
	if p != nil {
		p.started(now)
	}
	r.updateTask(task.Name, func(t *state.TaskRecord) {
		t.State, t.Process, t.StartedAt, t.RestartAt = state.TaskRunning, proc, now.UnixNano(), 0
		t.Events = structs.AppendTaskEvent(t.Events, structs.NewTaskEvent(structs.TaskStarted, now.UnixNano()))
	})
	r.logger.Info("task started", "task", task.Name, "pid", proc.PID, "command", task.Config.Command)
	return nil
}

// restartDue starts again the tasks whose restart delay passed; a stop
// cancels pending restarts.
func (r *allocRunner) restartDue(now time.Time) {
	allocDir := r.m.allocDir(r.id)
	var targets map[string]string
	for _, task := range r.rec.Group.Tasks {
		t := r.task(task.Name)
		if t.State != state.TaskPending || t.RestartAt == 0 {
			continue
		}
		if r.stopped() {
			r.updateTask(task.Name, func(t *state.TaskRecord) {
				t.State, t.RestartAt = state.TaskDead, 0
				t.Description = fmt.Sprintf("task %s: not restarted: the allocation is stopping", task.Name)
			})
			r.deregisterPlugin(r.pluginTaskFor(task))
			r.report()
			continue
		}
		if now.UnixNano() < t.RestartAt {
			continue
		}
		if targets == nil {
			targets = r.publishedTargets()
		}
		_ = r.startTask(task, execdriver.NewTaskPaths(allocDir, task.Name), allocDir, targets)
		r.report()
	}
}

// publishedTargets are the target paths of the allocation's published
// volumes, by alias.
func (r *allocRunner) publishedTargets() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	targets := map[string]string{}
	for alias, v := range r.vols {
		if v.State.Step == structs.AllocVolumeStepPublished {
			targets[alias] = v.TargetPath
		}
	}
	return targets
}

// task returns a copy of the record of a task, pending when there is none
// yet.
func (r *allocRunner) task(name string) state.TaskRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.tasks[name]; t != nil {
		return *t
	}
	return state.TaskRecord{Name: name, State: state.TaskPending}
}

// updateTask changes a task's record with f, persists it and returns a
// copy.
func (r *allocRunner) updateTask(name string, f func(t *state.TaskRecord)) state.TaskRecord {
	r.mu.Lock()
	t := r.tasks[name]
	if t == nil {
		t = &state.TaskRecord{Name: name, State: state.TaskPending}
		r.tasks[name] = t
	}
	f(t)
	c := *t
	r.mu.Unlock()
	r.persist(false, nil, []*state.TaskRecord{&c})
	return c
}

// supervise polls the tasks until every one ended. A task that fails, or a
// stop, makes the others stop too: SIGTERM, then SIGKILL after the kill
// timeout.
func (r *allocRunner) supervise(ctx context.Context) {
	cfg := r.m.cfg
	ticker := time.NewTicker(cfg.TaskPollInterval)
	defer ticker.Stop()
	stopCh := r.stopCh
	var killAt time.Time
	killed := false
	for {
		now := time.Now()
		r.supervisePlugins(now)
		r.restartDue(now)
		live, failed := r.pollTasks()
		if len(live) == 0 {
			r.finishFromTasks()
			return
		}
		switch {
		case killAt.IsZero() && (failed != "" || r.stopped()):
			why := failed + " failed"
			if failed == "" {
				why = r.stopReason()
			}
			r.logger.Info("stopping tasks", "tasks", live, "why", why)
			r.signal(live, syscall.SIGTERM)
			killAt = time.Now().Add(cfg.TaskKillTimeout)
		case !killAt.IsZero() && !killed && time.Now().After(killAt):
			r.logger.Warn("tasks did not stop within the kill timeout; killing them", "tasks", live, "timeout", cfg.TaskKillTimeout)
			r.signal(live, syscall.SIGKILL)
			killed = true
		}
		select {
		case <-ctx.Done():
			return
		case <-stopCh:
			stopCh = nil
		case <-ticker.C:
		}
	}
}

// pollTasks collects the end of every task whose shim is gone, and returns
// the tasks still running and the first one that failed.
func (r *allocRunner) pollTasks() (live []string, failed string) {
	allocDir := r.m.allocDir(r.id)
	for _, task := range r.rec.Group.Tasks {
		t := r.task(task.Name)
		if t.State == state.TaskRunning && execdriver.Ended(t.Process) {
			// No readable exit file is a nil exit: the shim recorded
			// nothing, which judgeExit describes.
			exit, _ := execdriver.ReadExit(execdriver.NewTaskPaths(allocDir, t.Name))
			now := time.Now().UnixNano()
			t = r.updateTask(t.Name, func(t *state.TaskRecord) {
				judgeExit(t, exit)
				t.Events = structs.AppendTaskEvent(t.Events, exitDetails(structs.NewTaskEvent(structs.TaskTerminated, now), exit))
			})
			r.logger.Info("task ended", "task", t.Name, "failed", t.Failed, "outcome", t.Description)
			if r.pluginTaskEnded(task, t) {
				t = r.task(t.Name)
			}
			r.report()
		}
		switch {
		case t.State != state.TaskDead:
			live = append(live, t.Name)
		case t.Failed && failed == "":
			failed = t.Name
		}
	}
	return live, failed
}

// signal signals the tasks' process groups, marking them as stopped by the
// client.
func (r *allocRunner) signal(names []string, sig syscall.Signal) {
	for _, name := range names {
		if r.task(name).State != state.TaskRunning {
			// A task waiting to restart has no process: its old process
			// group may be someone else's by now.
			continue
		}
		t := r.updateTask(name, func(t *state.TaskRecord) {
			if !t.Stopping && sig == syscall.SIGTERM {
				t.Events = structs.AppendTaskEvent(t.Events, structs.NewTaskEvent(structs.TaskKilling, structs.NowNano()).
					SetDisplayMessage(fmt.Sprintf("Sent interrupt. Waiting %v before force killing", r.m.cfg.TaskKillTimeout)))
			}
			t.Stopping = true
		})
		if err := execdriver.Signal(t.Process, sig); err != nil {
			r.logger.Warn("signalling task", "task", name, "signal", execdriver.SignalName(sig), "error", err)
		}
	}
}

// finishFromTasks ends the allocation once every task ended: failed when a
// task failed on its own, complete otherwise.
func (r *allocRunner) finishFromTasks() {
	var failed *state.TaskRecord
	stopped := false
	r.mu.Lock()
	for _, task := range r.rec.Group.Tasks {
		t := r.tasks[task.Name]
		if t == nil {
			continue
		}
		if t.Failed && failed == nil {
			failed = t
		}
		stopped = stopped || t.Stopping
	}
	reason := r.rec.StopReason
	r.mu.Unlock()
	switch {
	case failed != nil:
		r.finish(structs.AllocClientStatusFailed, failed.Description)
	case stopped && reason != "":
		r.finish(structs.AllocClientStatusComplete, "tasks stopped: "+reason)
	default:
		r.finish(structs.AllocClientStatusComplete, "all tasks completed")
	}
}

// finish records the allocation's end and reports it.
func (r *allocRunner) finish(status, description string) {
	r.mu.Lock()
	r.rec.Done, r.rec.FinishedAt = true, structs.NowNano()
	r.rec.ClientStatus, r.rec.ClientDescription = status, description
	r.mu.Unlock()
	r.deregisterPlugins()
	r.logger.Info("allocation ended", "status", status, "description", description)
	r.persist(true, nil, nil)
	r.report()
	r.m.collect()
	// Its volumes are the servers' to release now, unless they already
	// did without the node step (the allocation was lost).
	r.m.changed()
}

// setStatus changes the reported status while the allocation runs.
func (r *allocRunner) setStatus(status, description string) {
	r.mu.Lock()
	changed := r.rec.ClientStatus != status || r.rec.ClientDescription != description
	r.rec.ClientStatus, r.rec.ClientDescription = status, description
	r.mu.Unlock()
	if changed {
		r.persist(true, nil, nil)
		r.report()
	}
}

// report queues the allocation's current state for the servers.
func (r *allocRunner) report() {
	r.mu.Lock()
	u := &structs.AllocClientUpdate{
		ID: r.id, ClientStatus: r.rec.ClientStatus, ClientDescription: r.rec.ClientDescription,
		VolumeStates: map[string]*structs.AllocVolumeState{},
	}
	for alias, v := range r.vols {
		s := v.State
		u.VolumeStates[alias] = &s
	}
	if r.rec.Group != nil {
		u.TaskStates = map[string]*structs.TaskState{}
		for _, task := range r.rec.Group.Tasks {
			u.TaskStates[task.Name] = taskState(r.tasks[task.Name])
		}
	}
	r.mu.Unlock()
	r.m.rep.update(u)
}

// acked records that the servers accepted a report of status.
func (r *allocRunner) acked(status string, gone bool) {
	r.mu.Lock()
	changed := r.rec.ReportedStatus != status
	r.rec.ReportedStatus = status
	if gone {
		r.gone = true
	}
	r.mu.Unlock()
	if changed {
		r.persist(true, nil, nil)
	}
}

// forgettable reports whether the allocation may be forgotten: it ended,
// the servers know it did (or no longer know it at all), and none of its
// volumes is claimed on this node any more. It also returns when it ended
// and whether the servers still list it.
func (r *allocRunner) forgettable() (ok bool, finishedAt int64, gone bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.rec.Done || (r.rec.ReportedStatus != r.rec.ClientStatus && !r.gone) {
		return false, 0, false
	}
	for _, v := range r.vols {
		if stepRank(v.State.Step) >= stepRank(structs.AllocVolumeStepClaimed) {
			return false, 0, false
		}
	}
	return true, r.rec.FinishedAt, r.gone
}

// volumeDetached forgets the allocation's volume volumeID, released from
// this node by the servers.
func (r *allocRunner) volumeDetached(volumeID string) {
	r.mu.Lock()
	var aliases []string
	for alias, v := range r.vols {
		if v.VolumeID == volumeID {
			aliases = append(aliases, alias)
			delete(r.vols, alias)
		}
	}
	r.mu.Unlock()
	for _, alias := range aliases {
		if err := r.m.state.DeleteVolume(r.id, alias); err != nil {
			r.logger.Error("forgetting a released volume", "volume_id", volumeID, "error", err)
		}
	}
}

// persist writes the allocation record (when withAlloc) and the given
// volume and task records. A write that fails is logged: the allocation
// goes on from memory, and a restart would redo the unrecorded step.
func (r *allocRunner) persist(withAlloc bool, vols []*state.VolumeRecord, tasks []*state.TaskRecord) {
	var a *state.AllocRecord
	if withAlloc {
		r.mu.Lock()
		c := *r.rec
		r.mu.Unlock()
		a = &c
	}
	if err := r.m.state.Put(a, vols, tasks, r.id); err != nil {
		r.logger.Error("recording the allocation's progress failed", "error", err)
	}
}

// snapshot copies what the client knows of the allocation.
func (r *allocRunner) snapshot() AllocState {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := AllocState{
		ClientStatus: r.rec.ClientStatus, ClientDescription: r.rec.ClientDescription,
		Volumes: map[string]structs.AllocVolumeState{}, Tasks: map[string]TaskState{},
	}
	for alias, v := range r.vols {
		s.Volumes[alias] = v.State
	}
	for _, name := range slices.Sorted(maps.Keys(r.tasks)) {
		t := r.tasks[name]
		s.Tasks[name] = TaskState{PID: t.Process.PID, State: t.State, Failed: t.Failed, Description: t.Description}
	}
	return s
}

// taskState is a task's record as the servers see it; nil is a task not
// started yet.
func taskState(t *state.TaskRecord) *structs.TaskState {
	if t == nil {
		return &structs.TaskState{State: structs.TaskStatePending}
	}
	ts := &structs.TaskState{
		State: t.State, Failed: t.Failed, Description: t.Description, StartedAt: t.StartedAt,
		Restarts: t.Restarts, Events: slices.Clone(t.Events),
	}
	if t.Exit != nil {
		ts.FinishedAt = t.Exit.FinishedAt
	}
	return ts
}
