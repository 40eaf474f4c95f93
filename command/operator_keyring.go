package command

import (
	"fmt"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// OperatorKeyringRotateCommand makes a new active root key.
type OperatorKeyringRotateCommand struct{ Meta }

func (c *OperatorKeyringRotateCommand) Synopsis() string {
	return "Rotate the cluster keyring's root key"
}

func (c *OperatorKeyringRotateCommand) Help() string {
	return helpText(`
Usage: volplane operator root keyring rotate [options]

  Makes a new root key the active one: volume secrets and mount flags
  written from now on are sealed with it. Older keys stay in the keyring
  and still open what they sealed.
`, `
Rotate Options:

  -full
    Also seal every volume's secrets and mount flags again with the new
    key (and any stored in clear before the keyring existed).`, FlagSetClient)
}

func (c *OperatorKeyringRotateCommand) Run(args []string) int {
	var full bool
	f := c.FlagSet("operator root keyring rotate", FlagSetClient)
	f.BoolVar(&full, "full", false, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 0 {
		return c.UsageError(c, "This command takes no arguments")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	out, err := client.Operator().KeyringRotate(full, nil)
	if err != nil {
		return c.Fail("rotating the keyring", err)
	}
	c.Ui.Output(fmt.Sprintf("New active root key %s", out.Key.KeyID))
	if full {
		c.Ui.Output(fmt.Sprintf("Sealed the secrets of %d volumes again", out.Resealed))
	}
	return 0
}

// OperatorKeyringListCommand lists the root keys.
type OperatorKeyringListCommand struct{ Meta }

func (c *OperatorKeyringListCommand) Synopsis() string { return "List the cluster keyring's root keys" }

func (c *OperatorKeyringListCommand) Help() string {
	return helpText(`
Usage: volplane operator root keyring list [options]

  Lists the root keys of the cluster keyring, which one is active, and the
  key-encryption key each is wrapped with. Never any key material.
`, `
List Options:

  -json
    Print the keys as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *OperatorKeyringListCommand) Run(args []string) int {
	return runList(&c.Meta, c, listCommand[*structs.RootKey]{
		name: "operator root keyring list", doing: "listing the keyring",
		list: func(client *api.Client) ([]*structs.RootKey, error) {
			keys, _, err := client.Operator().KeyringList(nil)
			return keys, err
		},
		none:   "No root keys (the keyring is made by the first leader)",
		header: []string{"Key ID", "State", "KEK ID", "Create Time"},
		row: func(k *structs.RootKey) []string {
			state := "inactive"
			if k.Active {
				state = "active"
			}
			return []string{k.KeyID, state, k.KEKID, timeOf(k.CreateTime)}
		},
	}, args)
}

func init() {
	Register("operator root", func(ui cli.Ui) cli.CommandFactory {
		return parent("operator root", "Manage the cluster keyring", "Manage the cluster keyring that seals volume secrets and mount flags.")
	})
	Register("operator root keyring", func(ui cli.Ui) cli.CommandFactory {
		return parent("operator root keyring", "Rotate and list root keys",
			"Rotate and list the root keys that seal volume secrets and mount flags\n  in the replicated state, the Raft log and snapshots.")
	})
	Register("operator root keyring rotate", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &OperatorKeyringRotateCommand{Meta{Ui: ui}}, nil }
	})
	Register("operator root keyring list", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &OperatorKeyringListCommand{Meta{Ui: ui}}, nil }
	})
}
