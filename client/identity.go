package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-uuid"

	"github.com/volplane/volplane/client/state"
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
	if err := state.WriteFileAtomic(path, append(buf, '\n')); err != nil {
		return nil, fmt.Errorf("writing the node identity file: %w", err)
	}
	return id, nil
}
