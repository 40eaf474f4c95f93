package command

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// JobStatusCommand lists jobs or shows one with its placement and
// allocations.
type JobStatusCommand struct{ Meta }

func (c *JobStatusCommand) Synopsis() string { return "Display status information about jobs" }

func (c *JobStatusCommand) Help() string {
	return helpText(`
Usage: volplane job status [options] [id]

  Without an ID, lists the jobs with their type, status and how many of
  their allocations are placed. With an ID (or a unique prefix of one),
  shows the job, per task group the allocations wanted and placed with
  every reason a group is blocked (a volume that does not exist yet, or
  per node why it was filtered), and the job's allocations. Mount flags
  are never shown.
`, jobNamespaceOptionHelp+`

Status Options:

  -json
    Print the job or the list as JSON.`+templateOptionHelp+`

  -verbose
    Show full allocation and node IDs, and indexes.`, FlagSetClient)
}

func (c *JobStatusCommand) Run(args []string) int {
	return runStatus(&c.Meta, c, statusCommand[*structs.Job, *structs.JobListStub]{
		name: "job status", flags: FlagSetClient | FlagSetNamespace, noun: "job", nouns: "jobs",
		list: func(client *api.Client) ([]*structs.JobListStub, error) {
			stubs, _, err := client.Jobs().List(c.QueryOptions())
			return stubs, err
		},
		none:   "No jobs",
		header: []string{"ID", "Type", "Status", "Placed/Desired"},
		row: func(j *structs.JobListStub, _ bool) []string {
			return []string{j.ID, j.Type, j.Status, ratio(j.Placed, j.Desired)}
		},
		find: c.lookupJob,
		// The server redacts already; doing it again here means a mount flag
		// cannot reach the terminal even from a server that forgot.
		clean: (*structs.Job).Sanitize,
		detail: func(client *api.Client, job *structs.Job, verbose bool) int {
			allocs, _, err := client.Jobs().Allocations(job.ID, &api.QueryOptions{Namespace: job.Namespace})
			if err != nil {
				return c.Fail("querying job allocations", err)
			}
			c.Ui.Output(formatJob(job, allocs, verbose))
			return 0
		},
	}, args)
}

func formatJob(j *structs.Job, allocs []*structs.Allocation, verbose bool) string {
	pairs := [][2]string{
		{"ID", j.ID},
		{"Name", j.Name},
		{"Namespace", j.Namespace},
		{"Type", j.Type},
		{"Status", j.Status},
		{"Stopped", yesNo(j.Stop)},
		{"Version", strconv.FormatUint(j.Version, 10)},
		{"Submit Time", unixNano(j.SubmitTime)},
	}
	if verbose {
		pairs = append(pairs,
			[2]string{"Create Index", strconv.FormatUint(j.CreateIndex, 10)},
			[2]string{"Modify Index", strconv.FormatUint(j.ModifyIndex, 10)},
			[2]string{"Job Modify Index", strconv.FormatUint(j.JobModifyIndex, 10)})
	}
	var b strings.Builder
	b.WriteString(kv(pairs))
	b.WriteString("\n\n" + formatPlacement(j))
	b.WriteString("\n\nAllocations\n")
	b.WriteString(formatAllocs(allocs, verbose))
	return b.String()
}

// formatAllocs lists allocations by group and index.
func formatAllocs(allocs []*structs.Allocation, verbose bool) string {
	allocs = slices.DeleteFunc(slices.Clone(allocs), func(a *structs.Allocation) bool { return a == nil })
	if len(allocs) == 0 {
		return "No allocations"
	}
	slices.SortFunc(allocs, func(a, b *structs.Allocation) int {
		return cmp.Or(cmp.Compare(a.TaskGroup, b.TaskGroup), cmp.Compare(allocIndex(a.Name), allocIndex(b.Name)),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	rows := make([][]string, 0, len(allocs))
	for _, a := range allocs {
		rows = append(rows, []string{shortID(a.ID, verbose), a.Name, shortID(a.NodeID, verbose), a.DesiredStatus,
			a.ClientStatus, unixNano(a.ModifyTime)})
	}
	return table([]string{"ID", "Name", "Node ID", "Desired", "Client Status", "Modified"}, rows)
}

// allocIndex is N of an allocation named "job.group[N]", or -1.
func allocIndex(name string) int {
	s := strings.TrimSuffix(strings.TrimPrefix(structs.AllocSuffix(name), "["), "]")
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}
