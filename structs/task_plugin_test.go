package structs

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shoenig/test/must"
)

// TestTaskCSIPluginConfig_Validate checks the csi_plugin block's rules and
// their messages (the first three are Nomad's).
func TestTaskCSIPluginConfig_Validate(t *testing.T) {
	cases := []struct {
		name string
		cfg  TaskCSIPluginConfig
		want string // "" = valid
	}{
		{name: "defaults", cfg: TaskCSIPluginConfig{ID: "dev", Type: CSIPluginTypeNode}},
		{name: "no id", cfg: TaskCSIPluginConfig{Type: CSIPluginTypeNode},
			want: `group "g" task "t": CSIPluginConfig must have a non-empty PluginID`},
		{name: "bad id", cfg: TaskCSIPluginConfig{ID: "a/b", Type: CSIPluginTypeNode},
			want: `group "g" task "t": CSIPluginConfig: plugin id`},
		{name: "no type", cfg: TaskCSIPluginConfig{ID: "dev"},
			want: `CSIPluginConfig PluginType must be one of 'node', 'controller', or 'monolith', got: ""`},
		{name: "unknown type", cfg: TaskCSIPluginConfig{ID: "dev", Type: "storage"},
			want: `CSIPluginConfig PluginType must be one of 'node', 'controller', or 'monolith', got: "storage"`},
		{name: "staging under the socket dir", cfg: TaskCSIPluginConfig{ID: "dev", Type: CSIPluginTypeNode, MountDir: "/csi", StagePublishBaseDir: "/csi/stage"},
			want: `CSIPluginConfig StagePublishBaseDir must not be a subdirectory of MountDir, got: StagePublishBaseDir="/csi/stage" MountDir="/csi"`},
		{name: "relative mount dir", cfg: TaskCSIPluginConfig{ID: "dev", Type: CSIPluginTypeNode, MountDir: "csi"},
			want: `CSIPluginConfig MountDir must be an absolute path, got: "csi"`},
		{name: "negative health timeout", cfg: TaskCSIPluginConfig{ID: "dev", Type: CSIPluginTypeNode, HealthTimeout: -time.Second},
			want: "CSIPluginConfig HealthTimeout must not be negative"},
		{name: "huge health timeout", cfg: TaskCSIPluginConfig{ID: "dev", Type: CSIPluginTypeNode, HealthTimeout: 2 * time.Hour},
			want: "CSIPluginConfig HealthTimeout 2h0m0s is over the limit of 1h0m0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := validJob()
			j.Type = JobTypeSystem
			j.TaskGroups[0].Volumes = nil
			j.TaskGroups[0].Tasks[0].VolumeMounts = nil
			cfg := tc.cfg
			j.TaskGroups[0].Tasks[0].CSIPluginConfig = &cfg
			j.Canonicalize()
			err := j.Validate()
			if tc.want == "" {
				must.NoError(t, err)
				must.Eq(t, DefaultCSIPluginHealthTimeout, cfg.HealthTimeout)
				must.Eq(t, "/csi", cfg.MountDir)
				return
			}
			must.ErrorContains(t, err, tc.want)
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
		})
	}
}

// TestJob_Warnings_NodePluginOutsideSystemJob: a node or monolith plugin
// in a service job is valid, with advice; a controller is not advised.
func TestJob_Warnings_NodePluginOutsideSystemJob(t *testing.T) {
	j := validJob()
	j.TaskGroups[0].Tasks[0].CSIPluginConfig = &TaskCSIPluginConfig{ID: "dev", Type: CSIPluginTypeNode}
	must.SliceLen(t, 1, j.Warnings())
	must.StrContains(t, j.Warnings()[0], `node plugin "dev" runs only where the scheduler places it`)
	j.TaskGroups[0].Tasks[0].CSIPluginConfig.Type = CSIPluginTypeController
	must.SliceEmpty(t, j.Warnings())
	j.TaskGroups[0].Tasks[0].CSIPluginConfig.Type = CSIPluginTypeMonolith
	j.Type = JobTypeSystem
	must.SliceEmpty(t, j.Warnings())
}

// TestTaskState_Events keeps the last MaxTaskEvents, copies deeply, and
// refuses an oversized report.
func TestTaskState_Events(t *testing.T) {
	ts := &TaskState{State: TaskStateRunning}
	for i := range MaxTaskEvents + 3 {
		ts.Events = AppendTaskEvent(ts.Events, NewTaskEvent(TaskStarted, int64(i)))
	}
	must.SliceLen(t, MaxTaskEvents, ts.Events)
	must.Eq(t, int64(3), ts.Events[0].Time)
	must.Eq(t, "Task started by client", ts.Events[0].DisplayMessage)

	states := CopyStates(map[string]*TaskState{"t": ts})
	states["t"].Events[0].Details["x"] = "y"
	must.MapNotContainsKey(t, ts.Events[0].Details, "x")
	must.True(t, ts.Equal(ts.Copy()))
	must.False(t, ts.Equal(states["t"]))

	ts.Events = append(ts.Events, NewTaskEvent(TaskStarted, 99))
	a := &Allocation{ID: "a", ClientStatus: AllocClientStatusRunning}
	next := a.Copy()
	next.TaskStates = map[string]*TaskState{"t": ts}
	_, err := a.MergeClientUpdate(next)
	must.ErrorContains(t, err, `allocation "a" task "t": 11 events; a client keeps at most 10`)
}

// TestTaskEvent_DisplayMessages: the lines Nomad shows for its events.
func TestTaskEvent_DisplayMessages(t *testing.T) {
	term := NewTaskEvent(TaskTerminated, 1).SetDetail("exit_code", "-1").SetDetail("signal", "SIGKILL")
	term.PopulateDisplayMessage()
	must.Eq(t, "Exit Code: -1, Signal: SIGKILL", term.DisplayMessage)
	rs := NewTaskEvent(TaskRestarting, 1).SetDetail("start_delay", "1s").SetDetail("restart_reason", ReasonWithinPolicy)
	rs.PopulateDisplayMessage()
	must.Eq(t, "Task restarting in 1s", rs.DisplayMessage)
	rs = NewTaskEvent(TaskRestarting, 1).SetDetail("start_delay", "2s").SetDetail("restart_reason", "plugin unhealthy")
	rs.PopulateDisplayMessage()
	must.Eq(t, "plugin unhealthy - Task restarting in 2s", rs.DisplayMessage)
	h := NewTaskEvent(TaskPluginHealthy, 1).SetMessage("plugin: dev")
	h.PopulateDisplayMessage()
	must.Eq(t, "plugin: dev", h.DisplayMessage)
}

// TestTaskEvent_LongMessagesAreCut: whatever a plugin answers, an event
// stays within what a client's report may carry.
func TestTaskEvent_LongMessagesAreCut(t *testing.T) {
	long := strings.Repeat("é", 10_000)
	e := NewTaskEvent(TaskPluginUnhealthy, 1).SetMessage("Error: " + long)
	e.PopulateDisplayMessage()
	ts := &TaskState{Events: []*TaskEvent{e}}
	must.NoError(t, ts.validateReport("a", "t"))
	must.True(t, utf8.ValidString(e.Message))
	must.StrHasSuffix(t, "...", e.Message)
}
