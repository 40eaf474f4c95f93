package command

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// ACLBootstrapCommand creates the first management token.
type ACLBootstrapCommand struct{ Meta }

func (c *ACLBootstrapCommand) Synopsis() string { return "Bootstrap the ACL system" }

func (c *ACLBootstrapCommand) Help() string {
	return helpText(`
Usage: volplane acl bootstrap [options] [<secret-file>]

  Creates the cluster's first management token and prints it, with its
  secret, which is shown this once. It runs once per cluster; a second run
  is refused and names the reset index. To run it again (the management
  token is lost), write that index into <data_dir>/server/acl-bootstrap-reset
  on the leader and bootstrap again.

  With a file (or "-" for standard input), the token's secret is the UUID
  the file holds, rather than one the servers choose.
`, `
Bootstrap Options:

  -json
    Print the token as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLBootstrapCommand) Run(args []string) int {
	f := c.FlagSet("acl bootstrap", FlagSetClient)
	format := c.FormatFlags(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() > 1 {
		return c.UsageError(c, "This command takes at most one argument: <secret-file>")
	}
	secret := ""
	if f.NArg() == 1 {
		raw, err := readArgFile(f.Arg(0))
		if err != nil {
			return c.Fail("reading the bootstrap secret", err)
		}
		secret = strings.TrimSpace(string(raw))
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	tok, _, err := client.ACLTokens().Bootstrap(secret, nil)
	if err != nil {
		return c.Fail("bootstrapping the ACL system", err)
	}
	if format.set() {
		return c.Output(format, tok)
	}
	c.Ui.Output(formatToken(tok))
	return 0
}

// readArgFile reads a file named on the command line, "-" being standard
// input.
func readArgFile(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(path)
}

// formatToken renders a token as Nomad's CLI does; the secret only when the
// answer carries it (a creation or the bootstrap).
func formatToken(t *structs.ACLToken) string {
	pairs := [][2]string{{"Accessor ID", t.AccessorID}}
	if t.SecretID != "" {
		pairs = append(pairs, [2]string{"Secret ID", t.SecretID})
	}
	policies := "n/a"
	if len(t.Policies) > 0 {
		policies = strings.Join(t.Policies, ", ")
	}
	expiry := "<none>"
	if t.ExpirationTime != nil {
		expiry = timeOf(*t.ExpirationTime)
	}
	pairs = append(pairs,
		[2]string{"Name", t.Name},
		[2]string{"Type", t.Type},
		[2]string{"Global", yesNo(t.Global)},
		[2]string{"Create Time", timeOf(t.CreateTime)},
		[2]string{"Expiry Time", expiry},
		[2]string{"Create Index", fmt.Sprint(t.CreateIndex)},
		[2]string{"Modify Index", fmt.Sprint(t.ModifyIndex)},
		[2]string{"Policies", policies},
	)
	return kv(pairs)
}

// ACLPolicyApplyCommand creates or replaces a policy.
type ACLPolicyApplyCommand struct{ Meta }

func (c *ACLPolicyApplyCommand) Synopsis() string { return "Create or update an ACL policy" }

func (c *ACLPolicyApplyCommand) Help() string {
	return helpText(`
Usage: volplane acl policy apply [options] <name> <path>

  Creates or replaces the policy <name> with the rules in the file at
  <path> ("-" for standard input), in Nomad's policy language:

    namespace "default" {
      policy       = "read"
      capabilities = ["csi-mount-volume"]
    }
    plugin { policy = "read" }

  A mistake in the rules is refused, naming its line and the word at fault.
`, `
Apply Options:

  -description=<text>
    A description of the policy.`, FlagSetClient)
}

func (c *ACLPolicyApplyCommand) Run(args []string) int {
	var description string
	f := c.FlagSet("acl policy apply", FlagSetClient)
	f.StringVar(&description, "description", "", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 2 {
		return c.UsageError(c, "This command takes two arguments: <name> <path>")
	}
	rules, err := readArgFile(f.Arg(1))
	if err != nil {
		return c.Fail("reading the policy rules", err)
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	name := f.Arg(0)
	if _, err := client.ACLPolicies().Upsert(&structs.ACLPolicy{Name: name, Description: description, Rules: string(rules)}, nil); err != nil {
		return c.Fail("writing ACL policy", err)
	}
	c.Ui.Output(fmt.Sprintf("Successfully wrote %q ACL policy!", name))
	return 0
}

// ACLPolicyListCommand lists policies.
type ACLPolicyListCommand struct{ Meta }

func (c *ACLPolicyListCommand) Synopsis() string { return "List ACL policies" }

func (c *ACLPolicyListCommand) Help() string {
	return helpText(`
Usage: volplane acl policy list [options]

  Lists the ACL policies the token may see: every one for a management
  token, its own for others.
`, `
List Options:

  -json
    Print the policies as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLPolicyListCommand) Run(args []string) int {
	return runList(&c.Meta, c, listCommand[*structs.ACLPolicyListStub]{
		name: "acl policy list", doing: "listing ACL policies",
		list: func(client *api.Client) ([]*structs.ACLPolicyListStub, error) {
			policies, _, err := client.ACLPolicies().List(nil)
			return policies, err
		},
		none:   "No policies found",
		header: []string{"Name", "Description"},
		row:    func(p *structs.ACLPolicyListStub) []string { return []string{p.Name, p.Description} },
	}, args)
}

// ACLPolicyInfoCommand shows one policy.
type ACLPolicyInfoCommand struct{ Meta }

func (c *ACLPolicyInfoCommand) Synopsis() string { return "Show an ACL policy" }

func (c *ACLPolicyInfoCommand) Help() string {
	return helpText(`
Usage: volplane acl policy info [options] <name>

  Shows an ACL policy and its rules.
`, `
Info Options:

  -json
    Print the policy as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *ACLPolicyInfoCommand) Run(args []string) int {
	f := c.FlagSet("acl policy info", FlagSetClient)
	format := c.FormatFlags(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <name>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	p, _, err := client.ACLPolicies().Info(f.Arg(0), nil)
	if err != nil {
		return c.Fail("reading ACL policy", err)
	}
	if format.set() {
		return c.Output(format, p)
	}
	c.Ui.Output(kv([][2]string{
		{"Name", p.Name},
		{"Description", p.Description},
		{"CreateIndex", fmt.Sprint(p.CreateIndex)},
		{"ModifyIndex", fmt.Sprint(p.ModifyIndex)},
	}))
	c.Ui.Output("\nRules\n\n" + strings.TrimRight(p.Rules, "\n"))
	return 0
}

// ACLPolicyDeleteCommand deletes a policy.
type ACLPolicyDeleteCommand struct{ Meta }

func (c *ACLPolicyDeleteCommand) Synopsis() string { return "Delete an ACL policy" }

func (c *ACLPolicyDeleteCommand) Help() string {
	return helpText(`
Usage: volplane acl policy delete [options] <name>

  Deletes an ACL policy. Tokens that name it keep the name, which grants
  nothing until a policy of that name exists again.
`, "", FlagSetClient)
}

func (c *ACLPolicyDeleteCommand) Run(args []string) int {
	f := c.FlagSet("acl policy delete", FlagSetClient)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <name>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	if _, err := client.ACLPolicies().Delete(f.Arg(0), nil); err != nil {
		return c.Fail("deleting ACL policy", err)
	}
	c.Ui.Output(fmt.Sprintf("Successfully deleted %q ACL policy!", f.Arg(0)))
	return 0
}

func init() {
	sub := func(name string, f func(m Meta) cli.Command) {
		Register(name, func(ui cli.Ui) cli.CommandFactory {
			return func() (cli.Command, error) { return f(Meta{Ui: ui}), nil }
		})
	}
	Register("acl", func(ui cli.Ui) cli.CommandFactory {
		return parent("acl", "Interact with ACL policies and tokens",
			"Bootstrap the ACL system, and manage its policies and tokens.")
	})
	Register("acl policy", func(ui cli.Ui) cli.CommandFactory {
		return parent("acl policy", "Interact with ACL policies", "Create, list, read and delete ACL policies.")
	})
	Register("acl token", func(ui cli.Ui) cli.CommandFactory {
		return parent("acl token", "Interact with ACL tokens", "Create, list, read, update and delete ACL tokens.")
	})
	sub("acl bootstrap", func(m Meta) cli.Command { return &ACLBootstrapCommand{m} })
	sub("acl policy apply", func(m Meta) cli.Command { return &ACLPolicyApplyCommand{m} })
	sub("acl policy list", func(m Meta) cli.Command { return &ACLPolicyListCommand{m} })
	sub("acl policy info", func(m Meta) cli.Command { return &ACLPolicyInfoCommand{m} })
	sub("acl policy delete", func(m Meta) cli.Command { return &ACLPolicyDeleteCommand{m} })
	sub("acl token create", func(m Meta) cli.Command { return &ACLTokenCreateCommand{m} })
	sub("acl token list", func(m Meta) cli.Command { return &ACLTokenListCommand{m} })
	sub("acl token info", func(m Meta) cli.Command { return &ACLTokenInfoCommand{m} })
	sub("acl token self", func(m Meta) cli.Command { return &ACLTokenSelfCommand{m} })
	sub("acl token update", func(m Meta) cli.Command { return &ACLTokenUpdateCommand{m} })
	sub("acl token delete", func(m Meta) cli.Command { return &ACLTokenDeleteCommand{m} })
}
