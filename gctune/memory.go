package gctune

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// budgetShare is the part of the memory available that DefaultBudget
// gives the heap: the rest is for the goroutine stacks, the Raft log cache,
// the kernel's page cache of the Raft log and snapshots, and the
// collector's own slack.
const budgetShare = 4

// DefaultBudget is a quarter of the memory this process may use (see
// Available), with where that figure came from.
func DefaultBudget() (uint64, string, error) {
	avail, from, err := Available()
	if err != nil {
		return 0, "", err
	}
	return avail / budgetShare, "a quarter of " + from, nil
}

// Available is the memory this process may use: the least of the machine's
// (MemTotal in /proc/meminfo), the limit of its memory cgroup (v2
// memory.max or v1 memory.limit_in_bytes, where one is set) and the Go
// runtime's soft limit (GOMEMLIMIT, where set). It names the one it chose.
func Available() (uint64, string, error) {
	return available(os.DirFS("/"), debug.SetMemoryLimit(-1))
}

// available is Available over the files of root, with the runtime's memory
// limit given (math.MaxInt64 when there is none).
func available(root fs.FS, runtimeLimit int64) (uint64, string, error) {
	total, err := memTotal(root)
	if err != nil {
		return 0, "", fmt.Errorf("gc tuning: the machine's memory: %w", err)
	}
	avail, from := total, fmt.Sprintf("the machine's memory (%d MiB)", total>>20)
	if limit, file, ok := cgroupLimit(root); ok && limit < avail {
		avail, from = limit, fmt.Sprintf("the cgroup's memory limit (%d MiB, %s)", limit>>20, file)
	}
	if runtimeLimit > 0 && runtimeLimit != math.MaxInt64 && uint64(runtimeLimit) < avail {
		avail, from = uint64(runtimeLimit), fmt.Sprintf("GOMEMLIMIT (%d MiB)", runtimeLimit>>20)
	}
	return avail, from, nil
}

// memTotal reads MemTotal from /proc/meminfo.
func memTotal(root fs.FS) (uint64, error) {
	b, err := fs.ReadFile(root, "proc/meminfo")
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb == 0 {
			return 0, fmt.Errorf("proc/meminfo: MemTotal %q is not a size in kB", strings.TrimSpace(rest))
		}
		return kb << 10, nil
	}
	return 0, errors.New("proc/meminfo has no MemTotal")
}

// cgroupLimit is the memory limit of the cgroup this process is in, and the
// file it was read from: the cgroup's own directory as /proc/self/cgroup
// names it, else the hierarchy's root (what a container with a cgroup
// namespace sees as its own). ok is false where no limit is set.
func cgroupLimit(root fs.FS) (limit uint64, file string, ok bool) {
	var candidates []string
	if b, err := fs.ReadFile(root, "proc/self/cgroup"); err == nil {
		for line := range strings.Lines(string(b)) {
			// hierarchy-ID:controllers:path
			parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				candidates = append(candidates, path.Join("sys/fs/cgroup", parts[2], "memory.max"))
			case slices.Contains(strings.Split(parts[1], ","), "memory"):
				candidates = append(candidates, path.Join("sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes"))
			}
		}
	}
	candidates = append(candidates, "sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes")
	for _, f := range candidates {
		b, err := fs.ReadFile(root, f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, "", false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		// cgroup v1 writes "no limit" as the largest page multiple of int64.
		if err != nil || n == 0 || n >= math.MaxInt64/2 {
			return 0, "", false
		}
		return n, "/" + f, true
	}
	return 0, "", false
}
