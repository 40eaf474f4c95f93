package command

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/server"
)

// OperatorRaftMigrateBackendCommand moves a stopped server's Raft log to
// the other log store backend, as Nomad's command of the same name.
type OperatorRaftMigrateBackendCommand struct {
	Meta
	// Stdin is where the answer to the confirmation is read from.
	Stdin io.Reader
}

func (c *OperatorRaftMigrateBackendCommand) Synopsis() string {
	return "Migrate a stopped server's Raft log to another log store backend"
}

func (c *OperatorRaftMigrateBackendCommand) Help() string {
	return helpText(`
Usage: volplane operator raft migrate-backend [options] <path to data dir>

  Moves the Raft log of a stopped server from the boltdb log store backend
  to wal (or back with -to=boltdb), in the server's data dir. Every entry and
  the server's term and vote are copied into a new store, read back and
  compared; then the new store takes its place in DATA_DIR/raft/ and the old
  one stays beside it as a backup (raft.db.backup-<time> or
  wal.backup-<time>). A server still running is refused.

  Then start the server with no raft_logstore block, or with its backend set
  to the new one. Its snapshots are untouched, and its log is the one it had,
  so it rejoins without a snapshot from the leader. Move one server of a
  cluster at a time.
`, `
Migrate Backend Options:

  -to=<wal|boltdb>
    The backend to move the log to. The default is wal.

  -force
    Migrate without asking for confirmation.`, 0)
}

func (c *OperatorRaftMigrateBackendCommand) Run(args []string) int {
	var to string
	var force bool
	f := c.FlagSet("operator raft migrate-backend", 0)
	f.StringVar(&to, "to", server.LogStoreWAL, "")
	f.BoolVar(&force, "force", false, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <path to data dir>")
	}
	if to == "" {
		return c.UsageError(c, "-to must name a backend: %q or %q", server.LogStoreWAL, server.LogStoreBoltDB)
	}
	if err := server.ValidLogStoreBackend(to); err != nil {
		return c.UsageError(c, "-to: %s", err)
	}
	dataDir := f.Arg(0)
	if !force && !confirm(&c.Meta, c.Stdin, fmt.Sprintf(
		"Migrate the Raft log in %s to the %s backend? The server must be stopped. [y/N]",
		filepath.Join(dataDir, "raft"), to), "Canceling the migration") {
		return 0
	}
	// The stores' own warnings (a torn tail segment it recovers from, say)
	// go to the error stream, line by line.
	logger := hclog.New(&hclog.LoggerOptions{Name: "migrate-backend", Level: hclog.Warn, Output: uiLineWriter{c.Ui}})
	m, err := server.MigrateLogStore(dataDir, to, logger, func(done, total uint64) {
		c.Ui.Output(fmt.Sprintf("  copied %d of %d entries", done, total))
	})
	if err != nil {
		return c.Fail("migrating the Raft log", err)
	}
	if m.Entries == 0 {
		c.Ui.Output(fmt.Sprintf("Migrated the Raft log from %s to %s: it held no entries (the term and vote are copied)", m.From, m.To))
	} else {
		c.Ui.Output(fmt.Sprintf("Migrated the Raft log from %s to %s: %d entries, indexes %d-%d, read back and compared",
			m.From, m.To, m.Entries, m.FirstIndex, m.LastIndex))
	}
	c.Ui.Output(fmt.Sprintf("The %s log is kept at %s; remove it once the server runs on %s.", m.From, m.Backup, m.To))
	c.Ui.Output(fmt.Sprintf("Start the server with no raft_logstore block, or with backend = %q.", m.To))
	return 0
}
