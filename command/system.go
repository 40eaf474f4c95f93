package command

import (
	"fmt"
	"strings"

	"github.com/hashicorp/cli"
)

func init() {
	Register("system", func(ui cli.Ui) cli.CommandFactory {
		return parent("system", "Cluster-wide maintenance", "Run the servers' maintenance now.")
	})
	Register("system gc", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &SystemGCCommand{Meta: Meta{Ui: ui}}, nil }
	})
}

// SystemGCCommand runs the garbage collection now.
type SystemGCCommand struct{ Meta }

func (c *SystemGCCommand) Synopsis() string { return "Run the garbage collection now" }

func (c *SystemGCCommand) Help() string {
	return helpText(`
Usage: volplane system gc [options]

  Runs the servers' garbage collection now, as Nomad's: every client node
  that is down, however recently, is removed with its CSI plugin instances,
  once no claim on it is left (a node still holding claims is kept, and
  listed with why), and every CSI plugin that no node runs and no volume
  names is removed. Without this command the servers remove a node once it
  has been down for server.node_gc_threshold (default 24h).
`, "", FlagSetClient)
}

func (c *SystemGCCommand) Run(args []string) int {
	f := c.FlagSet("system gc", FlagSetClient)
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
	res, err := client.System().GarbageCollect(c.WriteOptions())
	if err != nil {
		return c.Fail("running the garbage collection", err)
	}
	c.Ui.Output(fmt.Sprintf("Removed %d nodes%s and %d plugins%s", len(res.Nodes), listed(res.Nodes),
		len(res.Plugins), listed(res.Plugins)))
	for _, w := range res.Waiting {
		c.Ui.Warn("Kept: " + w)
	}
	return 0
}

func listed(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return " (" + strings.Join(ids, ", ") + ")"
}
