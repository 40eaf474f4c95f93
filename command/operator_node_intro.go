package command

import (
	"fmt"
	"time"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// OperatorNodeIntroCreateCommand creates a node introduction token.
type OperatorNodeIntroCreateCommand struct{ Meta }

func (c *OperatorNodeIntroCreateCommand) Synopsis() string {
	return "Create a token that lets new client nodes register"
}

func (c *OperatorNodeIntroCreateCommand) Help() string {
	return helpText(`
Usage: volplane operator node-intro create [options]

  Creates a node introduction token. Where servers require introduction
  (server { node_intro_required = true }), a client node registers for the
  first time only with such a token (client { intro_token = "..." } or
  -intro-token). The secret is printed once: only its hash is stored.
`, `
Create Options:

  -name=<name>
    A name for the token, to recognize it in "list".

  -ttl=<duration>
    How long the token is valid, such as "1h". Default: no expiry.

  -single-use
    The token introduces one node only.`, FlagSetClient)
}

func (c *OperatorNodeIntroCreateCommand) Run(args []string) int {
	var opts api.NodeIntroCreateOptions
	f := c.FlagSet("operator node-intro create", FlagSetClient)
	f.StringVar(&opts.Name, "name", "", "")
	f.DurationVar(&opts.TTL, "ttl", 0, "")
	f.BoolVar(&opts.SingleUse, "single-use", false, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 0 {
		return c.UsageError(c, "This command takes no arguments")
	}
	if opts.TTL < 0 {
		return c.UsageError(c, "-ttl must not be negative")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	out, err := client.Operator().NodeIntroCreate(opts, nil)
	if err != nil {
		return c.Fail("creating node introduction token", err)
	}
	c.Ui.Output(kv(append(introTokenPairs(out.Token), [2]string{"Secret ID", out.SecretID})))
	return 0
}

// OperatorNodeIntroListCommand lists the node introduction tokens.
type OperatorNodeIntroListCommand struct{ Meta }

func (c *OperatorNodeIntroListCommand) Synopsis() string { return "List node introduction tokens" }

func (c *OperatorNodeIntroListCommand) Help() string {
	return helpText(`
Usage: volplane operator node-intro list [options]

  Lists the node introduction tokens, never their secrets.
`, `
List Options:

  -json
    Print the tokens as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *OperatorNodeIntroListCommand) Run(args []string) int {
	return runList(&c.Meta, c, listCommand[*structs.NodeIntroToken]{
		name: "operator node-intro list", doing: "listing node introduction tokens",
		list: func(client *api.Client) ([]*structs.NodeIntroToken, error) {
			tokens, _, err := client.Operator().NodeIntroList(nil)
			return tokens, err
		},
		none:   "No node introduction tokens",
		header: []string{"Accessor ID", "Name", "Single Use", "Used By", "Created", "Expires"},
		row: func(t *structs.NodeIntroToken) []string {
			return []string{t.AccessorID, t.Name, yesNo(t.SingleUse), t.UsedBy, timeOf(t.CreateTime), expires(t.ExpirationTime)}
		},
	}, args)
}

// OperatorNodeIntroRevokeCommand revokes a token.
type OperatorNodeIntroRevokeCommand struct{ Meta }

func (c *OperatorNodeIntroRevokeCommand) Synopsis() string { return "Revoke a node introduction token" }

func (c *OperatorNodeIntroRevokeCommand) Help() string {
	return helpText(`
Usage: volplane operator node-intro revoke [options] <accessor-id>

  Revokes a node introduction token: no new node registers with it. Nodes
  it introduced stay registered.
`, "", FlagSetClient)
}

func (c *OperatorNodeIntroRevokeCommand) Run(args []string) int {
	f := c.FlagSet("operator node-intro revoke", FlagSetClient)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <accessor-id>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	if err := client.Operator().NodeIntroDelete(f.Arg(0), nil); err != nil {
		return c.Fail("revoking node introduction token", err)
	}
	c.Ui.Output(fmt.Sprintf("Revoked node introduction token %q", f.Arg(0)))
	return 0
}

func introTokenPairs(t *structs.NodeIntroToken) [][2]string {
	return [][2]string{
		{"Accessor ID", t.AccessorID},
		{"Name", t.Name},
		{"Single Use", yesNo(t.SingleUse)},
		{"Create Time", timeOf(t.CreateTime)},
		{"Expiry Time", expires(t.ExpirationTime)},
	}
}

func expires(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return timeOf(t)
}

func init() {
	Register("operator node-intro", func(ui cli.Ui) cli.CommandFactory {
		return parent("operator node-intro", "Create and revoke node introduction tokens",
			"Create, list and revoke the tokens that let new client nodes register\n  where servers require introduction (server { node_intro_required = true }).")
	})
	Register("operator node-intro create", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &OperatorNodeIntroCreateCommand{Meta{Ui: ui}}, nil }
	})
	Register("operator node-intro list", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &OperatorNodeIntroListCommand{Meta{Ui: ui}}, nil }
	})
	Register("operator node-intro revoke", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &OperatorNodeIntroRevokeCommand{Meta{Ui: ui}}, nil }
	})
}
