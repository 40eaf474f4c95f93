package state

import "testing"

// TestStateStore returns an empty store for tests; it fails the test if the
// store cannot be built.
func TestStateStore(t testing.TB) *StateStore {
	t.Helper()
	s, err := NewStateStore()
	if err != nil {
		t.Fatalf("state: new store: %v", err)
	}
	return s
}
