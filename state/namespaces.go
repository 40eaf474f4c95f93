package state

import (
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

func namespacesTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableNamespaces,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: &memdb.StringFieldIndex{Field: "Name"}},
		},
	}
}

// UpsertNamespaces creates or updates namespaces, all or nothing.
func (s *StateStore) UpsertNamespaces(index uint64, namespaces []*structs.Namespace) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(namespaces) == 0 {
		return structs.ErrInvalid("namespace upsert: no namespaces given")
	}
	for _, n := range namespaces {
		if n == nil {
			return structs.ErrInvalid("namespace upsert: empty namespace")
		}
		if err := n.Validate(); err != nil {
			return err
		}
		existing, err := storedNamespaceTxn(txn, nil, n.Name)
		if err != nil {
			return err
		}
		c := n.Copy()
		c.CreateIndex, c.ModifyIndex = index, index
		if existing != nil {
			if existing.Description == c.Description && maps.Equal(existing.Meta, c.Meta) {
				continue
			}
			c.CreateIndex = existing.CreateIndex
		}
		if err := txn.Insert(TableNamespaces, c); err != nil {
			return fmt.Errorf("state: writing namespace: %w", err)
		}
	}
	return commit(txn, index)
}

// DeleteNamespaces deletes namespaces, all or nothing. The default
// namespace cannot be deleted, nor one that still holds volumes or jobs:
// the error names what remains.
func (s *StateStore) DeleteNamespaces(index uint64, names []string) error {
	txn := s.writeTxn()
	defer txn.Abort()
	if len(names) == 0 {
		return structs.ErrInvalid("namespace delete: no names given")
	}
	for _, name := range names {
		if name == structs.DefaultNamespace {
			return structs.ErrInvalid("the default namespace cannot be deleted")
		}
		n, err := storedNamespaceTxn(txn, nil, name)
		if err != nil {
			return err
		}
		if n == nil {
			return structs.ErrNotFound("namespace %q not found", name)
		}
		if err := namespaceEmptyTxn(txn, name); err != nil {
			return err
		}
		if err := txn.Delete(TableNamespaces, n); err != nil {
			return fmt.Errorf("state: deleting namespace: %w", err)
		}
	}
	return commit(txn, index)
}

// maxNamedInError bounds how many remaining objects an error names.
const maxNamedInError = 5

// namespaceEmptyTxn refuses a namespace that holds volumes or jobs.
func namespaceEmptyTxn(txn *memdb.Txn, name string) error {
	var vols, jobs []string
	iter, err := volumesByNamespaceTxn(txn, nil, name, "")
	if err != nil {
		return err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		vols = append(vols, raw.(*structs.CSIVolume).ID)
	}
	iter, err = getWatch(txn, nil, TableJobs, indexIDPrefix, name, "")
	if err != nil {
		return err
	}
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		jobs = append(jobs, raw.(*structs.Job).ID)
	}
	if len(vols) == 0 && len(jobs) == 0 {
		return nil
	}
	var parts []string
	if len(vols) > 0 {
		parts = append(parts, fmt.Sprintf("%d %s (%s)", len(vols), plural(len(vols), "volume"), someNames(vols)))
	}
	if len(jobs) > 0 {
		parts = append(parts, fmt.Sprintf("%d %s (%s)", len(jobs), plural(len(jobs), "job"), someNames(jobs)))
	}
	return structs.ErrConflict("namespace %q still holds %s: deregister or purge them first", name, strings.Join(parts, " and "))
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func someNames(names []string) string {
	if len(names) <= maxNamedInError {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:maxNamedInError], ", ") + fmt.Sprintf(", and %d more", len(names)-maxNamedInError)
}

// NamespaceByName returns a namespace, or nil. The default namespace is
// always there, as stored or as it reads before anyone wrote it.
func (s *StateStore) NamespaceByName(ws memdb.WatchSet, name string) (*structs.Namespace, error) {
	return namespaceTxn(s.db.Txn(false), ws, name)
}

func namespaceTxn(txn *memdb.Txn, ws memdb.WatchSet, name string) (*structs.Namespace, error) {
	n, err := storedNamespaceTxn(txn, ws, name)
	if n == nil && err == nil && name == structs.DefaultNamespace {
		return structs.DefaultNamespaceObject(), nil
	}
	return n, err
}

func storedNamespaceTxn(txn *memdb.Txn, ws memdb.WatchSet, name string) (*structs.Namespace, error) {
	ch, raw, err := txn.FirstWatch(TableNamespaces, indexID, name)
	if err != nil {
		return nil, fmt.Errorf("state: reading namespace: %w", err)
	}
	watch(ws, ch)
	if raw == nil {
		return nil, nil
	}
	return raw.(*structs.Namespace), nil
}

// Namespaces returns the namespaces whose name starts with prefix, by
// name, the default one included.
func (s *StateStore) Namespaces(ws memdb.WatchSet, prefix string) ([]*structs.Namespace, error) {
	iter, err := getWatch(s.db.Txn(false), ws, TableNamespaces, indexIDPrefix, prefix)
	if err != nil {
		return nil, err
	}
	var out []*structs.Namespace
	sawDefault := false
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		n := raw.(*structs.Namespace)
		sawDefault = sawDefault || n.Name == structs.DefaultNamespace
		out = append(out, n)
	}
	if !sawDefault && strings.HasPrefix(structs.DefaultNamespace, prefix) {
		def := structs.DefaultNamespaceObject()
		i := 0
		for i < len(out) && out[i].Name < def.Name {
			i++
		}
		out = append(out[:i], append([]*structs.Namespace{def}, out[i:]...)...)
	}
	return out, nil
}

// namespaceExistsTxn refuses an object (a "volume" or a "job") created in a
// namespace that does not exist.
func namespaceExistsTxn(txn *memdb.Txn, kind, id, namespace string) error {
	n, err := namespaceTxn(txn, nil, namespace)
	if err != nil {
		return err
	}
	if n == nil {
		return structs.ErrInvalid("%s %q: namespace %q does not exist (create it with `volplane namespace apply %s`)",
			kind, id, namespace, namespace)
	}
	return nil
}

// CheckNamespaceExists is namespaceExistsTxn against the store as it is:
// the leader's check before a write, so a refused one costs no log entry.
func (s *StateStore) CheckNamespaceExists(kind, id, namespace string) error {
	return namespaceExistsTxn(s.db.Txn(false), kind, id, namespace)
}

// NamespaceRestore restores one namespace from a snapshot.
func (r *StateRestore) NamespaceRestore(n *structs.Namespace) error {
	if err := r.txn.Insert(TableNamespaces, n); err != nil {
		return fmt.Errorf("state: restoring namespace: %w", err)
	}
	return nil
}

// StoredNamespaces iterates over the namespaces as stored (the default one
// only once written), for snapshots.
func (s *StateStore) StoredNamespaces(ws memdb.WatchSet) (memdb.ResultIterator, error) {
	return getWatch(s.db.Txn(false), ws, TableNamespaces, indexID)
}
