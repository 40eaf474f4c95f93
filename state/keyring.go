package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func rootKeysTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableRootKeys,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {
				Name:    indexID,
				Unique:  true,
				Indexer: &memdb.StringFieldIndex{Field: "KeyID"},
			},
		},
	}
}

// UpsertRootKey adds a root key of the cluster keyring. A key's material
// never changes once written; with activate, the key becomes the active one
// and every other key inactive, in the same transaction.
func (s *StateStore) UpsertRootKey(index uint64, key *structs.RootKey, activate bool) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if key == nil || key.KeyID == "" || len(key.WrappedKey) == 0 || key.KEKID == "" {
		return structs.ErrInvalid("root key: missing key ID, wrapped key or key-encryption key ID")
	}
	existing, err := rootKeyByIDTxn(txn, nil, key.KeyID)
	if err != nil {
		return err
	}
	if existing != nil {
		return structs.ErrConflict("root key %q exists", key.KeyID)
	}
	if activate {
		iter, err := txn.Get(TableRootKeys, indexID)
		if err != nil {
			return fmt.Errorf("state: listing root keys: %w", err)
		}
		var others []*structs.RootKey
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			if k := raw.(*structs.RootKey); k.Active {
				others = append(others, k)
			}
		}
		for _, k := range others {
			c := k.Copy()
			c.Active, c.ModifyIndex = false, index
			if err := txn.Insert(TableRootKeys, c); err != nil {
				return fmt.Errorf("state: deactivating root key: %w", err)
			}
		}
	}
	k := key.Copy()
	k.Active = activate
	k.CreateIndex, k.ModifyIndex = index, index
	if err := txn.Insert(TableRootKeys, k); err != nil {
		return fmt.Errorf("state: writing root key: %w", err)
	}
	return commit(txn, index)
}

// RootKeyByID returns one root key, or nil.
func (s *StateStore) RootKeyByID(ws memdb.WatchSet, id string) (*structs.RootKey, error) {
	return rootKeyByIDTxn(s.db.Txn(false), ws, id)
}

func rootKeyByIDTxn(txn *memdb.Txn, ws memdb.WatchSet, id string) (*structs.RootKey, error) {
	ch, raw, err := txn.FirstWatch(TableRootKeys, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("state: reading root key: %w", err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.RootKey), nil
}

// RootKeys iterates over every root key, by key ID.
func (s *StateStore) RootKeys(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableRootKeys, indexID)
}

// ActiveRootKey returns the key new values are sealed with, or nil before
// the keyring exists.
func (s *StateStore) ActiveRootKey(ws memdb.WatchSet) (*structs.RootKey, error) {
	iter, err := s.RootKeys(ws)
	if err != nil {
		return nil, err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		if k := raw.(*structs.RootKey); k.Active {
			return k, nil
		}
	}
	return nil, nil
}

// ResealCSIVolumes replaces the sealed secrets and mount flags of volumes
// (a full keyring rotation). A volume written since the leader read it
// (another ModifyIndex) or gone is skipped: its newer values were sealed
// with the active key already, or it has none.
func (s *StateStore) ResealCSIVolumes(index uint64, vols []*structs.CSIVolumeSealed) error {
	txn := s.writeTxn()
	defer txn.Abort()
	for _, in := range vols {
		if in == nil {
			return structs.ErrInvalid("volume reseal: empty entry")
		}
		existing, err := volumeByIDTxn(txn, nil, in.Namespace, in.ID)
		if err != nil {
			return err
		}
		if existing == nil || existing.ModifyIndex != in.ModifyIndex {
			continue
		}
		v := existing.Copy()
		v.Secrets, v.SealedSecrets = nil, in.Secrets.Copy()
		if v.MountOptions != nil {
			v.MountOptions.MountFlags, v.MountOptions.SealedFlags = nil, in.MountFlags.Copy()
		}
		v.ModifyIndex = index
		if err := insertVolumeTxn(txn, v); err != nil {
			return err
		}
	}
	return commit(txn, index)
}

// RootKeyRestore inserts a root key from a snapshot.
func (r *StateRestore) RootKeyRestore(k *structs.RootKey) error {
	if err := r.txn.Insert(TableRootKeys, k); err != nil {
		return fmt.Errorf("state: restoring root key: %w", err)
	}
	return nil
}
