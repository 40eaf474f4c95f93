package allocrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/volplane/volplane/client/execdriver"
	"github.com/volplane/volplane/client/state"
)

// The directories of an allocation, under the data dir:
//
//	<data dir>/allocs/<alloc>/                      VOLPLANE_ALLOC_DIR
//	<data dir>/allocs/<alloc>/<task>/               the task's working dir, VOLPLANE_TASK_DIR
//	<data dir>/allocs/<alloc>/logs/<task>.stdout    the task's output
//	<data dir>/allocs/<alloc>/logs/<task>.stderr
//	<data dir>/allocs/<alloc>/.control/<task>.*     the shim's spec, PID file, exit file and log
//
// (The CSI target paths are elsewhere: see state.CSIPaths.)
const allocsDir = "allocs"

// AllocDir is the directory of an allocation's tasks in the data dir
// dataDir.
func AllocDir(dataDir, allocID string) string {
	return filepath.Join(dataDir, allocsDir, state.Segment(allocID))
}

func (m *Manager) allocDir(allocID string) string { return AllocDir(m.cfg.DataDir, allocID) }

// volumeEnvVar is the environment variable that gives a task the path of
// its group's volume alias: VOLPLANE_VOLUME_ and the alias upper-cased,
// with every character other than a letter or a digit replaced by "_".
func volumeEnvVar(alias string) string {
	var b strings.Builder
	b.WriteString("VOLPLANE_VOLUME_")
	for _, r := range strings.ToUpper(alias) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// taskEnv is a task's environment: the agent's own, without its VOLPLANE_
// settings, plus the allocation's and task's identity and directories and,
// for every volume of the group, its published path. There is no
// isolation: every task of the group can reach every volume of the group.
func taskEnv(rec *state.AllocRecord, task string, paths execdriver.TaskPaths, allocDir string, targets map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VOLPLANE_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"VOLPLANE_ALLOC_ID="+rec.ID,
		"VOLPLANE_ALLOC_NAME="+rec.Name,
		"VOLPLANE_JOB_ID="+rec.JobID,
		"VOLPLANE_GROUP_NAME="+rec.TaskGroup,
		"VOLPLANE_TASK_NAME="+task,
		"VOLPLANE_ALLOC_DIR="+allocDir,
		"VOLPLANE_TASK_DIR="+paths.Dir,
	)
	for alias, target := range targets {
		env = append(env, volumeEnvVar(alias)+"="+target)
	}
	return env
}

// judgeExit decides whether a task's end is a failure, and describes it.
// exit is nil when the shim recorded nothing (it was killed too). A task
// the client was stopping did not fail, whatever its end.
func judgeExit(t *state.TaskRecord, exit *state.TaskExit) {
	t.State, t.Exit = state.TaskDead, exit
	switch {
	case t.FailReason != "":
		t.Failed, t.Description = true, fmt.Sprintf("task %s: %s", t.Name, t.FailReason)
	case exit != nil && exit.StartError != "":
		t.Failed, t.Description = true, fmt.Sprintf("task %s: %s", t.Name, exit.StartError)
	case t.Stopping && exit == nil:
		t.Description = fmt.Sprintf("task %s: killed", t.Name)
	case t.Stopping && exit.Signal != "":
		t.Description = fmt.Sprintf("task %s: stopped (%s)", t.Name, exit.Signal)
	case t.Stopping:
		t.Description = fmt.Sprintf("task %s: stopped (exit code %d)", t.Name, exit.ExitCode)
	case exit == nil:
		t.Failed, t.Description = true, fmt.Sprintf("task %s: ended without an exit status (its supervisor was killed)", t.Name)
	case exit.Signal != "":
		t.Failed, t.Description = true, fmt.Sprintf("task %s: killed by %s", t.Name, exit.Signal)
	case exit.ExitCode != 0:
		t.Failed, t.Description = true, fmt.Sprintf("task %s: exit code %d", t.Name, exit.ExitCode)
	default:
		t.Description = fmt.Sprintf("task %s: exit code 0", t.Name)
	}
}
