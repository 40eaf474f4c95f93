package structs

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// TestTaskState_ReadsBothTimeEncodings: the HTTP API answers task states
// with Nomad's RFC 3339 times; RPC and older answers carry Unix
// nanoseconds. Both read back to the same state.
func TestTaskState_ReadsBothTimeEncodings(t *testing.T) {
	started := time.Date(2026, 11, 27, 20, 0, 0, 5, time.UTC)
	want := TaskState{State: TaskStateDead, Failed: true, Description: "exit 3", StartedAt: started.UnixNano()}
	for name, body := range map[string]string{
		"nanoseconds": fmt.Sprintf(`{"State":"dead","Failed":true,"Description":"exit 3","StartedAt":%d}`, started.UnixNano()),
		"nomad": `{"State":"dead","Failed":true,"Description":"exit 3","Restarts":0,"StartedAt":"2026-11-27T20:00:00.000000005Z",` +
			`"FinishedAt":"0001-01-01T00:00:00Z","LastRestart":"0001-01-01T00:00:00Z","Events":[]}`,
	} {
		var got TaskState
		must.NoError(t, json.Unmarshal([]byte(body), &got), must.Sprint(name))
		must.Eq(t, want, got, must.Sprint(name))
	}
	var bad TaskState
	must.ErrorContains(t, json.Unmarshal([]byte(`{"StartedAt":"yesterday"}`), &bad), "StartedAt")
}
