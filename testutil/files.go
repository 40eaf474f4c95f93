package testutil

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// NoSecretInFiles fails the test for every file under dir that holds one
// of the secrets in clear, and returns how many files it read (so a caller
// can check it read something at all).
func NoSecretInFiles(t testing.TB, dir string, secrets ...string) int {
	t.Helper()
	read := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		read++
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds the secret %q in clear", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", dir, err)
	}
	return read
}
