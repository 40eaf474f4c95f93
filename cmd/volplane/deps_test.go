package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testOnlyImports are packages that exist for tests; the shipped binary
// links none of them through code of its own.
var testOnlyImports = []string{
	"testing", "testing/quick", "testing/fstest", "testing/iotest", "net/http/httptest",
	"github.com/shoenig/test", "github.com/shoenig/test/must", "github.com/anishathalye/porcupine",
}

// linksTesting are the dependencies known to import "testing" from a
// non-test file, with why it cannot be helped. hashicorp/raft (mandated by
// DESIGN.md) ships its test harness in package raft (testing.go,
// testing_batch.go, up to v1.8.0); it only references the package (its
// flags are registered by testing.Init, which nothing in the binary calls).
var linksTesting = map[string]string{
	"github.com/hashicorp/raft": "raft's testing.go is in the package itself",
}

// TestBinary_LinksNoTestCode checks the shipped binary's dependency graph:
// no package of volplane, and no dependency other than the known ones,
// imports a test-only package.
func TestBinary_LinksNoTestCode(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the binary's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		for _, imp := range fields[1:] {
			if !slices.Contains(testOnlyImports, imp) {
				continue
			}
			if _, known := linksTesting[pkg]; known && imp == "testing" {
				continue
			}
			bad = append(bad, pkg+" imports "+imp)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("the shipped binary links test-only code:\n  %s", strings.Join(bad, "\n  "))
	}
}
