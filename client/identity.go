package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-uuid"
)

// identityFile holds the node's ID and secret in the data dir.
const identityFile = "node-identity.json"

// identity is who the node is to the servers. The secret authenticates the
// node's own calls; it is generated once and never logged.
type identity struct {
	NodeID   string
	SecretID string
}

// loadOrCreateIdentity reads the node's identity from dir, or creates and
// persists a new one on the first start. A file that exists but cannot be
// read as an identity is an error: making up a new node would leave the old
// one registered (and its volumes claimed) under an ID nobody uses.
func loadOrCreateIdentity(dir string) (*identity, error) {
	path := filepath.Join(dir, identityFile)
	buf, err := os.ReadFile(path)
	switch {
	case err == nil:
		var id identity
		if err := json.Unmarshal(buf, &id); err != nil {
			return nil, fmt.Errorf("node identity file %s is corrupt (%v): restore it, or remove it to join as a new node", path, err)
		}
		if _, err := uuid.ParseUUID(id.NodeID); err != nil {
			return nil, fmt.Errorf("node identity file %s is corrupt: node ID %q is not a UUID: restore it, or remove it to join as a new node", path, id.NodeID)
		}
		if id.SecretID == "" {
			return nil, fmt.Errorf("node identity file %s is corrupt: it has no node secret: restore it, or remove it to join as a new node", path)
		}
		return &id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the node identity file: %w", err)
	}

	id := &identity{}
	if id.NodeID, err = uuid.GenerateUUID(); err != nil {
		return nil, err
	}
	if id.SecretID, err = uuid.GenerateUUID(); err != nil {
		return nil, err
	}
	buf, err = json.MarshalIndent(id, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(path, append(buf, '\n')); err != nil {
		return nil, fmt.Errorf("writing the node identity file: %w", err)
	}
	return id, nil
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, with mode 0600, so that a crash leaves either the
// old file or the new one, never half of one.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	// The rename must not reach the disk before the data does.
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
