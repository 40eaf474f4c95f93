//go:build unix

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/volplane/volplane/structs"
)

const (
	// failoverStartTimeout bounds the wait for a server process to serve
	// and for the cluster to agree on a leader.
	failoverStartTimeout = 60 * time.Second
	// failoverGiveUp bounds the wait for the first successful write of a
	// round.
	failoverGiveUp = 30 * time.Second
	// failoverPoll paces the writes and the leader polls.
	failoverPoll = 10 * time.Millisecond
)

// runFailover starts a cluster of 3 `volplane agent -server` processes
// (Config.Binary, this binary by default) on free loopback ports, and in
// Config.FailoverRounds rounds of each kind stops the leader, by SIGKILL
// or by SIGSTOP, and measures the time from the signal until a write (a
// namespace upsert through the HTTP API of a surviving server, the writes
// going round the survivors) first succeeds. After each round the stopped
// server is restarted or thawed and the cluster waits until all three
// agree on a leader again.
func runFailover(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	bin := cfg.Binary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("finding the volplane binary: %w", err)
		}
	}
	cfg.progress("failover: starting 3 server processes of %s", bin)
	c, err := startProcCluster(ctx, bin, filepath.Join(dir, "failover"), 3, cfg.serverHCL(cfg.RaftMultiplier))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.close()) }()
	if _, err := c.waitLeader(ctx); err != nil {
		return err
	}
	var kills, stops []time.Duration
	for round := range cfg.FailoverRounds {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
			took, err := c.failoverRound(ctx, cfg, round, sig)
			if err != nil {
				return fmt.Errorf("round %d (%v): %w", round+1, sig, err)
			}
			if sig == syscall.SIGKILL {
				kills = append(kills, took)
			} else {
				stops = append(stops, took)
			}
		}
	}
	rep.addFailover(PhaseFailoverKill, kills, FailoverTargetKill, cfg.RaftMultiplier,
		"from SIGKILL of the leader to the first successful write through a survivor")
	rep.addFailover(PhaseFailoverStop, stops, FailoverTargetStop, cfg.RaftMultiplier,
		"from SIGSTOP of the leader to the first successful write through a survivor (writes forwarded to the frozen leader included)")
	return nil
}

// failoverRound stops the leader with sig, measures the time to the first
// successful write, then brings the server back.
func (c *procCluster) failoverRound(ctx context.Context, cfg *Config, round int, sig syscall.Signal) (time.Duration, error) {
	leader, err := c.waitLeader(ctx)
	if err != nil {
		return 0, err
	}
	var survivors []*procServer
	for _, s := range c.servers {
		if s != leader {
			survivors = append(survivors, s)
		}
	}
	// A write through each survivor first, so their connections to the
	// leader are open, as in a cluster that was serving.
	for i, s := range survivors {
		if err := s.write(fmt.Sprintf("warm-%d-%d-%d", round, sig, i)); err != nil {
			return 0, fmt.Errorf("write through %s before the failover: %w", s.name, err)
		}
	}
	start := time.Now()
	if err := leader.signal(sig); err != nil {
		return 0, err
	}
	if sig == syscall.SIGSTOP {
		// The writes start once it is frozen; the clock at the signal.
		leader.mu.Lock()
		pid := leader.cmd.Process.Pid
		leader.mu.Unlock()
		if err := waitStopped(pid, time.Second); err != nil {
			return 0, err
		}
	}
	took, err := firstWrite(ctx, survivors, fmt.Sprintf("after-%d-%d", round, sig), start)
	if err != nil {
		return 0, err
	}
	cfg.progress("failover: round %d: first write %v after %s of the leader %s", round+1, took.Round(time.Millisecond), sigName(sig), leader.name)
	switch sig {
	case syscall.SIGKILL:
		if err := leader.wait(); err != nil {
			return 0, err
		}
		if err := c.start(leader); err != nil {
			return 0, err
		}
	default:
		if err := leader.signal(syscall.SIGCONT); err != nil {
			return 0, err
		}
	}
	// All three agree again before the next round.
	if _, err := c.waitLeader(ctx); err != nil {
		return 0, err
	}
	return took, nil
}

// firstWrite sends writes through the survivors, one at a time, going
// round them, until one succeeds, and returns when it did, from start.
func firstWrite(ctx context.Context, survivors []*procServer, name string, start time.Time) (time.Duration, error) {
	var last error
	for i := 0; time.Since(start) < failoverGiveUp; i++ {
		s := survivors[i%len(survivors)]
		if last = s.write(fmt.Sprintf("%s-%d", name, i)); last == nil {
			return time.Since(start), nil
		}
		if err := sleep(ctx, failoverPoll); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("no write succeeded within %s: %w", failoverGiveUp, last)
}

func (s *procServer) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("sending %v to server %s: %w", sig, s.name, err)
	}
	return nil
}

// wait waits for the process to exit.
func (s *procServer) wait() error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-time.After(failoverStartTimeout):
		return fmt.Errorf("server %s did not exit", s.name)
	}
}

// write upserts a namespace through the server's HTTP API.
func (s *procServer) write(name string) error {
	_, err := s.client.Namespaces().Register(&structs.Namespace{Name: name}, nil)
	return err
}

// leader is the server's answer to /v1/status/leader, "" when it has none
// or does not answer.
func (s *procServer) leader() string {
	l, err := s.client.Status().Leader()
	if err != nil {
		return ""
	}
	return l
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGSTOP"
}

// thaw continues a stopped process (SIGCONT), so that it can take the
// signals that end it.
func thaw(p *os.Process) { _ = p.Signal(syscall.SIGCONT) }
