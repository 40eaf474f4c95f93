//go:build !linux

package execdriver

import (
	"errors"
	"syscall"
)

// procInfo reports whether pid is alive; without /proc, neither its start
// time nor its command line can be checked, so a reused PID looks alive.
func procInfo(pid int) (startTicks uint64, argv0 string, alive bool, err error) {
	err = syscall.Kill(pid, 0)
	if err == nil || errors.Is(err, syscall.EPERM) {
		return 0, "", true, nil
	}
	return 0, "", false, nil
}

// bootID is unknown without /proc.
func bootID() string { return "" }

// IsZombie cannot tell without /proc.
func IsZombie(pid int) bool { return false }

// startTicksOf cannot tell a process's start time without /proc; it
// reports whether there is a process with PID pid.
func startTicksOf(pid int) (uint64, bool) {
	err := syscall.Kill(pid, 0)
	return 0, err == nil || errors.Is(err, syscall.EPERM)
}

// killGroupLeft sends SIGKILL to process group pgid and reports whether
// it had any member left (without /proc, a zombie counts).
func killGroupLeft(pgid int) bool {
	return syscall.Kill(-pgid, syscall.SIGKILL) == nil
}

// findShim cannot read other processes' environments without /proc.
func findShim(spec string) (int, bool) { return 0, false }
