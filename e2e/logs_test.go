package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// A task's logs through the CLI, from the client that ran it through the
// server: `alloc logs` prints what the task wrote, and with -f it follows
// the log until the allocation stops, then exits by itself.
func TestE2E_AllocLogsFollowEndsWhenTheAllocationStops(t *testing.T) {
	t.Parallel()
	a := startDevAgent(t, t.TempDir())
	for _, id := range []string{"vol[0]", "vol[1]", "vol[2]"} {
		res := a.cli(t, "volume create", writeDevVolumeSpec(t, id))
		must.Zero(t, res.Code, must.Sprint(res))
	}
	// job run follows the job until its allocations run.
	res := a.cli(t, "job run", filepath.Join("..", "examples", "job-per-alloc.hcl"))
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, `Job "web": 3 running`)

	var allocs []*structs.Allocation
	must.NoError(t, getJSON(a.httpAddr+"/v1/job/web/allocations", &allocs))
	must.Len(t, 3, allocs)
	alloc := allocs[0]
	want := fmt.Sprintf("%s wrote ", alloc.Name)

	// The task's output is in its log a moment after it started.
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		res = a.cli(t, "alloc logs", alloc.ID[:8])
		return res.Code == 0 && strings.Contains(res.Stdout, want), fmt.Errorf("alloc logs: %s", res)
	})
	res = a.cli(t, "alloc logs", "-tail", "-n", "1", alloc.ID, "writer")
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrHasPrefix(t, want, res.Stdout)
	res = a.cli(t, "alloc logs", "-stderr", alloc.ID)
	must.Zero(t, res.Code, must.Sprint(res))
	must.Eq(t, "", res.Stdout)
	res = a.cli(t, "alloc logs", alloc.ID, "nope")
	must.One(t, res.Code)
	must.StrContains(t, res.Stderr, `has no task "nope" (its tasks: writer)`)

	// -f keeps going while the task runs...
	out := &testutil.Buffer{}
	follow := exec.Command(volplaneBin, "alloc", "logs", "-address="+a.httpAddr, "-f", alloc.ID)
	follow.Env = cliEnv()
	follow.Stdout, follow.Stderr = out, out
	must.NoError(t, follow.Start())
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	t.Cleanup(func() {
		_ = follow.Process.Kill()
	})
	testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
		return strings.Contains(out.String(), want), fmt.Errorf("alloc logs -f printed %q", out.String())
	})
	select {
	case err := <-done:
		t.Fatalf("alloc logs -f ended while the task runs: %v\n%s", err, out.String())
	default:
	}

	// ...and ends once the allocation stopped. job stop follows the
	// release of the job's claims until each is free.
	res = a.cli(t, "job stop", "web")
	must.Zero(t, res.Code, must.Sprint(res))
	must.StrContains(t, res.Stdout, "Following the release of 3 volume claims of job \"web\"")
	must.StrContains(t, res.Stdout, "Every volume claim of job \"web\" is free")
	select {
	case err := <-done:
		must.NoError(t, err, must.Sprintf("alloc logs -f exits 0 once the allocation stopped:\n%s", out.String()))
	case <-time.After(2 * leaderTimeout):
		t.Fatalf("alloc logs -f did not end after the allocation stopped:\n%s", out.String())
	}
	must.StrHasPrefix(t, want, out.String())
}
