package server

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

// stuckFuture is a Raft future that is never answered, as hashicorp/raft
// leaves those it dropped on shutdown; answered ones answer at once.
type stuckFuture struct{ answer chan error }

func (f stuckFuture) Error() error { return <-f.answer }

func answered(err error) stuckFuture {
	f := stuckFuture{answer: make(chan error, 1)}
	f.answer <- err
	return f
}

func TestWaitFuture(t *testing.T) {
	t.Parallel()
	s := &Server{raftStopped: make(chan struct{}), logger: hclog.NewNullLogger()}
	must.NoError(t, s.waitFuture(answered(nil)))

	// A future Raft never answers returns once Raft has shut down.
	stuck := stuckFuture{answer: make(chan error)}
	got := make(chan error, 1)
	go func() { got <- s.waitFuture(stuck) }()
	select {
	case err := <-got:
		t.Fatalf("waitFuture returned %v before Raft shut down", err)
	case <-time.After(50 * time.Millisecond):
	}
	s.raftStoppedAt = time.Now()
	close(s.raftStopped)
	// After the shutdown, an answered future still gives its answer
	// (within the grace, which the waits below use up).
	want := errors.New("applied with an error")
	must.ErrorIs(t, s.waitFuture(answered(want)), want)
	select {
	case err := <-got:
		must.ErrorIs(t, err, errRaftStopped)
	case <-time.After(30 * time.Second):
		t.Fatal("waitFuture still waits after Raft shut down")
	}

	// Waits after the shutdown share its grace: ten dropped futures waited
	// on in turn (a batch's, on the path of older servers) take about a
	// second, not one each.
	start := time.Now()
	for range 10 {
		must.ErrorIs(t, s.waitFuture(stuckFuture{answer: make(chan error)}), errRaftStopped)
	}
	must.Less(t, 5*time.Second, time.Since(start))

	// The caller is told its write may have been applied.
	err := raftError(errRaftStopped)
	must.StrContains(t, err.Error(), "may or may not have been applied")
	must.False(t, errors.Is(err, structs.ErrNoLeader))
}

// blockingFSM holds the state machine's applies while armed, so that the
// entries committed meanwhile queue in Raft: the first batch it is handed
// (with only set, the first that holds an entry only matches) waits until
// release is closed.
type blockingFSM struct {
	raft.BatchingFSM
	armed   atomic.Bool
	only    func(*raft.Log) bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlockingFSM() *blockingFSM {
	return &blockingFSM{entered: make(chan struct{}), release: make(chan struct{})}
}

// unblock lets the held batch, and every later one, through.
func (f *blockingFSM) unblock() { f.once.Do(func() { close(f.release) }) }

func (f *blockingFSM) ApplyBatch(logs []*raft.Log) []any {
	if f.armed.Load() && (f.only == nil || slices.ContainsFunc(logs, f.only)) && f.armed.CompareAndSwap(true, false) {
		close(f.entered)
		<-f.release
	}
	return f.BatchingFSM.ApplyBatch(logs)
}

// TestShutdown_AnswersWritesRaftDropped: entries committed while the state
// machine is busy queue in Raft; hashicorp/raft drops that queue when it
// shuts down, without answering their futures. Every write must still
// return, and the server must shut down.
func TestShutdown_AnswersWritesRaftDropped(t *testing.T) {
	t.Parallel()
	machine := newBlockingFSM()
	s := TestServer(t, func(c *Config) {
		c.wrapFSM = func(f raft.BatchingFSM) raft.BatchingFSM {
			machine.BatchingFSM = f
			return machine
		}
	})
	// Registered after the server's shutdown, so run before it: a failed
	// test must not leave Raft's shutdown waiting on the state machine.
	t.Cleanup(machine.unblock)
	WaitForLeader(t, s)

	// Each write committed on its own, so that each is its own batch in
	// Raft's queue: the first holds the state machine, the others queue.
	const writes = 10
	results := make(chan error, writes)
	machine.armed.Store(true)
	for i := range writes {
		req := &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{{Name: fmt.Sprintf("queued-%d", i)}}}
		before := s.raft.LastIndex()
		go func() {
			_, _, err := s.raftApply(structs.NamespaceUpsertRequestType, req)
			results <- err
		}()
		waitFor(t, 30*time.Second, func() (bool, error) {
			if c := s.raft.CommitIndex(); c <= before {
				return false, fmt.Errorf("write %d: commit index %d, last index before it %d", i, c, before)
			}
			return true, nil
		})
		if i == 0 {
			<-machine.entered
		}
	}

	shutdown := make(chan error, 1)
	go func() { shutdown <- s.Shutdown() }()
	waitFor(t, 30*time.Second, func() (bool, error) {
		return s.raft.State() == raft.Shutdown, fmt.Errorf("raft is %s", s.raft.State())
	})
	machine.unblock()

	select {
	case err := <-shutdown:
		must.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not shut down: a write Raft dropped still holds it")
	}
	dropped := 0
	for i := range writes {
		select {
		case err := <-results:
			switch {
			case err == nil:
			case strings.Contains(err.Error(), "shut down while committing"):
				dropped++
			default:
				must.ErrorIs(t, err, structs.ErrNoLeader)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("write %d of %d never returned", i+1, writes)
		}
	}
	t.Logf("%d of %d writes were dropped by Raft and answered so", dropped, writes)
}

// shutdownFuture is an apply Raft answered with ErrRaftShutdown, with the
// index it gave the entry (0: refused before the log).
type shutdownFuture struct {
	stuckFuture
	index uint64
}

func (f shutdownFuture) Index() uint64 { return f.index }
func (f shutdownFuture) Response() any { return nil }

// TestApplyResult_ShutdownAfterTheLog: "raft is already shutdown" is "no
// leader" (sent again by a forwarder) only for an entry refused before
// Raft's log; one written to it may be applied by the next leader.
func TestApplyResult_ShutdownAfterTheLog(t *testing.T) {
	t.Parallel()
	s := &Server{raftStopped: make(chan struct{}), logger: hclog.NewNullLogger()}

	_, _, err := s.applyResult(shutdownFuture{answered(raft.ErrRaftShutdown), 0})
	must.ErrorIs(t, err, structs.ErrNoLeader)
	must.True(t, structs.IsRetryable(err))

	_, _, err = s.applyResult(shutdownFuture{answered(raft.ErrRaftShutdown), 42})
	must.StrContains(t, err.Error(), "may or may not have been applied")
	must.False(t, structs.IsRetryable(err))
}

// BenchmarkWaitFuture: what waitFuture's goroutine and select add to a
// wait on a Raft future, against f.Error() alone, for a future answered by
// another goroutine as Raft answers its futures (a commit takes
// milliseconds; this is the overhead per entry or request that waits).
func BenchmarkWaitFuture(b *testing.B) {
	s := &Server{raftStopped: make(chan struct{}), logger: hclog.NewNullLogger()}
	for _, mode := range []string{"error", "waitFuture"} {
		b.Run(mode, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f := stuckFuture{answer: make(chan error, 1)}
				go func() { f.answer <- nil }()
				var err error
				if mode == "error" {
					err = f.Error()
				} else {
					err = s.waitFuture(f)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
