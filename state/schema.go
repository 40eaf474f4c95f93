// Package state is volplane's replicated state: a go-memdb store that the FSM
// writes at each Raft index and that every server reads. Each table has a
// schema function and a logic file of its own; rows read from the store are
// shared and never modified in place.
package state

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
)

// Table names. The index table holds one row per other table: the Raft index
// of that table's last change, which blocking queries wait on.
const (
	TableNodes       = "nodes"
	TableCSIVolumes  = "csi_volumes"
	TableCSIPlugins  = "csi_plugins"
	TableAllocs      = "allocs"
	TableJobs        = "jobs"
	TableNodeIntro   = "node_intro_tokens"
	TableRootKeys    = "root_keys"
	TableACLPolicies = "acl_policy"
	TableACLTokens   = "acl_token"
	TableNamespaces  = "namespaces"
	TableIndex       = "index"
)

// Index names. Every table has the unique index indexID; a prefix lookup on it
// is indexID + "_prefix" (go-memdb's convention).
const (
	indexID       = "id"
	indexIDPrefix = "id_prefix"
	indexPluginID = "plugin_id"
	indexNode     = "node"
	indexJob      = "job"
)

// schemaFuncs builds every table. A table added here is also snapshotted by
// the FSM: TestSchema checks Tables lists it, and the FSM's snapshot round
// trip test checks every table in Tables comes back from a snapshot.
var schemaFuncs = []func() *memdb.TableSchema{
	indexTableSchema,
	nodesTableSchema,
	csiVolumesTableSchema,
	csiPluginsTableSchema,
	allocsTableSchema,
	jobsTableSchema,
	nodeIntroTableSchema,
	rootKeysTableSchema,
	aclPoliciesTableSchema,
	aclTokensTableSchema,
	namespacesTableSchema,
}

// schema returns the memdb schema of the whole store.
func schema() *memdb.DBSchema {
	db := &memdb.DBSchema{Tables: make(map[string]*memdb.TableSchema, len(schemaFuncs))}
	for _, fn := range schemaFuncs {
		t := fn()
		if _, dup := db.Tables[t.Name]; dup {
			panic(fmt.Sprintf("state: table %q defined twice", t.Name))
		}
		db.Tables[t.Name] = t
	}
	return db
}

// Tables returns the names of every table whose changes are tracked in the
// index table, for callers that wait on "anything".
func Tables() []string {
	return []string{TableNodes, TableCSIVolumes, TableCSIPlugins, TableAllocs, TableJobs, TableNodeIntro, TableRootKeys,
		TableACLPolicies, TableACLTokens, TableNamespaces}
}

// IndexEntry is one row of the index table: the Raft index of the last change
// to the table named Key.
type IndexEntry struct {
	Key   string
	Value uint64
}

func indexTableSchema() *memdb.TableSchema {
	return &memdb.TableSchema{
		Name: TableIndex,
		Indexes: map[string]*memdb.IndexSchema{
			indexID: {
				Name:    indexID,
				Unique:  true,
				Indexer: &memdb.StringFieldIndex{Field: "Key"},
			},
		},
	}
}

// idIndex is the unique ID index shared by the tables keyed on one string.
func idIndex() *memdb.IndexSchema {
	return &memdb.IndexSchema{
		Name:    indexID,
		Unique:  true,
		Indexer: &memdb.StringFieldIndex{Field: "ID"},
	}
}
