package allocrunner

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/client/state"
)

func TestVolumeEnvVar(t *testing.T) {
	for alias, want := range map[string]string{
		"data":       "VOLPLANE_VOLUME_DATA",
		"my-vol.2":   "VOLPLANE_VOLUME_MY_VOL_2",
		"Logs":       "VOLPLANE_VOLUME_LOGS",
		"ünïcode x!": "VOLPLANE_VOLUME__N_CODE_X_",
	} {
		must.Eq(t, want, volumeEnvVar(alias), must.Sprint(alias))
	}
}

// judgeExit tells a task's own failure from its stop by the client.
func TestJudgeExit(t *testing.T) {
	for _, tc := range []struct {
		stopping bool
		exit     *state.TaskExit
		failed   bool
		want     string
	}{
		{exit: &state.TaskExit{}, want: "task t: exit code 0"},
		{exit: &state.TaskExit{ExitCode: 2}, failed: true, want: "task t: exit code 2"},
		{exit: &state.TaskExit{ExitCode: -1, Signal: "SIGSEGV"}, failed: true, want: "task t: killed by SIGSEGV"},
		{exit: &state.TaskExit{ExitCode: -1, StartError: "exec: boom"}, failed: true, want: "task t: exec: boom"},
		{failed: true, want: "task t: ended without an exit status (its supervisor was killed)"},
		{stopping: true, exit: &state.TaskExit{ExitCode: -1, Signal: "SIGTERM"}, want: "task t: stopped (SIGTERM)"},
		{stopping: true, exit: &state.TaskExit{ExitCode: 143}, want: "task t: stopped (exit code 143)"},
		{stopping: true, want: "task t: killed"},
	} {
		tr := &state.TaskRecord{Name: "t", State: state.TaskRunning, Stopping: tc.stopping}
		judgeExit(tr, tc.exit)
		must.Eq(t, state.TaskDead, tr.State)
		must.Eq(t, tc.failed, tr.Failed, must.Sprint(tc.want))
		must.Eq(t, tc.want, tr.Description)
	}
}
