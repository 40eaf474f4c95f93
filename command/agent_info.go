package command

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
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
	return runShow(&c.Meta, c, showCommand[*structs.AgentSelf]{
		name: "agent-info", doing: "querying agent info",
		get:  func(client *api.Client) (*structs.AgentSelf, error) { return client.Agent().Self(nil) },
		text: func(self *structs.AgentSelf) string { return agentStats(self.Stats) },
	}, args)
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
	return runList(&c.Meta, c, listCommand[*structs.AgentMember]{
		name: "server members", doing: "querying servers",
		list: func(client *api.Client) ([]*structs.AgentMember, error) {
			members, err := client.Agent().Members(nil)
			if err != nil {
				return nil, err
			}
			out := slices.DeleteFunc(members.Members, func(m *structs.AgentMember) bool { return m == nil })
			slices.SortFunc(out, func(a, b *structs.AgentMember) int { return strings.Compare(a.Name, b.Name) })
			return out, nil
		},
		none:   "No servers (the answering server has no Raft configuration yet)",
		header: []string{"Name", "Address", "Port", "Status", "Leader", "Raft Version", "Build", "Datacenter", "Region"},
		row: func(m *structs.AgentMember) []string {
			return []string{m.Name, m.Addr, strconv.Itoa(int(m.Port)), m.Status, m.Tags["leader"],
				m.Tags["raft_vsn"], m.Tags["build"], m.Tags["dc"], m.Tags["region"]}
		},
	}, args)
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
