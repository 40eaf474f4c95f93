package state

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// indexSecret is the index of tokens (and nodes) by the hash of their
// secret.
const indexSecret = "secret"

// IndexACLBootstrap is the row of the index table holding the Raft index of
// the last ACL bootstrap: the reset index an operator writes to the
// acl-bootstrap-reset file to bootstrap again.
const IndexACLBootstrap = "acl_token_bootstrap"

func aclPoliciesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableACLPolicies,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
		},
	}
}

func aclTokensTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableACLTokens,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "AccessorID"}},
			indexSecret: {Name: indexSecret, Unique: true,
				Indexer: hashIndexer{field: func(raw any) []byte { return raw.(*structs.ACLToken).SecretHash }}},
		},
	}
}

// hashIndexer indexes a row by a 32-byte hash (field returns it, nil when
// the row has none); lookups take the hash itself. Hashes have one length,
// so no terminator is needed.
type hashIndexer struct {
	field func(raw any) []byte
}

func (h hashIndexer) FromObject(raw any) (bool, []byte, error) {
	v := h.field(raw)
	if len(v) != sha256.Size {
		return false, nil, nil
	}
	return true, slices.Clone(v), nil
}

func (h hashIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("one argument expected, got %d", len(args))
	}
	b, ok := args[0].([]byte)
	if !ok || len(b) != sha256.Size {
		return nil, fmt.Errorf("argument must be a %d-byte hash", sha256.Size)
	}
	return b, nil
}

// UpsertACLPolicies writes policies, all or nothing; each must parse.
func (s *StateStore) UpsertACLPolicies(index uint64, policies []*structs.ACLPolicy) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(policies) == 0 {
		return structs.ErrInvalid("ACL policy upsert: no policies given")
	}
	for _, p := range policies {
		if p == nil {
			return structs.ErrInvalid("ACL policy upsert: empty policy")
		}
		if err := p.Validate(); err != nil {
			return err
		}
		existing, err := aclPolicyTxn(txn, nil, p.Name)
		if err != nil {
			return err
		}
		c := p.Copy()
		c.CreateIndex, c.ModifyIndex = index, index
		if existing != nil {
			if existing.Description == c.Description && existing.Rules == c.Rules {
				continue
			}
			c.CreateIndex = existing.CreateIndex
		}
		if err := txn.Insert(TableACLPolicies, c); err != nil {
			return fmt.Errorf("state: writing ACL policy: %w", err)
		}
	}
	return commit(txn, index)
}

// DeleteACLPolicies deletes policies by name, all or nothing. Tokens that
// name a deleted policy keep the name, which then grants nothing, as in
// Nomad.
func (s *StateStore) DeleteACLPolicies(index uint64, names []string) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(names) == 0 {
		return structs.ErrInvalid("ACL policy delete: no names given")
	}
	for _, name := range names {
		p, err := aclPolicyTxn(txn, nil, name)
		if err != nil {
			return err
		}
		if p == nil {
			return structs.ErrNotFound("ACL policy %q not found", name)
		}
		if err := txn.Delete(TableACLPolicies, p); err != nil {
			return fmt.Errorf("state: deleting ACL policy: %w", err)
		}
	}
	return commit(txn, index)
}

// ACLPolicyByName returns one policy, or nil.
func (s *StateStore) ACLPolicyByName(ws memdb.WatchSet, name string) (*structs.ACLPolicy, error) {
	return aclPolicyTxn(s.db.Txn(false), ws, name)
}

func aclPolicyTxn(txn *memdb.Txn, ws memdb.WatchSet, name string) (*structs.ACLPolicy, error) {
	ch, raw, err := txn.FirstWatch(TableACLPolicies, indexID, name)
	if err != nil {
		return nil, fmt.Errorf("state: reading ACL policy: %w", err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.ACLPolicy), nil
}

// ACLPolicies iterates over the policies whose name starts with prefix.
func (s *StateStore) ACLPolicies(ws memdb.WatchSet, prefix string) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableACLPolicies, indexIDPrefix, prefix)
}

// UpsertACLTokens creates or updates tokens, all or nothing. A new token
// must carry the hash of its secret; an update keeps the stored hash, times
// and expiry whatever the request says. Every policy a token names must
// exist, and no token ever carries its secret into the store.
func (s *StateStore) UpsertACLTokens(index uint64, tokens []*structs.ACLToken) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(tokens) == 0 {
		return structs.ErrInvalid("ACL token upsert: no tokens given")
	}
	for _, t := range tokens {
		if err := upsertACLTokenTxn(txn, index, t); err != nil {
			return err
		}
	}
	return commit(txn, index)
}

func upsertACLTokenTxn(txn *memdb.Txn, index uint64, t *structs.ACLToken) error {
	if t == nil {
		return structs.ErrInvalid("ACL token upsert: empty token")
	}
	if err := structs.ValidateID("ACL token accessor id", t.AccessorID); err != nil {
		return err
	}
	if t.SecretID != "" {
		return structs.ErrInvalid("ACL token %q: a secret never enters the state, only its hash", t.AccessorID)
	}
	if err := t.Validate(); err != nil {
		return err
	}
	for _, name := range t.Policies {
		p, err := aclPolicyTxn(txn, nil, name)
		if err != nil {
			return err
		}
		if p == nil {
			return structs.ErrInvalid("ACL token %q: policy %q does not exist", t.AccessorID, name)
		}
	}
	existing, err := aclTokenTxn(txn, nil, t.AccessorID)
	if err != nil {
		return err
	}
	c := t.Copy()
	c.Global = true
	if existing == nil {
		if len(c.SecretHash) != sha256.Size {
			return structs.ErrInvalid("ACL token %q: missing the hash of its secret", t.AccessorID)
		}
		other, err := aclTokenBySecretHashTxn(txn, c.SecretHash)
		if err != nil {
			return err
		}
		if other != nil {
			return structs.ErrConflict("ACL token %q: another token has the same secret", t.AccessorID)
		}
		c.CreateIndex, c.ModifyIndex = index, index
	} else {
		if len(c.SecretHash) != 0 && !bytes.Equal(c.SecretHash, existing.SecretHash) {
			return structs.ErrInvalid("ACL token %q: the secret of a token cannot change", t.AccessorID)
		}
		c.SecretHash = slices.Clone(existing.SecretHash)
		c.CreateTime, c.ExpirationTTL = existing.CreateTime, existing.ExpirationTTL
		c.ExpirationTime = existing.Copy().ExpirationTime
		c.CreateIndex, c.ModifyIndex = existing.CreateIndex, existing.ModifyIndex
		if tokensEqual(existing, c) {
			return nil
		}
		c.ModifyIndex = index
	}
	if err := txn.Insert(TableACLTokens, c); err != nil {
		return fmt.Errorf("state: writing ACL token: %w", err)
	}
	return nil
}

func tokensEqual(a, b *structs.ACLToken) bool {
	return a.Name == b.Name && a.Type == b.Type && slices.Equal(a.Policies, b.Policies)
}

// DeleteACLTokens deletes tokens by accessor, all or nothing.
func (s *StateStore) DeleteACLTokens(index uint64, accessorIDs []string) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(accessorIDs) == 0 {
		return structs.ErrInvalid("ACL token delete: no accessor ids given")
	}
	for _, id := range accessorIDs {
		t, err := aclTokenTxn(txn, nil, id)
		if err != nil {
			return err
		}
		if t == nil {
			return structs.ErrNotFound("ACL token %q not found", id)
		}
		if err := txn.Delete(TableACLTokens, t); err != nil {
			return fmt.Errorf("state: deleting ACL token: %w", err)
		}
	}
	return commit(txn, index)
}

// BootstrapACLToken writes the first management token, or a new one after
// an operator reset the bootstrap: it is refused once a bootstrap happened,
// unless resetIndex is that bootstrap's index. Two bootstraps racing from
// two servers both reach the log; the second finds the first's index and
// is refused, whatever the leaders checked before.
func (s *StateStore) BootstrapACLToken(index, resetIndex uint64, t *structs.ACLToken) error {
	txn := s.writeTxn()
	defer txn.Abort()
	done, err := indexWatchTxn(txn, nil, IndexACLBootstrap)
	if err != nil {
		return err
	}
	if done != 0 && done != resetIndex {
		return ErrACLBootstrapDone(done)
	}
	if t == nil || t.Type != structs.ACLManagementToken {
		return structs.ErrInvalid("ACL bootstrap: the token must be a management token")
	}
	if err := upsertACLTokenTxn(txn, index, t); err != nil {
		return err
	}
	if err := txn.Insert(TableIndex, &IndexEntry{Key: IndexACLBootstrap, Value: index}); err != nil {
		return fmt.Errorf("state: recording the ACL bootstrap: %w", err)
	}
	return commit(txn, index)
}

// ErrACLBootstrapDone is the answer to a bootstrap after one happened at
// index done, in Nomad's words: done is the reset index.
func ErrACLBootstrapDone(done uint64) error {
	return structs.ErrInvalid("ACL bootstrap already done (reset index: %d)", done)
}

// ACLBootstrapIndex returns the index of the last ACL bootstrap, 0 if none.
func (s *StateStore) ACLBootstrapIndex() (uint64, error) {
	return indexWatchTxn(s.db.Txn(false), nil, IndexACLBootstrap)
}

// ACLTokenByAccessorID returns one token, or nil.
func (s *StateStore) ACLTokenByAccessorID(ws memdb.WatchSet, id string) (*structs.ACLToken, error) {
	return aclTokenTxn(s.db.Txn(false), ws, id)
}

func aclTokenTxn(txn *memdb.Txn, ws memdb.WatchSet, id string) (*structs.ACLToken, error) {
	ch, raw, err := txn.FirstWatch(TableACLTokens, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading ACL token: %w", err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.ACLToken), nil
}

// ACLTokenBySecret returns the token whose secret is secret, or nil. It
// looks the token up by the hash of the secret, so the secret itself is
// never compared byte by byte against stored data.
func (s *StateStore) ACLTokenBySecret(secret string) (*structs.ACLToken, error) {
	return aclTokenBySecretHashTxn(s.db.Txn(false), structs.HashACLSecret(secret))
}

func aclTokenBySecretHashTxn(txn *memdb.Txn, hash []byte) (*structs.ACLToken, error) {
	raw, err := txn.First(TableACLTokens, indexSecret, hash)
	if err != nil {
		return nil, fmt.Errorf("state: reading ACL token: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.ACLToken), nil
}

// ACLTokens iterates over the tokens whose accessor starts with prefix.
func (s *StateStore) ACLTokens(ws memdb.WatchSet, prefix string) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableACLTokens, indexIDPrefix, prefix)
}

// ACLPolicyRestore restores one policy from a snapshot.
func (r *StateRestore) ACLPolicyRestore(p *structs.ACLPolicy) error {
	if err := r.txn.Insert(TableACLPolicies, p); err != nil {
		return fmt.Errorf("state: restoring ACL policy: %w", err)
	}
	return nil
}

// ACLTokenRestore restores one token from a snapshot.
func (r *StateRestore) ACLTokenRestore(t *structs.ACLToken) error {
	if err := r.txn.Insert(TableACLTokens, t); err != nil {
		return fmt.Errorf("state: restoring ACL token: %w", err)
	}
	return nil
}

// nodeSecretIndex indexes nodes by the hash of their secret, so a client
// agent's secret sent as a token finds its node.
func nodeSecretIndex() *memdb.IndexSchema {
	return &memdb.IndexSchema{
		Name:         indexSecret,
		AllowMissing: true,
		Indexer: hashIndexer{field: func(raw any) []byte {
			return raw.(*structs.Node).SecretHash
		}},
	}
}

// NodeBySecret returns the node whose secret is secret, or nil: nil too
// when two nodes claim the same secret, since the secret then names
// neither.
func (s *StateStore) NodeBySecret(secret string) (*structs.Node, error) {
	if secret == "" {
		return nil, nil
	}
	iter, err := s.db.Txn(false).Get(TableNodes, indexSecret, structs.HashACLSecret(secret))
	if err != nil {
		return nil, fmt.Errorf("state: reading node by secret: %w", err)
	}
	first := iter.Next()
	if first == nil || iter.Next() != nil {
		return nil, nil
	}
	n := first.(*structs.Node)
	// The index holds a hash; a node whose secret merely hashes alike is
	// not this one.
	if !n.SecretMatches(secret) {
		return nil, nil
	}
	return n, nil
}
