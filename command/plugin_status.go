package command

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// PluginStatusCommand lists CSI plugins or shows one in detail.
type PluginStatusCommand struct{ Meta }

func (c *PluginStatusCommand) Synopsis() string {
	return "Display status information about CSI plugins"
}

func (c *PluginStatusCommand) Help() string {
	return helpText(`
Usage: volplane plugin status [options] [id]

  Without an ID, lists the CSI plugins with their provider and how many of
  their controller and node instances are healthy. With an ID (or a unique
  prefix of one), shows every instance: its node, whether it is healthy and,
  when it is not, why.
`, `
Status Options:
`+typeOptionHelp+`
`+formatOptionsHelp+`

  -verbose
    Show full node IDs, node plugin details and indexes.`, FlagSetClient)
}

func (c *PluginStatusCommand) Run(args []string) int {
	return runStatus(&c.Meta, c, statusCommand[*structs.CSIPlugin, *structs.CSIPluginListStub]{
		name: "plugin status", flags: FlagSetClient, noun: "plugin", nouns: "plugins",
		list: func(client *api.Client) ([]*structs.CSIPluginListStub, error) {
			stubs, _, err := client.Plugins().List(nil)
			return stubs, err
		},
		none:   "No CSI plugins",
		header: []string{"ID", "Provider", "Controllers Healthy/Expected", "Nodes Healthy/Expected"},
		row: func(p *structs.CSIPluginListStub, _ bool) []string {
			return []string{p.ID, p.Provider, ratio(p.ControllersHealthy, p.ControllersExpected),
				ratio(p.NodesHealthy, p.NodesExpected)}
		},
		ownFlags: c.TypeFlag,
		find:     lookupPlugin,
		detail: func(_ *api.Client, p *structs.CSIPlugin, verbose bool) int {
			c.Ui.Output(formatPlugin(p, verbose))
			return 0
		},
	}, args)
}

// lookupPlugin finds a plugin by ID or unique ID prefix.
func lookupPlugin(client *api.Client, id string) (*structs.CSIPlugin, error) {
	return lookup("plugins", id,
		func(id string) (*structs.CSIPlugin, error) {
			p, _, err := client.Plugins().Info(id, nil)
			return p, err
		},
		func(prefix string) ([]*structs.CSIPluginListStub, error) {
			stubs, _, err := client.Plugins().List(&api.QueryOptions{Prefix: prefix})
			return stubs, err
		},
		func(s *structs.CSIPluginListStub) string { return s.ID })
}

func formatPlugin(p *structs.CSIPlugin, verbose bool) string {
	pairs := [][2]string{
		{"ID", p.ID},
		{"Provider", p.Provider},
		{"Version", p.Version},
		{"Controller Required", yesNo(p.ControllerRequired)},
		{"Controllers Healthy", strconv.Itoa(p.ControllersHealthy)},
		{"Controllers Expected", strconv.Itoa(p.ControllersExpected)},
		{"Nodes Healthy", strconv.Itoa(p.NodesHealthy)},
		{"Nodes Expected", strconv.Itoa(p.NodesExpected)},
	}
	if verbose {
		pairs = append(pairs,
			[2]string{"Create Index", strconv.FormatUint(p.CreateIndex, 10)},
			[2]string{"Modify Index", strconv.FormatUint(p.ModifyIndex, 10)})
	}
	var b strings.Builder
	b.WriteString(kv(pairs))
	b.WriteString("\n\nControllers\n")
	b.WriteString(instances(p.Controllers, false, verbose))
	b.WriteString("\n\nNodes\n")
	b.WriteString(instances(p.Nodes, true, verbose))
	return b.String()
}

// instances renders a plugin's instances by node ID, sorted.
func instances(m map[string]*structs.CSIInfo, node, verbose bool) string {
	if len(m) == 0 {
		return "No instances"
	}
	header := []string{"Node ID", "Healthy", "Health Description", "Update Time"}
	if node && verbose {
		header = append(header, "External Node ID", "Max Volumes", "Topology")
	}
	var rows [][]string
	for _, id := range slices.Sorted(maps.Keys(m)) {
		info := m[id]
		if info == nil {
			continue
		}
		row := []string{shortID(id, verbose), yesNo(info.Healthy), info.HealthDescription, timeOf(info.UpdateTime)}
		if node && verbose {
			row = append(row, nodeInfoCells(info.NodeInfo)...)
		}
		rows = append(rows, row)
	}
	return table(header, rows)
}
