package command

import (
	"fmt"
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
		header: []string{"ID", "Name", "Drain", "Eligibility", "Status", "Plugins", "Last Heartbeat", "GC After"},
		row: func(n *structs.NodeListStub, verbose bool) []string {
			plugins := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(n.CSIControllerPlugins), n.CSINodePlugins...))))
			return []string{shortID(n.ID, verbose), n.Name, strconv.FormatBool(n.Drain), eligibility(n.SchedulingEligibility),
				n.Status, strings.Join(plugins, ","), lastHeartbeat(n.LastHeartbeat, n.StatusUpdatedAt), timeOf(n.GCAfter)}
		},
		find: lookupNode,
		detail: func(client *api.Client, n *structs.Node, verbose bool) int {
			out := formatNode(n, verbose)
			if n.DrainStrategy != nil {
				p, err := fetchDrainProgress(client, n.ID, c.QueryOptions())
				if err != nil {
					return c.Fail("reading the drain's progress", err)
				}
				out += "\n\n" + formatDrainProgress(p)
			}
			c.Ui.Output(out)
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
		{"Drain", drainText(n.DrainStrategy)},
		{"Eligibility", eligibility(n.SchedulingEligibility)},
		{"Last Heartbeat", lastHeartbeat(n.LastHeartbeat, n.StatusUpdatedAt)},
		{"Status Changed", unixNano(n.StatusUpdatedAt)},
		{"Introduced By", introducedBy(n.IntroducedBy)},
	}
	if !n.GCAfter.IsZero() {
		// Down: when the servers remove it.
		pairs = slices.Insert(pairs, 10, [2]string{"GC After", timeOf(n.GCAfter) + " (once no claim on it is left)"})
	}
	if n.LastDrain != nil {
		pairs = append(pairs, [2]string{"Last Drain", lastDrainText(n.LastDrain)})
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

// eligibility shows a node's scheduling eligibility; a node stored before
// eligibility existed is eligible.
func eligibility(e string) string {
	if e == "" {
		return structs.NodeSchedulingEligible
	}
	return e
}

// drainText describes a drain in progress, as Nomad's node status does.
func drainText(d *structs.DrainStrategy) string {
	if d == nil {
		return "false"
	}
	var deadline string
	switch {
	case d.Deadline < 0:
		deadline = "forced"
	case d.Deadline == 0:
		deadline = "no deadline"
	default:
		deadline = "deadline " + timeOf(d.ForceDeadline)
	}
	text := fmt.Sprintf("true (started %s, %s", timeOf(d.StartedAt), deadline)
	if d.IgnoreSystemJobs {
		text += ", ignoring system jobs"
	}
	return text + ")"
}

func lastDrainText(m *structs.DrainMetadata) string {
	text := fmt.Sprintf("%s (started %s, updated %s)", m.Status, timeOf(m.StartedAt), timeOf(m.UpdatedAt))
	if msg := m.Meta["message"]; msg != "" {
		text += fmt.Sprintf(": %q", msg)
	}
	return text
}

// formatDrainProgress is the drain's progress in node status: what is
// left on the node and the claims still held there.
func formatDrainProgress(p *drainProgress) string {
	claims := 0
	for _, c := range p.claims {
		claims += len(c)
	}
	head := fmt.Sprintf("Drain Progress\n%d allocations and %d volume claims left on the node", len(p.allocs), claims)
	if len(p.allocs) == 0 {
		return head
	}
	return head + "\n" + table([]string{"Alloc ID", "Job ID", "Name", "Desired", "Status", "Claims on the Node"}, p.rows())
}
