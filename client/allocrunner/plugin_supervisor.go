package allocrunner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/volplane/volplane/client/csimanager"
	"github.com/volplane/volplane/client/state"
	"github.com/volplane/volplane/structs"
)

// A task with a csi_plugin block is a CSI plugin the client supervises,
// as Nomad's csi_plugin_supervisor hook does:
//
//   - Before the task starts, the client makes its socket directory,
//     <data dir>/csi/plugins/<alloc>/<task>/, and passes the task
//     CSI_ENDPOINT=unix://<that dir>/csi.sock.
//   - It waits up to health_timeout for the socket, registers the instance
//     with the plugin manager (fingerprint: GetPluginInfo, capabilities,
//     NodeGetInfo), which probes its health from then on with the usual
//     hysteresis; every change of health is a task event. A plugin that
//     does not create its socket, or does not answer healthy, within
//     health_timeout is killed and fails its allocation.
//   - A plugin task that dies on its own is reported unhealthy at once and
//     restarted with backoff (see pluginRestartPolicy); once it is dead for
//     good, its instance is deregistered and the node's next heartbeat
//     drops it from the plugin.
//
// The socket directory is <data dir>/csi/plugins/<alloc>/<task>/, unless
// the socket's path there would be longer than the 107 bytes a unix socket
// path may have; it is then <tmp>/volplane-csi-<hash of that path>/, owned
// by the agent's user and writable by it alone.
//
// Paths. Tasks are exec tasks: they see the host's file system, so there
// is nothing to map and every path the client hands a plugin is a host
// path. CSI_ENDPOINT names the socket's host path (mount_dir, "/csi" by
// default, is where a containerised plugin would see that directory; an
// exec task is told the real one). Staging and target paths are the
// client's own (state.CSIPaths), under the data dir, and stage_publish_base_dir
// is accepted and validated, for job specs written for Nomad, but not used:
// a plugin that sees the host's paths needs no second name for them. The
// client creates only the parent of a target path, as always.

// pluginSocketName is the socket a plugin task creates in its directory.
const pluginSocketName = "csi.sock"

// maxSocketPath is the longest path a unix socket can have on Linux.
const maxSocketPath = 107

// pluginRestartPolicy is how a plugin task that dies on its own is
// restarted: Nomad's default for service jobs (2 attempts within 30
// minutes, then fail), with the delay doubling from the client's
// TaskRestartDelay at each attempt in the window.
var pluginRestartPolicy = struct {
	Attempts int
	Interval time.Duration
}{Attempts: 2, Interval: 30 * time.Minute}

// pluginTask is the supervisor's view of one plugin task of an
// allocation.
type pluginTask struct {
	cfg    *structs.TaskCSIPluginConfig
	key    string
	dir    string
	socket string

	mu sync.Mutex
	// startedAt is when the current run of the task started (or was taken
	// over by this agent).
	startedAt time.Time
	// registered: the instance is in the plugin manager.
	registered bool
	// healthy: it answered healthy since startedAt.
	healthy bool
}

// pluginDir is a plugin task's socket directory: under the data dir, or,
// when a socket there would have a longer path than a unix socket may, a
// directory named after it in the system's temporary directory (made
// private to the agent by preparePluginTask).
func (m *Manager) pluginDir(allocID, task string) string {
	dir := filepath.Join(m.cfg.DataDir, state.CSIDir, "plugins", state.Segment(allocID), state.Segment(task))
	if len(filepath.Join(dir, pluginSocketName)) <= maxSocketPath {
		return dir
	}
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(os.TempDir(), "volplane-csi-"+hex.EncodeToString(sum[:8]))
}

// pluginTaskFor returns the supervisor's record of a plugin task, nil for
// a task without a csi_plugin block.
func (r *allocRunner) pluginTaskFor(task *structs.Task) *pluginTask {
	if task.CSIPluginConfig == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.plugins == nil {
		r.plugins = map[string]*pluginTask{}
	}
	p := r.plugins[task.Name]
	if p == nil {
		dir := r.m.pluginDir(r.id, task.Name)
		p = &pluginTask{
			cfg: task.CSIPluginConfig, dir: dir, socket: filepath.Join(dir, pluginSocketName),
			key: "alloc:" + r.id + "/" + task.Name,
		}
		r.plugins[task.Name] = p
	}
	return p
}

// preparePluginTask makes a plugin task's socket directory, removes a
// socket left by an earlier run (it would be taken for the new one), and
// returns the task's CSI_ENDPOINT.
func preparePluginTask(p *pluginTask) (string, error) {
	if len(p.socket) > maxSocketPath {
		return "", fmt.Errorf("csi plugin %q: its socket path %s is %d bytes, over the %d a unix socket may have; use a shorter client data dir",
			p.cfg.ID, p.socket, len(p.socket), maxSocketPath)
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return "", fmt.Errorf("csi plugin %q: creating its socket directory: %w", p.cfg.ID, err)
	}
	// A directory in a shared temporary directory could have been made
	// by someone else, to catch the plugin's calls: it must be ours.
	fi, err := os.Lstat(p.dir)
	if err != nil {
		return "", fmt.Errorf("csi plugin %q: %w", p.cfg.ID, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("csi plugin %q: its socket directory %s is not a directory owned by and writable only by the agent's user", p.cfg.ID, p.dir)
	}
	if err := os.Remove(p.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("csi plugin %q: removing an old socket: %w", p.cfg.ID, err)
	}
	return "CSI_ENDPOINT=unix://" + p.socket, nil
}

// started records that a run of the plugin task began now.
func (p *pluginTask) started(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.startedAt, p.healthy = now, false
}

// supervisePlugins checks every running plugin task: it registers the
// instance once the socket exists, and kills a plugin that did not become
// healthy within its health_timeout (which fails the allocation).
func (r *allocRunner) supervisePlugins(now time.Time) {
	for _, task := range r.rec.Group.Tasks {
		p := r.pluginTaskFor(task)
		if p == nil {
			continue
		}
		t := r.task(task.Name)
		if t.State != state.TaskRunning || t.Stopping {
			continue
		}
		p.mu.Lock()
		if p.startedAt.IsZero() {
			// Running from before the agent restarted: its health
			// timeout starts now.
			p.startedAt = now
		}
		registered, healthy, elapsed := p.registered, p.healthy, now.Sub(p.startedAt)
		p.mu.Unlock()
		if !registered {
			if _, err := os.Stat(p.socket); err == nil {
				r.registerPlugin(task.Name, p)
				registered = true
			}
		}
		if healthy || elapsed < p.cfg.HealthTimeout {
			continue
		}
		var reason string
		if !registered {
			reason = fmt.Sprintf("CSI plugin did not create its socket %s before configured %v health timeout", p.socket, p.cfg.HealthTimeout)
		} else {
			reason = fmt.Sprintf("CSI plugin did not become healthy before configured %v health timeout", p.cfg.HealthTimeout)
		}
		r.logger.Warn("plugin task failed its health timeout; killing it", "task", task.Name, "plugin_id", p.cfg.ID, "reason", reason)
		t = r.updateTask(task.Name, func(t *state.TaskRecord) {
			t.FailReason = reason
			t.Events = structs.AppendTaskEvent(t.Events, structs.NewTaskEvent(structs.TaskPluginUnhealthy, now.UnixNano()).
				SetMessage("Error: "+reason))
		})
		r.report()
		r.signal([]string{task.Name}, syscall.SIGTERM)
	}
}

// registerPlugin registers a plugin task's instance with the plugin
// manager; its health changes become the task's events.
func (r *allocRunner) registerPlugin(name string, p *pluginTask) {
	pc := csimanager.PluginConfig{ID: p.cfg.ID, Endpoint: "unix://" + p.socket, Type: p.cfg.Type, AllocID: r.id}
	err := r.m.cfg.Plugins.Register(p.key, pc, func(healthy bool, reason string) {
		r.pluginHealthChanged(name, p, healthy, reason)
	})
	if err != nil {
		r.logger.Warn("registering the plugin task's instance", "task", name, "plugin_id", p.cfg.ID, "error", err)
		return
	}
	p.mu.Lock()
	p.registered = true
	p.mu.Unlock()
}

// pluginHealthChanged records a change of a plugin instance's health as a
// task event, with Nomad's types and messages.
func (r *allocRunner) pluginHealthChanged(name string, p *pluginTask, healthy bool, reason string) {
	now := time.Now()
	var ev *structs.TaskEvent
	if healthy {
		p.mu.Lock()
		p.healthy = true
		p.mu.Unlock()
		ev = structs.NewTaskEvent(structs.TaskPluginHealthy, now.UnixNano()).SetMessage("plugin: " + p.cfg.ID)
	} else {
		if reason == "" {
			reason = "Unknown Reason"
		}
		ev = structs.NewTaskEvent(structs.TaskPluginUnhealthy, now.UnixNano()).SetMessage("Error: " + reason)
	}
	r.event(name, ev)
}

// event appends an event to a task's record and reports it.
func (r *allocRunner) event(name string, ev *structs.TaskEvent) {
	r.updateTask(name, func(t *state.TaskRecord) { t.Events = structs.AppendTaskEvent(t.Events, ev) })
	r.report()
}

// pluginTaskEnded handles the end of a plugin task's run: the instance is
// reported unhealthy at once; the task is restarted with backoff when it
// died on its own and the policy allows it (true is returned), otherwise
// its instance is deregistered.
func (r *allocRunner) pluginTaskEnded(task *structs.Task, t state.TaskRecord) bool {
	p := r.pluginTaskFor(task)
	if p == nil {
		return false
	}
	now := time.Now()
	restart := !t.Stopping && t.FailReason == "" && !r.stopped() && (t.Exit == nil || t.Exit.StartError == "")
	if restart {
		r.m.cfg.Plugins.MarkUnhealthy(p.key, "plugin task exited: "+t.Description)
		var delay time.Duration
		t = r.updateTask(task.Name, func(t *state.TaskRecord) {
			// Restarts within the policy's interval count against it.
			var recent []int64
			for _, at := range t.RestartTimes {
				if now.Sub(time.Unix(0, at)) < pluginRestartPolicy.Interval {
					recent = append(recent, at)
				}
			}
			t.RestartTimes = recent
			if len(recent) >= pluginRestartPolicy.Attempts {
				restart = false
				t.Events = structs.AppendTaskEvent(t.Events, structs.NewTaskEvent(structs.TaskNotRestarting, now.UnixNano()).
					SetDetail("restart_reason", fmt.Sprintf("Exceeded allowed attempts %d in interval %v and mode is \"fail\"",
						pluginRestartPolicy.Attempts, pluginRestartPolicy.Interval)).
					SetDetail("fails_task", "true"))
				return
			}
			delay = r.m.cfg.TaskRestartDelay << len(recent)
			t.RestartTimes = append(t.RestartTimes, now.UnixNano())
			t.Restarts++
			t.State, t.Failed, t.Stopping = state.TaskPending, false, false
			t.RestartAt = now.Add(delay).UnixNano()
			t.Events = structs.AppendTaskEvent(t.Events, structs.NewTaskEvent(structs.TaskRestarting, now.UnixNano()).
				SetDetail("start_delay", delay.String()).SetDetail("restart_reason", structs.ReasonWithinPolicy))
		})
		if restart {
			r.logger.Info("plugin task ended; restarting it", "task", task.Name, "plugin_id", p.cfg.ID, "delay", delay, "outcome", t.Description)
			r.report()
			return true
		}
	}
	r.deregisterPlugin(p)
	r.report()
	return false
}

// deregisterPlugin removes a plugin task's instance from the node, once
// the task is dead for good.
func (r *allocRunner) deregisterPlugin(p *pluginTask) {
	p.mu.Lock()
	registered := p.registered
	p.registered = false
	p.mu.Unlock()
	if registered {
		r.m.cfg.Plugins.Deregister(p.key)
	}
	// The task is dead for good: its socket directory goes too.
	if err := os.RemoveAll(p.dir); err != nil {
		r.logger.Warn("removing a plugin task's socket directory", "dir", p.dir, "error", err)
	}
}

// deregisterPlugins removes every plugin instance of the allocation's
// tasks, once it ended.
func (r *allocRunner) deregisterPlugins() {
	r.mu.Lock()
	ps := make([]*pluginTask, 0, len(r.plugins))
	for _, p := range r.plugins {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		r.deregisterPlugin(p)
	}
}

// exitDetails annotates a Terminated event as Nomad does.
func exitDetails(ev *structs.TaskEvent, exit *state.TaskExit) *structs.TaskEvent {
	if exit == nil {
		return ev.SetMessage("ended without an exit status")
	}
	ev.SetDetail("exit_code", strconv.Itoa(exit.ExitCode))
	if exit.Signal != "" {
		ev.SetDetail("signal", exit.Signal)
	}
	return ev
}
