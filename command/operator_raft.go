package command

import (
	"fmt"

	"github.com/volplane/volplane/api"
)

// OperatorRaftListPeersCommand shows the Raft configuration.
type OperatorRaftListPeersCommand struct{ Meta }

func (c *OperatorRaftListPeersCommand) Synopsis() string {
	return "Display the current Raft peer configuration"
}

func (c *OperatorRaftListPeersCommand) Help() string {
	return helpText(`
Usage: volplane operator raft list-peers [options]

  Displays the servers in the Raft configuration, which one is the leader
  and which ones vote. A server that is listed but gone can be removed with
  "volplane operator raft remove-peer".
`, `
List Peers Options:

  -stale
    Let any server answer from its own view, which works without a leader.`, FlagSetClient)
}

func (c *OperatorRaftListPeersCommand) Run(args []string) int {
	var stale bool
	f := c.FlagSet("operator raft list-peers", FlagSetClient)
	f.BoolVar(&stale, "stale", false, "")
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
	cfg, err := client.Operator().RaftGetConfiguration(&api.QueryOptions{AllowStale: stale})
	if err != nil {
		return c.Fail("retrieving Raft configuration", err)
	}
	var rows [][]string
	for _, s := range cfg.Servers {
		if s == nil {
			continue
		}
		state := "follower"
		if s.Leader {
			state = "leader"
		}
		rows = append(rows, []string{s.Node, s.ID, s.Address, state, yesNo(s.Voter), s.RaftProtocol})
	}
	c.Ui.Output(table([]string{"Node", "ID", "Address", "State", "Voter", "RaftProtocol"}, rows))
	if note := securityNote(client); note != "" {
		c.Ui.Output(note)
	}
	return 0
}

// OperatorRaftRemovePeerCommand removes a server from the Raft
// configuration.
type OperatorRaftRemovePeerCommand struct{ Meta }

func (c *OperatorRaftRemovePeerCommand) Synopsis() string {
	return "Remove a server from the Raft configuration"
}

func (c *OperatorRaftRemovePeerCommand) Help() string {
	return helpText(`
Usage: volplane operator raft remove-peer [options] -peer-id=<id> | -peer-address=<addr>

  Removes a server from the Raft configuration, for a server that failed and
  will not come back. The cluster must have a leader. Removing a healthy
  server only makes it rejoin; stop it first.
`, `
Remove Peer Options:

  -peer-id=<id>
    The Raft ID of the server to remove, as "list-peers" shows it.

  -peer-address=<addr>
    The Raft address (host:port) of the server to remove.`, FlagSetClient)
}

func (c *OperatorRaftRemovePeerCommand) Run(args []string) int {
	var id, addr string
	f := c.FlagSet("operator raft remove-peer", FlagSetClient)
	f.StringVar(&id, "peer-id", "", "")
	f.StringVar(&addr, "peer-address", "", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	switch {
	case f.NArg() != 0:
		return c.UsageError(c, "This command takes no arguments")
	case id == "" && addr == "":
		return c.UsageError(c, "Missing peer: give -peer-id or -peer-address")
	case id != "" && addr != "":
		return c.UsageError(c, "Give only one of -peer-id and -peer-address")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	if id != "" {
		if err := client.Operator().RaftRemovePeerByID(id, nil); err != nil {
			return c.Fail("removing peer", err)
		}
		c.Ui.Output(fmt.Sprintf("Removed peer with id %q", id))
		return 0
	}
	if err := client.Operator().RaftRemovePeerByAddress(addr, nil); err != nil {
		return c.Fail("removing peer", err)
	}
	c.Ui.Output(fmt.Sprintf("Removed peer with address %q", addr))
	return 0
}
