package command

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/spec"
	"github.com/volplane/volplane/structs"
)

// jobNamespaceOptionHelp documents -namespace for the job and alloc
// commands (the shared text speaks of volumes).
const jobNamespaceOptionHelp = `
  -namespace=<namespace>
    The namespace of the job. Overrides the VOLPLANE_NAMESPACE environment
    variable. Default: the server's default namespace.`

// JobRunCommand registers a job from a specification file and follows it
// until its allocations run, fail or are blocked.
type JobRunCommand struct {
	Meta
	// Stdin is read when the file is "-".
	Stdin io.Reader
}

func (c *JobRunCommand) Synopsis() string { return "Run a job" }

func (c *JobRunCommand) Help() string {
	return helpText(`
Usage: volplane job run [options] <file>

  Registers a job (or a new version of a registered one) from a
  specification file in HCL (the subset of Nomad's job specification that
  volumes need) or JSON, then follows it as Nomad's monitor does: it prints
  each change of the placement and of the allocations (created, each
  volume's step, status) until every allocation the job wants runs (or
  completed), failed or is blocked, then shows, per task group, how many
  allocations are wanted and placed, and why any are missing. Use "-" as
  the file to read the specification from standard input.

  The exit code is 0 when every allocation runs or completed, 2 when one
  failed or could not be placed, and 1 on any other error.

  See examples/job-per-alloc.hcl and examples/job-multi-reader.hcl.
`, jobNamespaceOptionHelp+`

  The namespace given in the specification wins over -namespace.

Run Options:

  -detach
    Return after registering, without following the job.`+noColorHelp, FlagSetClient)
}

func (c *JobRunCommand) Run(args []string) int {
	var detach bool
	f := c.FlagSet("job run", FlagSetClient|FlagSetNamespace)
	f.BoolVar(&detach, "detach", false, "")
	color := c.colorFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <file>")
	}
	// The same reading as volume register: "-" is stdin, the size is bounded.
	src, name, err := readSpec(c.Stdin, f.Arg(0))
	if err != nil {
		return c.Fail("reading job specification", err)
	}
	job, err := spec.ParseJob(name, src)
	if err != nil {
		return c.Fail("parsing job specification", err)
	}
	// Parsing fills in the default namespace when the file names none;
	// -namespace stands in for it then.
	if c.namespace != "" && job.Namespace == structs.DefaultNamespace {
		job.Namespace = c.namespace
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	warnings, wm, err := client.Jobs().Register(job, c.WriteOptions())
	if err != nil {
		return c.Fail("registering job", err)
	}
	for _, w := range warnings {
		c.Ui.Warn("Warning: " + w)
	}
	c.Ui.Output(fmt.Sprintf("Job %q registered", job.ID))
	if detach {
		return 0
	}

	c.Ui.Output("")
	p := &progress{m: &c.Meta, paint: color(), now: time.Now}
	code, placed := c.monitorJob(context.Background(), client, job, wm.LastIndex, p)
	if placed != nil {
		c.Ui.Output("\n" + formatPlacement(placed))
	}
	return code
}

// formatPlacement shows, per task group in the job's order, the allocations
// wanted and placed, then every reason a group is blocked and what a
// rolling update waits for.
func formatPlacement(j *structs.Job) string {
	var rows [][]string
	var blocked strings.Builder
	for _, tg := range j.TaskGroups {
		if tg == nil {
			continue
		}
		p := j.Placement[tg.Name]
		if p == nil {
			// The placer has not run for this version yet.
			desired := "pending"
			if !j.IsSystem() {
				desired = fmt.Sprint(tg.Count)
			}
			rows = append(rows, []string{tg.Name, desired, "pending"})
			continue
		}
		rows = append(rows, []string{tg.Name, fmt.Sprint(p.Desired), fmt.Sprint(p.Placed)})
		if len(p.Blocked) > 0 {
			fmt.Fprintf(&blocked, "\n\nGroup %q is blocked:", tg.Name)
			for _, reason := range p.Blocked {
				blocked.WriteString("\n  * " + oneLine(reason))
			}
		}
		if len(p.Waiting) > 0 {
			fmt.Fprintf(&blocked, "\n\nGroup %q is being updated:", tg.Name)
			for _, reason := range p.Waiting {
				blocked.WriteString("\n  * " + oneLine(reason))
			}
		}
	}
	if len(rows) == 0 {
		return "Placement\nNo task groups"
	}
	return "Placement\n" + table([]string{"Group", "Desired", "Placed"}, rows) + blocked.String()
}

// JobStopCommand stops a job, and with -purge removes it, then follows the
// release of the claims its allocations held.
type JobStopCommand struct{ Meta }

func (c *JobStopCommand) Synopsis() string { return "Stop a job" }

func (c *JobStopCommand) Help() string {
	return helpText(`
Usage: volplane job stop [options] <id>

  Stops a job: its allocations are stopped and, once their clients report
  them done, the volumes they claimed are released. The job stays visible
  in job status until it is purged. The ID may be a unique prefix.

  Unless -detach is given, the command then follows the release of every
  claim the job's allocations held, printing each step (waiting for the
  client, node unpublish, controller unpublish, freed, or a failed attempt
  and when the next one is due) until every claim is free.
`, jobNamespaceOptionHelp+`

Stop Options:

  -purge
    Also remove the job from the servers' state.

  -detach
    Return once the job is stopped, without following the release of its
    claims.`+noColorHelp, FlagSetClient)
}

func (c *JobStopCommand) Run(args []string) int {
	var purge, detach bool
	f := c.FlagSet("job stop", FlagSetClient|FlagSetNamespace)
	f.BoolVar(&purge, "purge", false, "")
	f.BoolVar(&detach, "detach", false, "")
	color := c.colorFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <id>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	job, err := c.lookupJob(client, f.Arg(0))
	if err != nil {
		return c.Fail("querying job", err)
	}
	var allocs []*structs.Allocation
	if !detach {
		if allocs, _, err = client.Jobs().Allocations(job.ID, &api.QueryOptions{Namespace: job.Namespace}); err != nil {
			return c.Fail("querying the job's allocations", err)
		}
	}
	wm, err := client.Jobs().Deregister(job.ID, purge, &api.WriteOptions{Namespace: job.Namespace})
	if err != nil {
		return c.Fail("stopping job", err)
	}
	if purge {
		c.Ui.Output(fmt.Sprintf("Job %q stopped and purged", job.ID))
	} else {
		c.Ui.Output(fmt.Sprintf("Job %q stopped", job.ID))
	}
	if detach || len(allocs) == 0 {
		return 0
	}
	return c.followJobRelease(client, job, allocs, wm.LastIndex, &progress{m: &c.Meta, paint: color(), now: time.Now})
}

// followJobRelease follows the release of the claims of the allocations of
// a job stopped at index. The events from the stop on are read before the
// claims are, so that no step taken in between is missed.
func (c *JobStopCommand) followJobRelease(client *api.Client, job *structs.Job, allocs []*structs.Allocation, index uint64, p *progress) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := openClaimEvents(ctx, client, max(index, 1)-1)
	if err != nil {
		c.Ui.Warn(fmt.Sprintf("Warning: cannot follow the release of the job's claims: %s", err))
		return 0
	}
	defer stream.Close()
	events, errc := nextClaimEvents(ctx, stream)
	pending, err := jobClaims(client, job, allocs)
	if err != nil {
		return c.Fail("reading the job's claims", err)
	}
	c.Ui.Output("")
	if len(pending) == 0 {
		p.headline(fmt.Sprintf("Job %q holds no volume claims", job.ID))
		return 0
	}
	p.headline(fmt.Sprintf("Following the release of %s of job %q", plural(len(pending), "volume claim"), job.ID))
	if !p.followRelease(ctx, events, errc, pending) {
		return 1
	}
	p.m.Ui.Output(p.paint.paint(styleBold, "==> "+p.stamp()+": ") + p.paint.paint(styleGreen, fmt.Sprintf("Every volume claim of job %q is free", job.ID)))
	return 0
}

// lookupJob finds a job by ID or unique ID prefix, in -namespace.
func (m *Meta) lookupJob(client *api.Client, id string) (*structs.Job, error) {
	return lookup("jobs", id,
		func(id string) (*structs.Job, error) {
			j, _, err := client.Jobs().Info(id, m.QueryOptions())
			return j, err
		},
		func(prefix string) ([]*structs.JobListStub, error) {
			q := m.QueryOptions()
			q.Prefix = prefix
			stubs, _, err := client.Jobs().List(q)
			return stubs, err
		},
		func(s *structs.JobListStub) string { return s.ID })
}
