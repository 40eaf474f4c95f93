package server

import (
	"errors"
	"fmt"
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
