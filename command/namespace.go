package command

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// NamespaceApplyCommand creates or updates a namespace.
type NamespaceApplyCommand struct{ Meta }

func (c *NamespaceApplyCommand) Synopsis() string { return "Create or update a namespace" }

func (c *NamespaceApplyCommand) Help() string {
	return helpText(`
Usage: volplane namespace apply [options] <name>

  Creates a namespace, or updates its description and metadata. Volumes and
  jobs are registered only into namespaces that exist; "default" always
  does. With ACLs on, it takes a management token.
`, `
Apply Options:

  -description=<text>
    A description of the namespace.

  -meta=<key>=<value>
    Metadata of the namespace; repeatable. Given, it replaces the
    namespace's metadata.`, FlagSetClient)
}

func (c *NamespaceApplyCommand) Run(args []string) int {
	var (
		description string
		meta        stringList
	)
	f := c.FlagSet("namespace apply", FlagSetClient)
	f.StringVar(&description, "description", "", "")
	f.Var(&meta, "meta", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <name>")
	}
	ns := &structs.Namespace{Name: f.Arg(0), Description: description}
	for _, kv := range meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return c.UsageError(c, "-meta must be key=value, got %q", kv)
		}
		if ns.Meta == nil {
			ns.Meta = map[string]string{}
		}
		ns.Meta[k] = v
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	// What is not given stays as it is.
	if cur, _, err := client.Namespaces().Info(ns.Name, nil); err == nil {
		if !set["description"] {
			ns.Description = cur.Description
		}
		if !set["meta"] {
			ns.Meta = cur.Meta
		}
	}
	if _, err := client.Namespaces().Register(ns, nil); err != nil {
		return c.Fail("applying namespace", err)
	}
	c.Ui.Output(fmt.Sprintf("Successfully applied namespace %q!", ns.Name))
	return 0
}

// NamespaceListCommand lists namespaces.
type NamespaceListCommand struct{ Meta }

func (c *NamespaceListCommand) Synopsis() string { return "List namespaces" }

func (c *NamespaceListCommand) Help() string {
	return helpText(`
Usage: volplane namespace list [options]

  Lists the namespaces the token may do anything in.
`, `
List Options:

  -json
    Print the namespaces as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *NamespaceListCommand) Run(args []string) int {
	return runList(&c.Meta, c, listCommand[*structs.Namespace]{
		name: "namespace list", doing: "listing namespaces",
		list: func(client *api.Client) ([]*structs.Namespace, error) {
			nss, _, err := client.Namespaces().List(nil)
			return nss, err
		},
		none:   "No namespaces found",
		header: []string{"Name", "Description"},
		row:    func(n *structs.Namespace) []string { return []string{n.Name, n.Description} },
	}, args)
}

// NamespaceStatusCommand shows one namespace.
type NamespaceStatusCommand struct{ Meta }

func (c *NamespaceStatusCommand) Synopsis() string { return "Show a namespace" }

func (c *NamespaceStatusCommand) Help() string {
	return helpText(`
Usage: volplane namespace status [options] <name>

  Shows a namespace and its metadata.
`, `
Status Options:

  -json
    Print the namespace as JSON.`+templateOptionHelp, FlagSetClient)
}

func (c *NamespaceStatusCommand) Run(args []string) int {
	f := c.FlagSet("namespace status", FlagSetClient)
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
	ns, _, err := client.Namespaces().Info(f.Arg(0), nil)
	if err != nil {
		return c.Fail("reading namespace", err)
	}
	if format.set() {
		return c.Output(format, ns)
	}
	c.Ui.Output(kv([][2]string{{"Name", ns.Name}, {"Description", ns.Description}}))
	if len(ns.Meta) > 0 {
		var pairs [][2]string
		for _, k := range slices.Sorted(maps.Keys(ns.Meta)) {
			pairs = append(pairs, [2]string{k, ns.Meta[k]})
		}
		c.Ui.Output("\nNamespace Metadata\n" + kv(pairs))
	}
	return 0
}

// NamespaceDeleteCommand deletes a namespace.
type NamespaceDeleteCommand struct{ Meta }

func (c *NamespaceDeleteCommand) Synopsis() string { return "Delete a namespace" }

func (c *NamespaceDeleteCommand) Help() string {
	return helpText(`
Usage: volplane namespace delete [options] <name>

  Deletes a namespace. One that still holds volumes or jobs is not deleted:
  the error names them. The default namespace cannot be deleted.
`, "", FlagSetClient)
}

func (c *NamespaceDeleteCommand) Run(args []string) int {
	f := c.FlagSet("namespace delete", FlagSetClient)
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
	if _, err := client.Namespaces().Delete(f.Arg(0), nil); err != nil {
		return c.Fail("deleting namespace", err)
	}
	c.Ui.Output(fmt.Sprintf("Successfully deleted namespace %q!", f.Arg(0)))
	return 0
}

func init() {
	sub := func(name string, f func(m Meta) cli.Command) {
		Register(name, func(ui cli.Ui) cli.CommandFactory {
			return func() (cli.Command, error) { return f(Meta{Ui: ui}), nil }
		})
	}
	Register("namespace", func(ui cli.Ui) cli.CommandFactory {
		return parent("namespace", "Interact with namespaces",
			"Create, list, read and delete the namespaces that volumes and jobs live in.")
	})
	sub("namespace apply", func(m Meta) cli.Command { return &NamespaceApplyCommand{m} })
	sub("namespace list", func(m Meta) cli.Command { return &NamespaceListCommand{m} })
	sub("namespace status", func(m Meta) cli.Command { return &NamespaceStatusCommand{m} })
	sub("namespace delete", func(m Meta) cli.Command { return &NamespaceDeleteCommand{m} })
}
