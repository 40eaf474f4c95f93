package command

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/spec"
	"github.com/volplane/volplane/structs"
)

// defaultPlacementWait bounds how long `job run` waits for the servers to
// place the job before it prints the placement as it is.
const defaultPlacementWait = 5 * time.Second

// jobNamespaceOptionHelp documents -namespace for the job and alloc
// commands (the shared text speaks of volumes).
const jobNamespaceOptionHelp = `
  -namespace=<namespace>
    The namespace of the job. Overrides the VOLPLANE_NAMESPACE environment
    variable. Default: the server's default namespace.`

// JobRunCommand registers a job from a specification file and shows how the
// servers placed it.
type JobRunCommand struct {
	Meta
	// Stdin is read when the file is "-".
	Stdin io.Reader
	// PlacementWait bounds the wait for the placement; 0 means
	// defaultPlacementWait.
	PlacementWait time.Duration
}

func (c *JobRunCommand) Synopsis() string { return "Run a job" }

func (c *JobRunCommand) Help() string {
	return helpText(`
Usage: volplane job run [options] <file>

  Registers a job (or a new version of a registered one) from a
  specification file in HCL (the subset of Nomad's job specification that
  volumes need) or JSON, then waits a few seconds for the servers to place
  it and shows, per task group, how many allocations are wanted and placed,
  and why any are missing. Use "-" as the file to read the specification
  from standard input.

  See examples/job-per-alloc.hcl and examples/job-multi-reader.hcl.
`, jobNamespaceOptionHelp+`

  The namespace given in the specification wins over -namespace.

Run Options:

  -detach
    Return after registering, without waiting for the placement.`, FlagSetClient)
}

func (c *JobRunCommand) Run(args []string) int {
	var detach bool
	f := c.FlagSet("job run", FlagSetClient|FlagSetNamespace)
	f.BoolVar(&detach, "detach", false, "")
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

	// Block until the job changes after the registration, which is when the
	// placer has written its placement, or until the wait is over.
	wait := c.PlacementWait
	if wait <= 0 {
		wait = defaultPlacementWait
	}
	placed, _, err := client.Jobs().Info(job.ID, &api.QueryOptions{
		Namespace: job.Namespace, WaitIndex: wm.LastIndex, WaitTime: wait,
	})
	if err != nil {
		// The job is registered, which is what was asked; say why there is
		// no summary without failing the command.
		c.Ui.Warn(fmt.Sprintf("Warning: could not read the job's placement: %s", err))
		return 0
	}
	c.Ui.Output("\n" + formatPlacement(placed))
	return 0
}

// formatPlacement shows, per task group in the job's order, the allocations
// wanted and placed, then every reason a group is blocked.
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
	}
	if len(rows) == 0 {
		return "Placement\nNo task groups"
	}
	return "Placement\n" + table([]string{"Group", "Desired", "Placed"}, rows) + blocked.String()
}

// JobStopCommand stops a job, and with -purge removes it.
type JobStopCommand struct{ Meta }

func (c *JobStopCommand) Synopsis() string { return "Stop a job" }

func (c *JobStopCommand) Help() string {
	return helpText(`
Usage: volplane job stop [options] <id>

  Stops a job: its allocations are stopped and, once their clients report
  them done, the volumes they claimed are released. The job stays visible
  in job status until it is purged. The ID may be a unique prefix.
`, jobNamespaceOptionHelp+`

Stop Options:

  -purge
    Also remove the job from the servers' state.`, FlagSetClient)
}

func (c *JobStopCommand) Run(args []string) int {
	var purge bool
	f := c.FlagSet("job stop", FlagSetClient|FlagSetNamespace)
	f.BoolVar(&purge, "purge", false, "")
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
	if _, err := client.Jobs().Deregister(job.ID, purge, &api.WriteOptions{Namespace: job.Namespace}); err != nil {
		return c.Fail("stopping job", err)
	}
	if purge {
		c.Ui.Output(fmt.Sprintf("Job %q stopped and purged", job.ID))
	} else {
		c.Ui.Output(fmt.Sprintf("Job %q stopped", job.ID))
	}
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
