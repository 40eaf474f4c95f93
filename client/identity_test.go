package client

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"
)

func TestIdentity_PersistedAndReused(t *testing.T) {
	dir := t.TempDir()
	first, err := loadOrCreateIdentity(dir)
	must.NoError(t, err)
	must.NotEq(t, "", first.NodeID)
	must.NotEq(t, "", first.SecretID)
	must.NotEq(t, first.NodeID, first.SecretID)

	fi, err := os.Stat(filepath.Join(dir, identityFile))
	must.NoError(t, err)
	must.Eq(t, os.FileMode(0o600), fi.Mode().Perm(), must.Sprint("the secret is readable by the agent only"))

	again, err := loadOrCreateIdentity(dir)
	must.NoError(t, err)
	must.Eq(t, first, again)

	// No temporary file is left behind.
	entries, err := os.ReadDir(dir)
	must.NoError(t, err)
	must.SliceLen(t, 1, entries)

	other, err := loadOrCreateIdentity(t.TempDir())
	must.NoError(t, err)
	must.NotEq(t, first.NodeID, other.NodeID)
}

func TestIdentity_CorruptFileIsAnError(t *testing.T) {
	cases := map[string]string{
		"not json":  "{nope",
		"bad uuid":  `{"NodeID": "node-1", "SecretID": "s"}`,
		"no secret": `{"NodeID": "4fe1a4a1-3a43-43e4-a2bc-1c8f3bb0b0a1"}`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, identityFile)
			must.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			_, err := loadOrCreateIdentity(dir)
			must.ErrorContains(t, err, "node identity file "+path+" is corrupt")
			// The file is left for the operator to inspect.
			buf, err := os.ReadFile(path)
			must.NoError(t, err)
			must.Eq(t, content, string(buf))
		})
	}

	// NewClient refuses to start with it.
	dir := t.TempDir()
	must.NoError(t, os.WriteFile(filepath.Join(dir, identityFile), []byte("garbage"), 0o600))
	_, err := NewClient(&Config{DataDir: dir, Servers: []string{"127.0.0.1:1"}})
	must.ErrorContains(t, err, "is corrupt")
}
