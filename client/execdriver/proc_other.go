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
