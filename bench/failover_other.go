//go:build !unix

package bench

import (
	"context"
	"errors"
	"os"
	"os/exec"
)

// runFailover needs SIGKILL and SIGSTOP.
func runFailover(context.Context, *Config, string, *Report) error {
	return errors.New("the failover phase needs a unix system (it stops processes with SIGKILL and SIGSTOP)")
}

// dieWithParent and thaw have nothing to do without unix signals.
func dieWithParent(*exec.Cmd) {}
func thaw(*os.Process)        {}
