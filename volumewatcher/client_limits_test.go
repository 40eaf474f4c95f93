package volumewatcher

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// TestClientLimits: at most max calls hold a client's slots at once; a
// further one waits until a slot is freed, or gives up with its context;
// another client is not held up; a client's entry goes once unused.
func TestClientLimits(t *testing.T) {
	l := newClientLimits(2)
	ctx := context.Background()
	r1, err := l.acquire(ctx, "node/a")
	must.NoError(t, err)
	r2, err := l.acquire(ctx, "node/a")
	must.NoError(t, err)

	other, err := l.acquire(ctx, "node/b")
	must.NoError(t, err, must.Sprint("another client has slots of its own"))
	other()

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = l.acquire(short, "node/a")
	must.ErrorIs(t, err, context.DeadlineExceeded)

	got := make(chan func(), 1)
	go func() {
		r, err := l.acquire(ctx, "node/a")
		if err == nil {
			got <- r
		}
	}()
	select {
	case <-got:
		t.Fatal("a third call took a slot while two were held")
	case <-time.After(20 * time.Millisecond):
	}
	r1()
	var r3 func()
	select {
	case r3 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the third call did not get the freed slot")
	}
	r2()
	r3()
	l.mu.Lock()
	defer l.mu.Unlock()
	must.MapEmpty(t, l.slots)
}
