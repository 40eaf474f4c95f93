package state

// TB is the part of testing.TB the test helpers use. The shipped binary
// links this package, and must not link the testing package.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// TestStateStore returns an empty store for tests; it fails the test if the
// store cannot be built.
func TestStateStore(t TB) *StateStore {
	t.Helper()
	s, err := NewStateStore()
	if err != nil {
		t.Fatalf("state: new store: %v", err)
	}
	return s
}
