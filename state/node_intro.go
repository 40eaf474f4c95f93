package state

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func nodeIntroTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableNodeIntro,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {
				Name:    indexID,
				Unique:  true,
				Indexer: &memdb.StringFieldIndex{Field: "AccessorID"},
			},
		},
	}
}

// UpsertNodeIntroToken stores a new node introduction token. Tokens are
// never changed by an operator after creation; an accessor that exists
// already is refused.
func (s *StateStore) UpsertNodeIntroToken(index uint64, t *structs.NodeIntroToken) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if t == nil || t.AccessorID == "" || len(t.SecretHash) == 0 {
		return structs.ErrInvalid("node introduction token: missing accessor or secret hash")
	}
	existing, err := nodeIntroByAccessorTxn(txn, nil, t.AccessorID)
	if err != nil {
		return err
	}
	if existing != nil {
		return structs.ErrConflict("node introduction token %q exists", t.AccessorID)
	}
	t = t.Copy()
	t.CreateIndex, t.ModifyIndex = index, index
	if err := txn.Insert(TableNodeIntro, t); err != nil {
		return fmt.Errorf("state: writing node introduction token: %w", err)
	}
	return commit(txn, index)
}

// DeleteNodeIntroTokens revokes tokens, all or nothing.
func (s *StateStore) DeleteNodeIntroTokens(index uint64, accessorIDs []string) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(accessorIDs) == 0 {
		return structs.ErrInvalid("node introduction token revoke: no accessor ids given")
	}
	for _, id := range accessorIDs {
		t, err := nodeIntroByAccessorTxn(txn, nil, id)
		if err != nil {
			return err
		}
		if t == nil {
			return structs.ErrNotFound("node introduction token %q not found", id)
		}
		if err := txn.Delete(TableNodeIntro, t); err != nil {
			return fmt.Errorf("state: deleting node introduction token: %w", err)
		}
	}
	return commit(txn, index)
}

// NodeIntroTokenByAccessor returns one token, or nil.
func (s *StateStore) NodeIntroTokenByAccessor(ws memdb.WatchSet, id string) (*structs.NodeIntroToken, error) {
	return nodeIntroByAccessorTxn(s.db.Txn(false), ws, id)
}

func nodeIntroByAccessorTxn(txn *memdb.Txn, ws memdb.WatchSet, id string) (*structs.NodeIntroToken, error) {
	ch, raw, err := txn.FirstWatch(TableNodeIntro, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading node introduction token: %w", err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.NodeIntroToken), nil
}

// NodeIntroTokenBySecret finds the token whose secret is secret, or nil.
// Tokens are few (one per batch of nodes an operator brings up), so this
// compares against each in constant time rather than indexing the hash.
func (s *StateStore) NodeIntroTokenBySecret(secret string) (*structs.NodeIntroToken, error) {
	iter, err := s.db.Txn(false).Get(TableNodeIntro, indexID)
	if err != nil {
		return nil, fmt.Errorf("state: listing node introduction tokens: %w", err)
	}
	var found *structs.NodeIntroToken
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		t := raw.(*structs.NodeIntroToken)
		if structs.IntroSecretMatches(secret, t.SecretHash) {
			found = t
		}
	}
	return found, nil
}

// NodeIntroTokens iterates over every token, by accessor.
func (s *StateStore) NodeIntroTokens(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableNodeIntro, indexID)
}

// RegisterNode applies a node registration: the introduction token the
// leader accepted is checked again (it may have been revoked, used or
// expired since) and a single-use token is marked used, in the same
// transaction as the node is written, so one token never lets in two nodes.
func (s *StateStore) RegisterNode(index uint64, req *structs.NodeRegisterRequest) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if req.Node == nil {
		return structs.ErrInvalid("node register: missing node")
	}
	if req.IntroAccessorID != "" {
		if err := useNodeIntroTxn(txn, index, req.IntroAccessorID, req.Node); err != nil {
			return err
		}
	}
	if err := upsertNodeTxn(txn, index, req.Node); err != nil {
		return err
	}
	return commit(txn, index)
}

func useNodeIntroTxn(txn *memdb.Txn, index uint64, accessor string, node *structs.Node) error {
	t, err := nodeIntroByAccessorTxn(txn, nil, accessor)
	if err != nil {
		return err
	}
	if t == nil {
		return structs.NewError(structs.ErrCodePermissionDenied, "node %q: node introduction token %q was revoked", node.ID, accessor)
	}
	// The node's status time is the leader's clock at the registration.
	if err := t.Usable(node.ID, time.Unix(0, node.StatusUpdatedAt)); err != nil {
		return err
	}
	if !t.SingleUse || t.UsedBy == node.ID {
		return nil
	}
	used := t.Copy()
	used.UsedBy = node.ID
	used.ModifyIndex = index
	if err := txn.Insert(TableNodeIntro, used); err != nil {
		return fmt.Errorf("state: marking node introduction token used: %w", err)
	}
	return nil
}

// NodeIntroRestore inserts a token from a snapshot.
func (r *StateRestore) NodeIntroRestore(t *structs.NodeIntroToken) error {
	if err := r.txn.Insert(TableNodeIntro, t); err != nil {
		return fmt.Errorf("state: restoring node introduction token: %w", err)
	}
	return nil
}
