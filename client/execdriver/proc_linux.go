//go:build linux

package execdriver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// procInfo reads what identifies a live process beyond its PID, which the
// kernel reuses: its start time (clock ticks since boot, field 22 of
// /proc/PID/stat) and its argv[0]. A zombie or a missing process is not
// alive.
func procInfo(pid int) (startTicks uint64, argv0 string, alive bool, err error) {
	fields, err := statFields(pid)
	if errors.Is(err, os.ErrNotExist) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, err
	}
	// fields[0] is the state (field 3), fields[19] the start time (22).
	if len(fields) < 20 {
		return 0, "", false, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, "", false, nil
	}
	startTicks, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, "", false, fmt.Errorf("/proc/%d/stat: start time: %v", pid, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err == nil {
		argv0, _, _ = strings.Cut(string(cmdline), "\x00")
	}
	return startTicks, argv0, true, nil
}

// statFields returns the fields of /proc/PID/stat that follow the command
// name, from the state (field 3) on. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses: the fields that
// follow start after the last ')'.
func statFields(pid int) ([]string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(stat[i+1:])), nil
}

// bootID identifies the current boot of the machine: a PID and start time
// recorded before a reboot mean nothing after it.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// IsZombie reports whether pid has exited and waits for its parent to reap
// it.
func IsZombie(pid int) bool {
	fields, err := statFields(pid)
	return err == nil && len(fields) > 0 && fields[0] == "Z"
}

// startTicksOf returns the start time of process pid, live or zombie, and
// whether there is a process with that PID.
func startTicksOf(pid int) (uint64, bool) {
	fields, err := statFields(pid)
	if err != nil || len(fields) < 20 {
		return 0, false
	}
	ticks, err := strconv.ParseUint(fields[19], 10, 64)
	return ticks, err == nil
}

// killGroupLeft sends SIGKILL to every live process (zombies aside) of
// process group pgid, and reports whether there was any. Each is
// signalled through a pidfd opened before its group is checked again, so
// that a PID reused meanwhile is not signalled.
func killGroupLeft(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		// Cannot tell who is left: signal the group, and count it as
		// ended once nothing is left to signal.
		return syscall.Kill(-pgid, syscall.SIGKILL) == nil
	}
	left := false
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !inLiveGroup(pid, pgid) {
			continue
		}
		left = true
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, syscall.ESRCH) {
				continue
			}
			// No pidfds (a kernel older than 5.3): the PID was checked
			// a moment ago.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			continue
		}
		if inLiveGroup(pid, pgid) {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		_ = unix.Close(fd)
	}
	return left
}

// inLiveGroup reports whether pid is a live process (not a zombie) of
// process group pgid.
func inLiveGroup(pid, pgid int) bool {
	fields, err := statFields(pid)
	// fields[0] is the state (field 3), fields[2] the group (field 5).
	if err != nil || len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
		return false
	}
	g, err := strconv.Atoi(fields[2])
	return err == nil && g == pgid
}

// findShim returns the live process whose environment names spec as its
// task shim's spec: the shim of a start whose agent stopped before the
// shim's PID file was written.
func findShim(spec string) (int, bool) {
	want := []byte(taskShimEnv + "=" + spec)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				return pid, true
			}
		}
	}
	return 0, false
}
