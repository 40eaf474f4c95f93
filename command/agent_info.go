package command

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/cli"
)

// AgentInfoCommand prints what the answering agent says about itself, as
// Nomad's agent-info does.
type AgentInfoCommand struct{ Meta }

func (c *AgentInfoCommand) Synopsis() string {
	return "Display status information about the agent"
}

func (c *AgentInfoCommand) Help() string {
	return helpText(`
Usage: volplane agent-info [options]

  Displays the answering server's stats, section by section: "nomad" (is it
  the leader, where is the leader), "raft" (Raft's own view: state, term,
  last_log_index, commit_index, applied_index, fsm_pending, last_contact)
  and "runtime". A server whose applied_index trails the leader's, or whose
  last_contact grows, is falling behind or cut off.
`, `
Agent Info Options:
`+formatOptionsHelp, FlagSetClient)
}

func (c *AgentInfoCommand) Run(args []string) int {
	f := c.FlagSet("agent-info", FlagSetClient)
	out := c.FormatFlags(f)
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
	self, err := client.Agent().Self(nil)
	if err != nil {
		return c.Fail("querying agent info", err)
	}
	if out.set() {
		return c.Output(out, self)
	}
	c.Ui.Output(agentStats(self.Stats))
	return 0
}

// agentStats prints stats as Nomad's agent-info does: each section's name,
// then its keys in order, indented.
func agentStats(stats map[string]map[string]string) string {
	var b strings.Builder
	for _, section := range slices.Sorted(maps.Keys(stats)) {
		b.WriteString(section + "\n")
		for _, k := range slices.Sorted(maps.Keys(stats[section])) {
			b.WriteString("  " + k + " = " + stats[section][k] + "\n")
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ServerMembersCommand lists the servers, as Nomad's server members does.
type ServerMembersCommand struct{ Meta }

func (c *ServerMembersCommand) Synopsis() string {
	return "Display a list of the known servers and their status"
}

func (c *ServerMembersCommand) Help() string {
	return helpText(`
Usage: volplane server members [options]

  Lists the servers of the Raft configuration as the answering server sees
  them, with the leader. Every server of the configuration is listed as
  alive: one that is down still counts in the quorum ("operator raft
  list-peers" shows the voters, "operator raft remove-peer" removes a dead
  one).
`, `
Server Members Options:
`+formatOptionsHelp, FlagSetClient)
}

func (c *ServerMembersCommand) Run(args []string) int {
	f := c.FlagSet("server members", FlagSetClient)
	out := c.FormatFlags(f)
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
	members, err := client.Agent().Members(nil)
	if err != nil {
		return c.Fail("querying servers", err)
	}
	if out.set() {
		return c.Output(out, members)
	}
	rows := make([][]string, 0, len(members.Members))
	for _, m := range members.Members {
		if m == nil {
			continue
		}
		rows = append(rows, []string{m.Name, m.Addr, strconv.Itoa(int(m.Port)), m.Status, m.Tags["leader"],
			m.Tags["raft_vsn"], m.Tags["build"], m.Tags["dc"], m.Tags["region"]})
	}
	slices.SortFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	c.Ui.Output(table([]string{"Name", "Address", "Port", "Status", "Leader", "Raft Version", "Build", "Datacenter", "Region"}, rows))
	return 0
}

func init() {
	Register("agent-info", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &AgentInfoCommand{Meta{Ui: ui}}, nil }
	})
	Register("server", func(ui cli.Ui) cli.CommandFactory {
		return parent("server", "Interact with the servers", "Inspect the servers of the cluster.")
	})
	Register("server members", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &ServerMembersCommand{Meta{Ui: ui}}, nil }
	})
}
