package volumewatcher

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/testutil"
)

type getResult struct {
	key string
	ok  bool
}

// getAsync runs one Get in a goroutine.
func getAsync(q *queue) <-chan getResult {
	ch := make(chan getResult, 1)
	go func() {
		k, ok := q.Get()
		ch <- getResult{k, ok}
	}()
	return ch
}

// recv waits for a Get to return; the timeout only guards against a hang.
func recv(t *testing.T, ch <-chan getResult) getResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Get did not return")
		return getResult{}
	}
}

// get hands out the next due key.
func get(t *testing.T, q *queue) string {
	t.Helper()
	r := recv(t, getAsync(q))
	must.True(t, r.ok, must.Sprint("the queue closed"))
	return r.key
}

// waitTimer waits until a Get waits on the clock for at, which also shows
// that it handed nothing out before.
func waitTimer(t *testing.T, c *fakeClock, ch <-chan getResult, at time.Time) {
	t.Helper()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		select {
		case r := <-ch:
			t.Fatalf("Get handed out %q (ok %v) instead of waiting for %s", r.key, r.ok, at)
		default:
		}
		for _, p := range c.pending() {
			if p.Equal(at) {
				return true, nil
			}
		}
		return false, fmt.Errorf("no Get waits for %s (timers %v)", at, c.pending())
	})
}

func TestQueue_OneWorkerPerKey(t *testing.T) {
	t.Run("a key being processed is not handed out again until Done", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		q.Add("k")
		must.Eq(t, "k", get(t, q))
		q.Add("k")
		q.Add("other")
		must.Eq(t, "other", get(t, q), must.Sprint("k is being processed: the next key is handed out"))
		must.Eq(t, 2, q.Len())
		q.Done("other")
		q.Done("k")
		must.Eq(t, "k", get(t, q), must.Sprint("added while processed, so handed out again after Done"))
		q.Done("k")
		must.Zero(t, q.Len())
	})

	t.Run("concurrent workers never hold a key twice", func(t *testing.T) {
		q := newQueue(newFakeClock())
		var (
			mu        sync.Mutex
			held      = map[string]bool{}
			processed int
			twice     []string
		)
		take := func(k string) {
			mu.Lock()
			if held[k] {
				twice = append(twice, k)
			}
			held[k] = true
			mu.Unlock()
			runtime.Gosched()
			mu.Lock()
			held[k] = false
			processed++
			mu.Unlock()
			q.Done(k)
		}
		var workers sync.WaitGroup
		for range 8 {
			workers.Add(1)
			go func() {
				defer workers.Done()
				for {
					k, ok := q.Get()
					if !ok {
						return
					}
					take(k)
				}
			}()
		}
		var producers sync.WaitGroup
		for p := range 4 {
			producers.Add(1)
			go func() {
				defer producers.Done()
				for i := range 500 {
					q.Add(fmt.Sprintf("vol-%d", (p+i)%5))
				}
			}()
		}
		producers.Wait()
		testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
			if n := q.Len(); n > 0 {
				return false, fmt.Errorf("%d keys left", n)
			}
			return true, nil
		})
		q.Close()
		workers.Wait()
		must.SliceEmpty(t, twice)
		must.Positive(t, processed)
	})
}

func TestQueue_AddedWhileProcessing(t *testing.T) {
	t.Run("added now: handed out again right after Done", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		q.Add("k")
		must.Eq(t, "k", get(t, q))
		q.Add("k")
		ch := getAsync(q)
		q.Done("k")
		must.Eq(t, getResult{"k", true}, recv(t, ch))
	})

	t.Run("added for later, twice: handed out at the earlier time after Done", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		q.Add("k")
		must.Eq(t, "k", get(t, q))
		soon, late := c.Now().Add(time.Second), c.Now().Add(5*time.Second)
		q.AddAt("k", late)
		q.AddAt("k", soon)
		q.AddAt("k", late)
		q.Done("k")
		ch := getAsync(q)
		waitTimer(t, c, ch, soon)
		c.AdvanceTo(soon)
		must.Eq(t, getResult{"k", true}, recv(t, ch))
	})
}

func TestQueue_AddAt(t *testing.T) {
	t.Run("a later time does not delay an earlier one", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		soon, late := c.Now().Add(time.Second), c.Now().Add(5*time.Second)
		q.AddAt("k", soon)
		q.AddAt("k", late)
		ch := getAsync(q)
		waitTimer(t, c, ch, soon)
		c.AdvanceTo(soon)
		must.Eq(t, getResult{"k", true}, recv(t, ch))
		q.Done("k")
		must.Zero(t, q.Len(), must.Sprint("the later time was not kept as a second entry"))
	})

	t.Run("an earlier time brings a waiting key forward", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		soon, late := c.Now().Add(time.Second), c.Now().Add(5*time.Second)
		q.AddAt("k", late)
		ch := getAsync(q)
		waitTimer(t, c, ch, late)
		q.AddAt("k", soon)
		waitTimer(t, c, ch, soon)
		c.AdvanceTo(soon)
		must.Eq(t, getResult{"k", true}, recv(t, ch))
		q.Done("k")
		c.AdvanceTo(late)
		q.AddAt("other", late)
		must.Eq(t, "other", get(t, q), must.Sprint("k is not handed out a second time"))
	})

	t.Run("keys come out in the order of their times", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		q.AddAt("b", c.Now().Add(2*time.Second))
		q.AddAt("a", c.Now().Add(time.Second))
		q.AddAt("c", c.Now().Add(3*time.Second))
		c.Advance(3 * time.Second)
		must.Eq(t, "a", get(t, q))
		must.Eq(t, "b", get(t, q))
		must.Eq(t, "c", get(t, q))
	})
}

func TestQueue_Close(t *testing.T) {
	t.Run("ends a Get waiting for a key", func(t *testing.T) {
		q := newQueue(newFakeClock())
		ch := getAsync(q)
		q.Close()
		must.Eq(t, getResult{"", false}, recv(t, ch))
	})

	t.Run("ends a Get waiting for a time", func(t *testing.T) {
		c := newFakeClock()
		q := newQueue(c)
		at := c.Now().Add(time.Minute)
		q.AddAt("k", at)
		ch := getAsync(q)
		waitTimer(t, c, ch, at)
		q.Close()
		must.Eq(t, getResult{"", false}, recv(t, ch))
	})

	t.Run("after Close nothing is handed out or added", func(t *testing.T) {
		q := newQueue(newFakeClock())
		q.Add("k")
		q.Close()
		q.Close() // twice is harmless
		must.Eq(t, getResult{"", false}, recv(t, getAsync(q)))
		q.Add("other")
		must.Eq(t, 1, q.Len(), must.Sprint("only k, added before Close"))
	})
}

// movingClock is a fake clock that moves on by `by` right after its first
// Now, as a test's clock may between a Get's Now and its wait.
type movingClock struct {
	*fakeClock
	once sync.Once
	by   time.Duration
}

func (c *movingClock) Now() time.Time {
	now := c.fakeClock.Now()
	c.once.Do(func() { c.fakeClock.Advance(c.by) })
	return now
}

// A clock that reaches a key's time while Get is about to wait for it
// still hands the key out: Get waits until the key's time, not for a
// duration measured from a Now that is already past.
func TestQueue_ClockMovedBeforeTheWait(t *testing.T) {
	clock := &movingClock{fakeClock: newFakeClock(), by: 200 * time.Millisecond}
	q := newQueue(clock)
	defer q.Close()
	q.AddAt("k", clock.fakeClock.Now().Add(200*time.Millisecond))
	<-q.wake // taken by a Get that looked before the clock moved
	r := recv(t, getAsync(q))
	must.Eq(t, getResult{"k", true}, r)
}
