package command

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// VolumeStatusCommand lists volumes or shows one in detail.
type VolumeStatusCommand struct {
	Meta
	// pluginID is -plugin_id.
	pluginID string
}

func (c *VolumeStatusCommand) Synopsis() string { return "Display status information about volumes" }

func (c *VolumeStatusCommand) Help() string {
	return helpText(`
Usage: volplane volume status [options] [id]

  Without an ID, lists the CSI volumes with their plugin, schedulability,
  current access mode and claim counts; with -verbose, then also the
  volumes each plugin's storage provider holds (ListVolumes), and which of
  them are registered. With an ID (or a unique prefix of one), shows the
  volume in detail: capacity, capabilities, mount options (mount flags are
  never shown), topologies, and every claim with its release progress.
  Secrets are never shown.
`, `
Status Options:
`+typeOptionHelp+`

  -plugin_id=<id>
    List only the volumes of this plugin, and with -verbose only its
    storage provider's.
`+formatOptionsHelp+`

  -verbose
    Show full allocation and node IDs, parameters, context and indexes;
    under a list, the storage providers' volumes.`, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeStatusCommand) Run(args []string) int {
	return runStatus(&c.Meta, c, statusCommand[*structs.CSIVolume, *structs.CSIVolListStub]{
		name: "volume status", flags: FlagSetClient | FlagSetNamespace, noun: "volume", nouns: "volumes",
		list: func(client *api.Client) ([]*structs.CSIVolListStub, error) {
			q := c.QueryOptions()
			q.PluginID = c.pluginID
			return listVolumes(client, q)
		},
		ownFlags: func(f *flag.FlagSet) {
			c.TypeFlag(f)
			f.StringVar(&c.pluginID, "plugin_id", "", "")
		},
		afterList: func(client *api.Client, verbose bool) int {
			if !verbose {
				return 0
			}
			return c.listExternal(client)
		},
		none:   "No CSI volumes",
		header: []string{"ID", "Name", "Plugin ID", "Schedulable", "Access Mode", "Readers", "Writers", "Past Claims"},
		row: func(v *structs.CSIVolListStub, _ bool) []string {
			return []string{v.ID, v.Name, v.PluginID, yesNo(v.Schedulable), string(v.AccessMode),
				strconv.Itoa(v.CurrentReaders), strconv.Itoa(v.CurrentWriters), strconv.Itoa(v.PastClaims)}
		},
		find: c.lookupVolume,
		// The server sanitizes already; doing it again here means a secret
		// cannot reach the terminal even from a server that forgot.
		clean: (*structs.CSIVolume).Sanitize,
		detail: func(_ *api.Client, v *structs.CSIVolume, verbose bool) int {
			c.Ui.Output(formatVolume(v, verbose))
			return 0
		},
	}, args)
}

// lookupVolume finds a volume by ID or unique ID prefix, in -namespace.
func (c *VolumeStatusCommand) lookupVolume(client *api.Client, id string) (*structs.CSIVolume, error) {
	return lookup("volumes", id,
		func(id string) (*structs.CSIVolume, error) {
			v, _, err := client.Volumes().Info(id, c.QueryOptions())
			return v, err
		},
		func(prefix string) ([]*structs.CSIVolListStub, error) {
			q := c.QueryOptions()
			q.Prefix = prefix
			return listVolumes(client, q)
		},
		func(s *structs.CSIVolListStub) string { return s.ID })
}

// listVolumes reads every page of the volume list.
func listVolumes(client *api.Client, q *api.QueryOptions) ([]*structs.CSIVolListStub, error) {
	var all []*structs.CSIVolListStub
	for {
		page, qm, err := client.Volumes().List(q)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		// A token that does not move would loop forever.
		if qm.NextToken == "" || qm.NextToken == q.NextToken {
			return all, nil
		}
		q.NextToken = qm.NextToken
	}
}

func formatVolume(v *structs.CSIVolume, verbose bool) string {
	var b strings.Builder
	pairs := [][2]string{
		{"ID", v.ID},
		{"Name", v.Name},
		{"Namespace", v.Namespace},
		{"External ID", v.ExternalID},
		{"Plugin ID", v.PluginID},
		{"Provider", v.Provider},
		{"Version", v.ProviderVersion},
		{"Schedulable", yesNo(v.Schedulable)},
		{"Controllers Healthy", strconv.Itoa(v.ControllersHealthy)},
		{"Controllers Expected", strconv.Itoa(v.ControllersExpected)},
		{"Nodes Healthy", strconv.Itoa(v.NodesHealthy)},
		{"Nodes Expected", strconv.Itoa(v.NodesExpected)},
		{"Access Mode", string(v.AccessMode)},
		{"Attachment Mode", string(v.AttachmentMode)},
		{"Capacity", bytesOf(v.Capacity)},
		{"Capacity Min", bytesOf(v.RequestedCapacityMin)},
		{"Capacity Max", bytesOf(v.RequestedCapacityMax)},
		{"Clone ID", v.CloneID},
		{"Snapshot ID", v.SnapshotID},
	}
	if v.UnschedulableReason != "" {
		// Right under Schedulable: why it is false.
		i := slices.IndexFunc(pairs, func(p [2]string) bool { return p[0] == "Schedulable" })
		pairs = slices.Insert(pairs, i+1, [2]string{"Unschedulable Because", v.UnschedulableReason})
	}
	if verbose {
		pairs = append(pairs,
			[2]string{"Create Index", strconv.FormatUint(v.CreateIndex, 10)},
			[2]string{"Modify Index", strconv.FormatUint(v.ModifyIndex, 10)},
			[2]string{"Create Time", unixNano(v.CreateTime)},
			[2]string{"Modify Time", unixNano(v.ModifyTime)})
	}
	b.WriteString(kv(pairs))

	b.WriteString("\n\nCapabilities\n")
	if len(v.RequestedCapabilities) == 0 {
		b.WriteString("No capabilities")
	} else {
		var rows [][]string
		for _, cap := range v.RequestedCapabilities {
			if cap != nil {
				rows = append(rows, []string{string(cap.AccessMode), string(cap.AttachmentMode)})
			}
		}
		b.WriteString(table([]string{"Access Mode", "Attachment Mode"}, rows))
	}

	b.WriteString("\n\nMount Options\n")
	if v.MountOptions == nil {
		b.WriteString("No mount options")
	} else {
		// Mount flags can carry credentials: show that there are some, never
		// what they are, whatever the server sent.
		flags := ""
		if len(v.MountOptions.MountFlags) > 0 {
			flags = structs.RedactedValue
		}
		b.WriteString(kv([][2]string{{"File System Type", v.MountOptions.FSType}, {"Mount Flags", flags}}))
	}

	if r := v.RequestedTopologies; r != nil && len(r.Required)+len(r.Preferred) > 0 {
		var rows [][]string
		for _, t := range r.Required {
			rows = append(rows, []string{"required", segments(t)})
		}
		for _, t := range r.Preferred {
			rows = append(rows, []string{"preferred", segments(t)})
		}
		b.WriteString("\n\nRequested Topologies\n")
		b.WriteString(table([]string{"Kind", "Segments"}, rows))
	}
	if len(v.Topologies) > 0 {
		var rows [][]string
		for i, t := range v.Topologies {
			rows = append(rows, []string{fmt.Sprintf("%02d", i+1), segments(t)})
		}
		b.WriteString("\n\nTopologies\n")
		b.WriteString(table([]string{"Topology", "Segments"}, rows))
	}

	if verbose {
		writeMap(&b, "Parameters", v.Parameters)
		writeMap(&b, "Context", v.Context)
	}

	b.WriteString("\n\nClaims\n")
	b.WriteString(formatClaims(v, verbose))
	return b.String()
}

// formatClaims lists each allocation's claim once: a claim being released
// keeps its live claim until it is freed, and is shown as the past claim,
// with its release progress.
func formatClaims(v *structs.CSIVolume, verbose bool) string {
	var rows [][]string
	add := func(kind string, m map[string]*structs.CSIVolumeClaim) {
		for _, id := range slices.Sorted(maps.Keys(m)) {
			cl := m[id]
			if cl == nil || kind != "past" && v.PastClaims[id] != nil {
				continue
			}
			lastError := cl.LastError
			if cl.Note != "" {
				// What the release did that is worth knowing, such as a
				// node step skipped because the node is down.
				lastError = strings.TrimSpace(cl.Note + "; " + lastError)
				lastError = strings.TrimSuffix(lastError, ";")
			}
			next := unixNano(cl.NextAttempt)
			if cl.AttemptInFlight {
				// The time is the running retry's deadline.
				next = "running until " + next
			}
			rows = append(rows, []string{kind, shortID(id, verbose), shortID(cl.NodeID, verbose), cl.Mode.String(),
				string(cl.AccessMode), cl.State.String(), strconv.Itoa(cl.Attempts), lastError, next})
		}
	}
	add("read", v.ReadClaims)
	add("write", v.WriteClaims)
	add("past", v.PastClaims)
	if len(rows) == 0 {
		return "No claims"
	}
	return table([]string{"Claim", "Allocation ID", "Node ID", "Mode", "Access Mode", "State", "Attempts", "Last Error", "Next Attempt"}, rows)
}

func writeMap(b *strings.Builder, title string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	var pairs [][2]string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, [2]string{k, m[k]})
	}
	b.WriteString("\n\n" + title + "\n")
	b.WriteString(kv(pairs))
}

// segments formats a topology as "k=v, k=v", sorted by key.
func segments(t *structs.CSITopology) string {
	if t == nil {
		return ""
	}
	parts := make([]string, 0, len(t.Segments))
	for _, k := range slices.Sorted(maps.Keys(t.Segments)) {
		parts = append(parts, k+"="+t.Segments[k])
	}
	return strings.Join(parts, ", ")
}

// bytesOf formats a size in binary units, "" (shown as <none>) for 0.
func bytesOf(n int64) string {
	if n <= 0 {
		return ""
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + units[i]
}
