package command

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// NodeStatusCommand lists client nodes or shows one in detail.
type NodeStatusCommand struct{ Meta }

func (c *NodeStatusCommand) Synopsis() string { return "Display status information about client nodes" }

func (c *NodeStatusCommand) Help() string {
	return helpText(`
Usage: volplane node status [options] [id]

  Without an ID, lists the client nodes with their status, the CSI plugins
  they run, their last heartbeat and, for a node that is down, when the
  servers will remove it (GC After: once it has been down for
  server.node_gc_threshold and no claim on it is left; volplane system gc
  removes it at once). With an ID (or a unique prefix of one, or the node's
  name), shows the node in detail with the health of each of its plugins.
`, `
Status Options:

  -json
    Print the node or the list as JSON.`+templateOptionHelp+`

  -verbose
    Show full node IDs, attributes and indexes.`, FlagSetClient)
}

func (c *NodeStatusCommand) Run(args []string) int {
	return runStatus(&c.Meta, c, statusCommand[*structs.Node, *structs.NodeListStub]{
		name: "node status", flags: FlagSetClient, noun: "node", nouns: "nodes",
		list: func(client *api.Client) ([]*structs.NodeListStub, error) {
			stubs, _, err := client.Nodes().List(nil)
			return stubs, err
		},
		none:   "No nodes",
		header: []string{"ID", "Name", "Status", "Plugins", "Last Heartbeat", "GC After"},
		row: func(n *structs.NodeListStub, verbose bool) []string {
			plugins := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(n.CSIControllerPlugins), n.CSINodePlugins...))))
			return []string{shortID(n.ID, verbose), n.Name, n.Status, strings.Join(plugins, ","),
				lastHeartbeat(n.LastHeartbeat, n.StatusUpdatedAt), timeOf(n.GCAfter)}
		},
		find: lookupNode,
		detail: func(_ *api.Client, n *structs.Node, verbose bool) int {
			c.Ui.Output(formatNode(n, verbose))
			return 0
		},
		footer: securityNote,
	}, args)
}

// lookupNode finds a node by ID, unique ID prefix or name.
func lookupNode(client *api.Client, id string) (*structs.Node, error) {
	return lookupNamed("nodes", id,
		func(id string) (*structs.Node, error) {
			n, _, err := client.Nodes().Info(id, nil)
			return n, err
		},
		func() ([]*structs.NodeListStub, error) {
			stubs, _, err := client.Nodes().List(nil)
			return stubs, err
		},
		func(s *structs.NodeListStub) string { return s.ID },
		func(s *structs.NodeListStub) string { return s.Name })
}

func formatNode(n *structs.Node, verbose bool) string {
	pairs := [][2]string{
		{"ID", n.ID},
		{"Name", n.Name},
		{"Datacenter", n.Datacenter},
		{"Address", n.Address},
		{"Status", n.Status},
		{"Status Description", n.StatusDescription},
		{"Last Heartbeat", lastHeartbeat(n.LastHeartbeat, n.StatusUpdatedAt)},
		{"Status Changed", unixNano(n.StatusUpdatedAt)},
		{"Introduced By", introducedBy(n.IntroducedBy)},
	}
	if !n.GCAfter.IsZero() {
		// Down: when the servers remove it.
		pairs = slices.Insert(pairs, 8, [2]string{"GC After", timeOf(n.GCAfter) + " (once no claim on it is left)"})
	}
	if verbose {
		pairs = append(pairs,
			[2]string{"Create Index", strconv.FormatUint(n.CreateIndex, 10)},
			[2]string{"Modify Index", strconv.FormatUint(n.ModifyIndex, 10)})
	}
	var b strings.Builder
	b.WriteString(kv(pairs))

	b.WriteString("\n\nCSI Controller Plugins\n")
	if len(n.CSIControllerPlugins) == 0 {
		b.WriteString("None")
	} else {
		var rows [][]string
		for _, id := range slices.Sorted(maps.Keys(n.CSIControllerPlugins)) {
			info := n.CSIControllerPlugins[id]
			if info == nil {
				continue
			}
			rows = append(rows, []string{id, info.Provider, yesNo(info.Healthy), info.HealthDescription, timeOf(info.UpdateTime)})
		}
		b.WriteString(table([]string{"Plugin ID", "Provider", "Healthy", "Health Description", "Update Time"}, rows))
	}

	b.WriteString("\n\nCSI Node Plugins\n")
	if len(n.CSINodePlugins) == 0 {
		b.WriteString("None")
	} else {
		var rows [][]string
		for _, id := range slices.Sorted(maps.Keys(n.CSINodePlugins)) {
			info := n.CSINodePlugins[id]
			if info == nil {
				continue
			}
			row := append([]string{id, info.Provider, yesNo(info.Healthy)}, nodeInfoCells(info.NodeInfo)...)
			rows = append(rows, append(row, info.HealthDescription, timeOf(info.UpdateTime)))
		}
		b.WriteString(table([]string{"Plugin ID", "Provider", "Healthy", "External Node ID", "Max Volumes", "Topology",
			"Health Description", "Update Time"}, rows))
	}

	if verbose {
		writeMap(&b, "Attributes", n.Attributes)
	}
	return b.String()
}

// nodeInfoCells are the External Node ID, Max Volumes ("" for no limit)
// and Topology cells of a node plugin's fingerprint, all "" without one.
func nodeInfoCells(ni *structs.CSINodeInfo) []string {
	if ni == nil {
		return []string{"", "", ""}
	}
	var max string
	if ni.MaxVolumes > 0 {
		max = strconv.FormatInt(ni.MaxVolumes, 10)
	}
	return []string{ni.ID, max, segments(ni.AccessibleTopology)}
}

// lastHeartbeat shows when the leader last heard from the node, or, when the
// answer came from a server that was not the leader then, when its status
// last changed.
func lastHeartbeat(last time.Time, statusChanged int64) string {
	if !last.IsZero() {
		return timeOf(last)
	}
	return unixNano(statusChanged)
}

// introducedBy says how a node was let in; nothing means the cluster was
// open when it registered.
func introducedBy(by string) string {
	if by == "" {
		return "nothing (registered while the cluster was open)"
	}
	return by
}
