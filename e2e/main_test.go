package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain builds the volplane binary once for every test of the package.
// Under -short nothing is built and every test skips.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "volplane-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	// A build failure is reported by each test, where it is seen.
	volplaneBin, buildErr = buildVolplane(dir)
	if err := setupTLS(dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: TLS fixtures: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
