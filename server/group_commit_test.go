package server

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/testutil"
)

// TestGroupCommit_CallerReturnsAfterItsOwnEntry: the caller that writes
// the first entry returns once its own item is answered, while the items
// that queued behind it go out in the next entries, cut at the count and
// weight bounds (a heavy item alone), each with its own answer.
func TestGroupCommit_CallerReturnsAfterItsOwnEntry(t *testing.T) {
	var mu sync.Mutex
	var entries [][]int
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	g := &groupCommit[int]{
		max:       3,
		weight:    func(i int) int { return i },
		maxWeight: 100,
		write: func(items []int) []error {
			mu.Lock()
			entries = append(entries, items)
			n := len(entries)
			mu.Unlock()
			if n <= len(gates) {
				<-gates[n-1]
			}
			out := make([]error, len(items))
			for i, it := range items {
				if it == 13 {
					out[i] = errors.New("thirteen")
				}
			}
			return out
		},
	}
	entryCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(entries)
	}
	pending := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.pending)
	}

	first := make(chan error, 1)
	go func() { first <- g.commit(1) }()
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return entryCount() == 1, fmt.Errorf("%d entries", entryCount())
	})
	// Queued while the first entry is written: [2 13 4] (the count
	// bound), then [95] (95+8 is over the weight bound), then [8].
	items := []int{2, 13, 4, 95, 8}
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.commit(it)
		}()
		testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
			return pending() == i+1, fmt.Errorf("%d pending", pending())
		})
	}
	close(gates[0])
	select {
	case err := <-first:
		must.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller waits for the entries after its own")
	}
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return entryCount() == 2, fmt.Errorf("%d entries: the second is written after the first caller returned", entryCount())
	})
	close(gates[1])
	wg.Wait()
	must.Eq(t, [][]int{{1}, {2, 13, 4}, {95}, {8}}, entries)
	for i, it := range items {
		if it == 13 {
			must.EqError(t, errs[i], "thirteen")
		} else {
			must.NoError(t, errs[i])
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	must.False(t, g.flushing, must.Sprint("no write in flight once all are answered"))
}

// TestBatchAnswers: a batch entry's outcome becomes each item's answer:
// the write's error for all, the FSM's answer per item, nil for all when
// the FSM answered nil (every item applied), and an internal error for all
// when the FSM's answer does not fit the batch.
func TestBatchAnswers(t *testing.T) {
	refused := errors.New("refused")
	lost := errors.New("leadership lost")
	must.Eq(t, []error{nil, nil}, batchAnswers(nil, nil, 2, "b"))
	must.Eq(t, []error{nil, refused}, batchAnswers([]error{nil, refused}, nil, 2, "b"))
	must.Eq(t, []error{lost, lost}, batchAnswers(nil, lost, 2, "b"))
	for _, resp := range []any{[]error{nil}, "nonsense"} {
		out := batchAnswers(resp, nil, 2, "b")
		must.Len(t, 2, out)
		for _, err := range out {
			must.ErrorContains(t, err, "b: the FSM answered")
		}
	}
}

// lingerGroup is a group commit whose first entry's write waits for gate;
// it records the entries.
type lingerGroup struct {
	groupCommit[int]
	gate chan struct{}

	mu      sync.Mutex
	entries [][]int
}

func newLingerGroup(linger time.Duration) *lingerGroup {
	g := &lingerGroup{gate: make(chan struct{})}
	g.groupCommit = groupCommit[int]{
		max:    16,
		linger: linger,
		write: func(items []int) []error {
			g.mu.Lock()
			g.entries = append(g.entries, items)
			first := len(g.entries) == 1
			g.mu.Unlock()
			if first {
				<-g.gate
			}
			return make([]error, len(items))
		},
	}
	return g
}

func (g *lingerGroup) written() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.entries)
}

func (g *lingerGroup) queued() int {
	g.groupCommit.mu.Lock()
	defer g.groupCommit.mu.Unlock()
	return len(g.pending)
}

// start has caller 1 write the first entry while 2, 3 and 4 queue behind
// it, and returns caller 1's answer.
func (g *lingerGroup) start(t *testing.T, wg *sync.WaitGroup) <-chan error {
	first := make(chan error, 1)
	go func() { first <- g.commit(1) }()
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return len(g.written()) == 1, fmt.Errorf("%d entries", len(g.written()))
	})
	for i := 2; i <= 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			must.NoError(t, g.commit(i))
		}()
		testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
			return g.queued() == i-1, fmt.Errorf("%d queued", g.queued())
		})
	}
	close(g.gate)
	return first
}

// TestGroupCommit_LingerMergesTheCohorts: four callers were in the system
// during the first entry's write (one in it, three queued), so the next
// entry waits for the caller answered to come back, and carries all four,
// where without the linger it would carry the three queued and leave the
// fourth to an entry of its own.
func TestGroupCommit_LingerMergesTheCohorts(t *testing.T) {
	g := newLingerGroup(time.Hour)
	var wg sync.WaitGroup
	first := g.start(t, &wg)
	must.NoError(t, <-first)
	// Caller 1 comes back once the next entry is held for it (the flush
	// makes its wake-up channel when it first lingers); without the
	// linger, [2 3 4] would have gone out by then.
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		g.groupCommit.mu.Lock()
		defer g.groupCommit.mu.Unlock()
		return g.arrived != nil, fmt.Errorf("entries %v", g.written())
	})
	must.NoError(t, g.commit(5))
	wg.Wait()
	must.Eq(t, [][]int{{1}, {2, 3, 4, 5}}, g.written())
}

// TestGroupCommit_LingerGivesUp: when the caller expected back does not
// come, the queued items are written once the linger has passed.
func TestGroupCommit_LingerGivesUp(t *testing.T) {
	g := newLingerGroup(50 * time.Millisecond)
	var wg sync.WaitGroup
	first := g.start(t, &wg)
	must.NoError(t, <-first)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the queued items wait for a caller that does not come")
	}
	must.Eq(t, [][]int{{1}, {2, 3, 4}}, g.written())
}
