// Package testutil holds helpers shared by tests of several packages.
package testutil

import (
	"testing"
	"time"
)

// WaitForResult polls cond until it reports true, failing the test with the
// last error if it has not within timeout. Tests wait for conditions with
// it instead of sleeping and hoping.
func WaitForResult(t testing.TB, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := 5 * time.Millisecond
	var lastErr error
	for {
		ok, err := cond()
		if ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			if lastErr == nil {
				t.Fatalf("condition not met within %s", timeout)
			}
			t.Fatalf("condition not met within %s: %v", timeout, lastErr)
		}
		time.Sleep(delay)
		delay = min(delay*2, 100*time.Millisecond)
	}
}
