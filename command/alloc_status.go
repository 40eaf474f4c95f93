package command

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// AllocStatusCommand shows one allocation and the claims on its volumes.
type AllocStatusCommand struct{ Meta }

func (c *AllocStatusCommand) Synopsis() string {
	return "Display status information about an allocation"
}

func (c *AllocStatusCommand) Help() string {
	return helpText(`
Usage: volplane alloc status [options] <id>

  Shows an allocation (by ID or a unique prefix of one) and, for each volume
  its task group requests, the volume it means for this allocation (with
  per_alloc, the source with the allocation's index, "vol[N]"), the claim
  mode it asks for, and its claim as the volume reports it: read, write or
  past (being released), its state, node and access mode, or "not claimed".
  Once the client runs the allocation, each volume also shows the step the
  client reached (claiming, claimed, staged, published or failed) and, while
  the client waits (say, for another allocation's claim to be released),
  why, how many attempts failed and when it tries again. Then each task's
  state as the client reports it; "volplane alloc logs" prints its output.
`, jobNamespaceOptionHelp+`

Status Options:

  -json
    Print the allocation as JSON.`+templateOptionHelp+`

  -verbose
    Show full node IDs and indexes.`, FlagSetClient)
}

func (c *AllocStatusCommand) Run(args []string) int {
	// No list: the command needs an ID.
	return runStatus(&c.Meta, c, statusCommand[*structs.Allocation, any]{
		name: "alloc status", flags: FlagSetClient | FlagSetNamespace, noun: "allocation",
		find: c.lookupAlloc,
		detail: func(client *api.Client, alloc *structs.Allocation, verbose bool) int {
			out := formatAlloc(alloc, verbose) + "\n\nVolumes\n" + c.allocVolumes(client, alloc, verbose)
			if waits := volumeWaits(alloc); waits != "" {
				out += "\n\nWaiting\n" + waits
			}
			if len(alloc.TaskStates) > 0 {
				out += "\n\nTasks\n" + taskStates(alloc) + taskEvents(alloc)
			}
			c.Ui.Output(out)
			return 0
		},
	}, args)
}

// lookupAlloc finds an allocation by ID or unique ID prefix, in -namespace.
func (c *AllocStatusCommand) lookupAlloc(client *api.Client, id string) (*structs.Allocation, error) {
	return lookup("allocations", id,
		func(id string) (*structs.Allocation, error) {
			a, _, err := client.Allocations().Info(id, c.QueryOptions())
			return a, err
		},
		func(prefix string) ([]*structs.Allocation, error) {
			q := c.QueryOptions()
			q.Prefix = prefix
			allocs, _, err := client.Allocations().List(q)
			return allocs, err
		},
		func(a *structs.Allocation) string {
			if a == nil {
				return "" // a null entry is never a match
			}
			return a.ID
		})
}

func formatAlloc(a *structs.Allocation, verbose bool) string {
	pairs := [][2]string{
		{"ID", a.ID},
		{"Name", a.Name},
		{"Namespace", a.Namespace},
		{"Job ID", a.JobID},
		{"Job Version", strconv.FormatUint(a.JobVersion, 10)},
		{"Task Group", a.TaskGroup},
		{"Node ID", shortID(a.NodeID, verbose)},
		{"Desired Status", a.DesiredStatus},
		{"Desired Description", a.DesiredDescription},
		{"Client Status", a.ClientStatus},
		{"Client Description", a.ClientDescription},
		{"Created", unixNano(a.CreateTime)},
		{"Modified", unixNano(a.ModifyTime)},
	}
	if verbose {
		pairs = append(pairs,
			[2]string{"Create Index", strconv.FormatUint(a.CreateIndex, 10)},
			[2]string{"Modify Index", strconv.FormatUint(a.ModifyIndex, 10)})
	}
	return kv(pairs)
}

// allocVolumes shows the volumes of the allocation's task group, each with
// the allocation's claim as its volume reports it. A volume that cannot be
// read is reported in its row, so that one failure does not hide the rest.
func (c *AllocStatusCommand) allocVolumes(client *api.Client, a *structs.Allocation, verbose bool) string {
	ns := a.Namespace
	if ns == "" {
		ns = c.namespace
	}
	job, _, err := client.Jobs().Info(a.JobID, &api.QueryOptions{Namespace: ns})
	switch {
	case api.IsNotFound(err):
		if len(a.VolumeStates) > 0 {
			return volumeSteps(a)
		}
		return fmt.Sprintf("Job %q is gone (purged): the allocation's volumes are unknown", a.JobID)
	case err != nil:
		return fmt.Sprintf("Error querying job %q: %s", a.JobID, err)
	}
	tg := job.LookupTaskGroup(a.TaskGroup)
	if tg == nil {
		return fmt.Sprintf("Job %q (version %d) has no task group %q", job.ID, job.Version, a.TaskGroup)
	}
	if len(tg.Volumes) == 0 {
		return "No volumes"
	}
	var rows [][]string
	for _, alias := range slices.Sorted(maps.Keys(tg.Volumes)) {
		req := tg.Volumes[alias]
		if req == nil {
			continue
		}
		volID := structs.VolumeIDForAlloc(req.Source, req.PerAlloc, a.Name)
		row := []string{alias, volID, req.ClaimMode().String()}
		vol, _, err := client.Volumes().Info(volID, &api.QueryOptions{Namespace: ns})
		switch {
		case api.IsNotFound(err):
			row = append(row, "volume not found", "", "", "")
		case err != nil:
			row = append(row, "error: "+err.Error(), "", "", "")
		default:
			row = append(row, claimOf(vol, a.ID, verbose)...)
		}
		if len(a.VolumeStates) > 0 {
			row = append(row, stepOf(a.VolumeStates[alias]))
		}
		rows = append(rows, row)
	}
	header := []string{"Volume", "Volume ID", "Mode", "Claim", "State", "Node ID", "Access Mode"}
	if len(a.VolumeStates) > 0 {
		// The client's side: how far it got with each volume.
		header = append(header, "Step")
	}
	out := table(header, rows)
	if job.Version != a.JobVersion {
		// The group may have changed since the allocation was placed.
		out += fmt.Sprintf("\n\nVolumes as requested by job version %d; the allocation runs version %d.",
			job.Version, a.JobVersion)
	}
	return out
}

// claimOf describes the allocation's claim on vol: which claim map holds it,
// its state, node and access mode.
func claimOf(vol *structs.CSIVolume, allocID string, verbose bool) []string {
	for _, held := range []struct {
		kind   string
		claims map[string]*structs.CSIVolumeClaim
	}{{"write", vol.WriteClaims}, {"read", vol.ReadClaims}, {"past", vol.PastClaims}} {
		if cl := held.claims[allocID]; cl != nil {
			return []string{held.kind, cl.State.String(), shortID(cl.NodeID, verbose), string(cl.AccessMode)}
		}
	}
	return []string{"not claimed", "", "", ""}
}

// stepOf is the step the client reached with a volume, "" before it
// reported any.
func stepOf(st *structs.AllocVolumeState) string {
	if st == nil {
		return ""
	}
	return st.Step
}

// volumeSteps lists the volumes the client reported on, when the job that
// names them is gone.
func volumeSteps(a *structs.Allocation) string {
	var rows [][]string
	for _, alias := range slices.Sorted(maps.Keys(a.VolumeStates)) {
		st := a.VolumeStates[alias]
		if st != nil {
			rows = append(rows, []string{alias, st.VolumeID, st.Step})
		}
	}
	return table([]string{"Volume", "Volume ID", "Step"}, rows)
}

// volumeWaits says, for each volume the client is waiting on, why (for a
// claim, the error that names the allocation holding the volume), how many
// attempts failed and when the next one is; "" when it waits on none.
func volumeWaits(a *structs.Allocation) string {
	var lines []string
	for _, alias := range slices.Sorted(maps.Keys(a.VolumeStates)) {
		st := a.VolumeStates[alias]
		if st == nil || st.Waiting == "" {
			continue
		}
		line := fmt.Sprintf("%s (%s, %s): %s", alias, st.VolumeID, st.Step, st.Waiting)
		if st.Attempts > 0 {
			line += fmt.Sprintf(" [%d failed attempts", st.Attempts)
			if st.NextRetry > 0 {
				line += "; next at " + unixNano(st.NextRetry)
			}
			line += "]"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// taskStates shows each task of the allocation as its client reported it.
func taskStates(a *structs.Allocation) string {
	var rows [][]string
	for _, name := range slices.Sorted(maps.Keys(a.TaskStates)) {
		ts := a.TaskStates[name]
		if ts == nil {
			continue
		}
		rows = append(rows, []string{name, ts.State, yesNo(ts.Failed), unixNano(ts.StartedAt), unixNano(ts.FinishedAt), ts.Description})
	}
	return table([]string{"Task", "State", "Failed", "Started", "Finished", "Description"}, rows)
}

// taskEvents shows each task's recent events, the newest first, as
// Nomad's alloc status does.
func taskEvents(a *structs.Allocation) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(a.TaskStates)) {
		ts := a.TaskStates[name]
		if ts == nil || len(ts.Events) == 0 {
			continue
		}
		var rows [][]string
		for i := len(ts.Events) - 1; i >= 0; i-- {
			e := ts.Events[i]
			if e == nil {
				continue
			}
			desc := e.DisplayMessage
			if desc == "" {
				desc = e.Message
			}
			rows = append(rows, []string{unixNano(e.Time), e.Type, desc})
		}
		fmt.Fprintf(&b, "\n\nTask %q is %q\nRecent Events:\n%s", name, ts.State,
			table([]string{"Time", "Type", "Description"}, rows))
	}
	return b.String()
}
