package gctune

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"testing"
	"testing/fstest"
	"time"

	"github.com/volplane/volplane/testutil"
)

const mib = 1 << 20

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		live, budget uint64
		max, want    int
	}{
		{live: 100 * mib, budget: 1000 * mib, max: 400, want: 400}, // room for 900%: capped
		{live: 200 * mib, budget: 1000 * mib, max: 400, want: 400}, // exactly 400%
		{live: 250 * mib, budget: 1000 * mib, max: 400, want: 300},
		{live: 400 * mib, budget: 1000 * mib, max: 400, want: 150},
		{live: 300 * mib, budget: 1000 * mib, max: 400, want: 233}, // 233.3...
		{live: 500 * mib, budget: 1000 * mib, max: 400, want: 100}, // half the budget: the default
		{live: 700 * mib, budget: 1000 * mib, max: 400, want: 100}, // never below the default
		{live: 2000 * mib, budget: 1000 * mib, max: 400, want: 100},
		{live: 0, budget: 1000 * mib, max: 400, want: 400},
		{live: 10 * mib, budget: 1000 * mib, max: 150, want: 150},
		{live: 1, budget: math.MaxUint64, max: 400, want: 400}, // no overflow
	} {
		if got := Percent(tc.live, tc.budget, tc.max); got != tc.want {
			t.Errorf("Percent(live %d, budget %d, max %d) = %d, want %d", tc.live, tc.budget, tc.max, got, tc.want)
		}
	}
}

func meminfo(kb int) *fstest.MapFile {
	return &fstest.MapFile{Data: fmt.Appendf(nil, "MemTotal:       %d kB\nMemFree:         1000 kB\n", kb)}
}

func TestAvailable(t *testing.T) {
	const (
		v1Cgroup = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n"
		v1File   = "sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes"
		v2Cgroup = "0::/system.slice/volplane.service\n"
		v2File   = "sys/fs/cgroup/system.slice/volplane.service/memory.max"
		machine  = "the machine's memory (8192 MiB)"
	)
	for _, tc := range []struct {
		name                     string
		cgroup, limitFile, limit string
		runtimeLimit             int64
		want                     uint64
		wantFrom                 string
	}{
		{name: "machine only", want: 8 << 30, wantFrom: machine},
		{name: "v1 cgroup of the process", cgroup: v1Cgroup, limitFile: v1File, limit: "2147483648",
			want: 2 << 30, wantFrom: "the cgroup's memory limit (2048 MiB, /" + v1File + ")"},
		{name: "v1 without a limit", cgroup: v1Cgroup, limitFile: v1File, limit: "9223372036854771712",
			want: 8 << 30, wantFrom: machine},
		{name: "v2 cgroup of the process", cgroup: v2Cgroup, limitFile: v2File, limit: "1073741824",
			want: 1 << 30, wantFrom: "the cgroup's memory limit (1024 MiB, /" + v2File + ")"},
		{name: "v2 max", cgroup: v2Cgroup, limitFile: v2File, limit: "max", want: 8 << 30, wantFrom: machine},
		{name: "namespaced v2 root", cgroup: "0::/\n", limitFile: "sys/fs/cgroup/memory.max", limit: "536870912",
			want: 512 << 20, wantFrom: "the cgroup's memory limit (512 MiB, /sys/fs/cgroup/memory.max)"},
		{name: "GOMEMLIMIT below the cgroup's", cgroup: v2Cgroup, limitFile: v2File, limit: "1073741824",
			runtimeLimit: 256 << 20, want: 256 << 20, wantFrom: "GOMEMLIMIT (256 MiB)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := fstest.MapFS{"proc/meminfo": meminfo(8 << 20)}
			if tc.cgroup != "" {
				files["proc/self/cgroup"] = &fstest.MapFile{Data: []byte(tc.cgroup)}
			}
			if tc.limitFile != "" {
				files[tc.limitFile] = &fstest.MapFile{Data: []byte(tc.limit + "\n")}
			}
			runtimeLimit := tc.runtimeLimit
			if runtimeLimit == 0 {
				runtimeLimit = math.MaxInt64 // no GOMEMLIMIT
			}
			got, from, err := available(files, runtimeLimit)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || from != tc.wantFrom {
				t.Errorf("available = %d from %q, want %d from %q", got, from, tc.want, tc.wantFrom)
			}
		})
	}
}

func TestAvailable_Errors(t *testing.T) {
	for name, files := range map[string]fstest.MapFS{
		"no meminfo":   {},
		"no MemTotal":  {"proc/meminfo": {Data: []byte("MemFree: 10 kB\n")}},
		"bad MemTotal": {"proc/meminfo": {Data: []byte("MemTotal: lots kB\n")}},
	} {
		if _, _, err := available(files, math.MaxInt64); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// afterNextFinalizers runs a collection and waits until a finalizer queued
// by it has run: the tuner's, queued by the same collection and run by the
// same goroutine, has then been given its turn too.
func afterNextFinalizers(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	marker := &sentinel{}
	runtime.SetFinalizer(marker, func(*sentinel) { close(done) })
	marker = nil
	runtime.GC()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no finalizer ran within 30s of a collection")
	}
}

func TestStart(t *testing.T) {
	if _, ok := os.LookupEnv("GOGC"); ok {
		t.Skip("GOGC is set in this test's environment; TestStart_EnvSet covers it")
	}
	before := GCPercent()

	// A budget far above the heap: the most the tuner allows.
	tu, err := Start(Config{Budget: 1 << 40, MaxPercent: 300})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tu.Stop)
	if _, err := Start(Config{Budget: 1 << 40}); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second tuner started beside the first: %v", err)
	}
	if got := GCPercent(); got != 300 || tu.Percent() != 300 {
		t.Fatalf("GOGC %d (tuner says %d), want 300 with a budget far above the heap", got, tu.Percent())
	}
	tunes := tu.Tunes()
	runtime.GC()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		return tu.Tunes() > tunes, fmt.Errorf("the tuner ran %d times, not again after a collection", tu.Tunes())
	})

	tu.Stop()
	if got := GCPercent(); got != before {
		t.Fatalf("GOGC %d after Stop, want %d as before Start", got, before)
	}
	stopped := tu.Tunes()
	afterNextFinalizers(t)
	afterNextFinalizers(t)
	if got := GCPercent(); got != before || tu.Tunes() != stopped {
		t.Fatalf("after Stop and two collections: GOGC %d (want %d), tuned %d times (want %d)", got, before, tu.Tunes(), stopped)
	}

	// A budget below the heap: the default, whatever the max.
	tu2, err := Start(Config{Budget: 1, MaxPercent: 300})
	if err != nil {
		t.Fatal(err)
	}
	defer tu2.Stop()
	if got := GCPercent(); got != MinPercent {
		t.Fatalf("GOGC %d with a budget below the heap, want %d", got, MinPercent)
	}
}

func TestStart_Refusals(t *testing.T) {
	if _, err := Start(Config{Budget: 1 << 30, MaxPercent: 50}); err == nil {
		t.Error("a max percent below 100 was taken")
	}
	t.Setenv("GOGC", "200")
	before := GCPercent()
	if _, err := Start(Config{Budget: 1 << 30}); !errors.Is(err, ErrEnvSet) {
		t.Errorf("Start with GOGC set = %v, want ErrEnvSet", err)
	}
	if got := GCPercent(); got != before {
		t.Errorf("a refused Start changed GOGC to %d from %d", got, before)
	}
}
