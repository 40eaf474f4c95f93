package command

import (
	"flag"
	"fmt"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// ACLTokenCreateCommand creates a token.
type ACLTokenCreateCommand struct{ Meta }

func (c *ACLTokenCreateCommand) Synopsis() string { return "Create an ACL token" }

func (c *ACLTokenCreateCommand) Help() string {
	return helpText(`
Usage: volplane acl token create [options]

  Creates an ACL token and prints it with its secret, which is shown this
  once: the servers keep only its hash.
`, `
Create Options:

  -name=<name>
    A name for the token.

  -type=<client|management>
    The type of the token. Default: client.

  -policy=<name>
    A policy the token holds; repeatable. A client token needs one.

  -ttl=<duration>
    The token expires this long after its creation, such as "8h"
    (between 1m and 24h). Default: never.

  -json
    Print the token as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLTokenCreateCommand) Run(args []string) int {
	var (
		opts     api.TokenOptions
		policies stringList
	)
	f := c.FlagSet("acl token create", FlagSetClient)
	f.StringVar(&opts.Name, "name", "", "")
	f.StringVar(&opts.Type, "type", structs.ACLClientToken, "")
	f.Var(&policies, "policy", "")
	f.DurationVar(&opts.TTL, "ttl", 0, "")
	format := c.FormatFlags(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 0 {
		return c.UsageError(c, "This command takes no arguments")
	}
	if opts.TTL < 0 {
		return c.UsageError(c, "-ttl must not be negative")
	}
	opts.Policies = policies
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	tok, _, err := client.ACLTokens().Create(opts, nil)
	if err != nil {
		return c.Fail("creating ACL token", err)
	}
	if format.set() {
		return c.Output(format, tok)
	}
	c.Ui.Output(formatToken(tok))
	return 0
}

// ACLTokenListCommand lists tokens.
type ACLTokenListCommand struct{ Meta }

func (c *ACLTokenListCommand) Synopsis() string { return "List ACL tokens" }

func (c *ACLTokenListCommand) Help() string {
	return helpText(`
Usage: volplane acl token list [options]

  Lists the ACL tokens, never their secrets. It takes a management token.
`, `
List Options:

  -json
    Print the tokens as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLTokenListCommand) Run(args []string) int {
	now := time.Now()
	return runList(&c.Meta, c, listCommand[*structs.ACLTokenListStub]{
		name: "acl token list", doing: "listing ACL tokens",
		list: func(client *api.Client) ([]*structs.ACLTokenListStub, error) {
			tokens, _, err := client.ACLTokens().List(nil)
			return tokens, err
		},
		none:   "No tokens found",
		header: []string{"Name", "Type", "Global", "Accessor ID", "Expired"},
		row: func(t *structs.ACLTokenListStub) []string {
			expired := t.ExpirationTime != nil && !now.Before(*t.ExpirationTime)
			return []string{t.Name, t.Type, yesNo(t.Global), t.AccessorID, yesNo(expired)}
		},
	}, args)
}

// ACLTokenInfoCommand shows a token by accessor.
type ACLTokenInfoCommand struct{ Meta }

func (c *ACLTokenInfoCommand) Synopsis() string { return "Show an ACL token" }

func (c *ACLTokenInfoCommand) Help() string {
	return helpText(`
Usage: volplane acl token info [options] <accessor-id>

  Shows an ACL token, never its secret. A management token reads any token,
  others only themselves.
`, `
Info Options:

  -json
    Print the token as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLTokenInfoCommand) Run(args []string) int {
	f := c.FlagSet("acl token info", FlagSetClient)
	format := c.FormatFlags(f)
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
	tok, _, err := client.ACLTokens().Info(f.Arg(0), nil)
	if err != nil {
		return c.Fail("reading ACL token", err)
	}
	if format.set() {
		return c.Output(format, tok)
	}
	c.Ui.Output(formatToken(tok))
	return 0
}

// ACLTokenSelfCommand shows the caller's own token.
type ACLTokenSelfCommand struct{ Meta }

func (c *ACLTokenSelfCommand) Synopsis() string { return "Show the token this command sends" }

func (c *ACLTokenSelfCommand) Help() string {
	return helpText(`
Usage: volplane acl token self [options]

  Shows the token given with -token (or VOLPLANE_TOKEN, or NOMAD_TOKEN),
  never its secret.
`, `
Self Options:

  -json
    Print the token as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLTokenSelfCommand) Run(args []string) int {
	f := c.FlagSet("acl token self", FlagSetClient)
	format := c.FormatFlags(f)
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
	tok, _, err := client.ACLTokens().Self(nil)
	if err != nil {
		return c.Fail("reading ACL token", err)
	}
	if format.set() {
		return c.Output(format, tok)
	}
	c.Ui.Output(formatToken(tok))
	return 0
}

// ACLTokenUpdateCommand changes a token's name, type or policies.
type ACLTokenUpdateCommand struct{ Meta }

func (c *ACLTokenUpdateCommand) Synopsis() string { return "Update an ACL token" }

func (c *ACLTokenUpdateCommand) Help() string {
	return helpText(`
Usage: volplane acl token update [options] <accessor-id>

  Changes a token's name, type or policies; what is not given stays. Its
  secret and expiry never change.
`, `
Update Options:

  -name=<name>
    A new name.

  -type=<client|management>
    A new type.

  -policy=<name>
    A policy the token holds; repeatable. Given, the policies replace the
    token's.

  -json
    Print the token as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLTokenUpdateCommand) Run(args []string) int {
	var (
		name, typ string
		policies  stringList
	)
	f := c.FlagSet("acl token update", FlagSetClient)
	f.StringVar(&name, "name", "", "")
	f.StringVar(&typ, "type", "", "")
	f.Var(&policies, "policy", "")
	format := c.FormatFlags(f)
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
	cur, _, err := client.ACLTokens().Info(f.Arg(0), nil)
	if err != nil {
		return c.Fail("reading ACL token", err)
	}
	opts := api.TokenOptions{Name: cur.Name, Type: cur.Type, Policies: cur.Policies}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["name"] {
		opts.Name = name
	}
	if set["type"] {
		opts.Type = typ
		if typ == structs.ACLManagementToken && !set["policy"] {
			opts.Policies = nil
		}
	}
	if set["policy"] {
		opts.Policies = policies
	}
	tok, _, err := client.ACLTokens().Update(f.Arg(0), opts, nil)
	if err != nil {
		return c.Fail("updating ACL token", err)
	}
	if format.set() {
		return c.Output(format, tok)
	}
	c.Ui.Output(formatToken(tok))
	return 0
}

// ACLTokenDeleteCommand deletes a token.
type ACLTokenDeleteCommand struct{ Meta }

func (c *ACLTokenDeleteCommand) Synopsis() string { return "Delete an ACL token" }

func (c *ACLTokenDeleteCommand) Help() string {
	return helpText(`
Usage: volplane acl token delete [options] <accessor-id>

  Deletes an ACL token: every server refuses it from then on.
`, "", FlagSetClient)
}

func (c *ACLTokenDeleteCommand) Run(args []string) int {
	f := c.FlagSet("acl token delete", FlagSetClient)
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
	if _, err := client.ACLTokens().Delete(f.Arg(0), nil); err != nil {
		return c.Fail("deleting ACL token", err)
	}
	c.Ui.Output(fmt.Sprintf("Token %s successfully deleted", f.Arg(0)))
	return 0
}
