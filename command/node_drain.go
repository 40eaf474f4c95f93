package command

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// defaultDrainDeadline is the deadline of a drain without -deadline,
// -force or -no-deadline, as Nomad's.
const defaultDrainDeadline = time.Hour

// NodeDrainCommand starts or ends the drain of a node, as Nomad's.
type NodeDrainCommand struct {
	Meta
	// Stdin is where the answer to the confirmation is read from.
	Stdin io.Reader
}

func (c *NodeDrainCommand) Synopsis() string { return "Toggle drain mode on a given node" }

func (c *NodeDrainCommand) Help() string {
	return helpText(`
Usage: volplane node drain [options] <node>

  Toggles drain mode on a client node (by ID, unique ID prefix or name), as
  Nomad's. A draining node is ineligible: it gets no new allocations. The
  servers' drainer then stops the node's allocations in an order that keeps
  the node's CSI node plugins as long as volumes on it need them: first
  the allocations of non-system jobs, which are placed again on other nodes
  as their volumes allow; once those have stopped and every volume claim
  they held on the node was released (node unpublish by the node plugin,
  then controller unpublish), the allocations of system jobs, the plugins
  among them, unless -ignore-system. When the deadline passes, whatever is
  left is stopped at once. A drain that is done leaves the node ineligible;
  volplane node eligibility -enable makes it eligible again.

  Without -detach the command follows the drain until it is done: the
  allocations stopping and the claims released. Ctrl-C stops following; it
  does not cancel the drain.
`, `
Node Drain Options:

  -enable
    Enable draining for the specified node.

  -disable
    Disable draining for the specified node. The allocations already
    stopped stay stopped; the node becomes eligible again unless
    -keep-ineligible.

  -deadline <duration>
    Set the deadline by which all allocations must be moved off the node.
    Remaining allocations after the deadline are forced removed from the
    node. If unspecified, a default deadline of one hour is applied.

  -force
    Force remove allocations off the node immediately.

  -no-deadline
    No deadline allows the allocations to drain off the node without being
    force stopped after a certain deadline.

  -ignore-system
    Ignore system allows the drain to complete without stopping system job
    allocations (the CSI node plugins among them).

  -keep-ineligible
    Keep ineligible will maintain the node's scheduling ineligibility even
    if the drain is being disabled. By default -disable makes the node
    eligible again.

  -detach
    Return immediately instead of entering monitor mode.

  -m <message>
    Message for the drain update operation, kept in the node's last drain.

  -yes
    Automatic yes to prompts.`+noColorHelp, FlagSetClient)
}

func (c *NodeDrainCommand) Run(args []string) int {
	f := c.FlagSet("node drain", FlagSetClient)
	var enable, disable, force, noDeadline, ignoreSystem, keepIneligible, detach, yes bool
	var deadline, message string
	f.BoolVar(&enable, "enable", false, "")
	f.BoolVar(&disable, "disable", false, "")
	f.StringVar(&deadline, "deadline", "", "")
	f.BoolVar(&force, "force", false, "")
	f.BoolVar(&noDeadline, "no-deadline", false, "")
	f.BoolVar(&ignoreSystem, "ignore-system", false, "")
	f.BoolVar(&keepIneligible, "keep-ineligible", false, "")
	f.BoolVar(&detach, "detach", false, "")
	f.StringVar(&message, "m", "", "")
	f.BoolVar(&yes, "yes", false, "")
	color := c.colorFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	spec, err := drainSpecOf(enable, disable, deadline, force, noDeadline, ignoreSystem)
	if err != nil {
		return c.UsageError(c, "%s", err)
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <node>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	arg := f.Arg(0)
	node, err := lookupNode(client, arg)
	if err != nil {
		return c.Fail("toggling drain mode", err)
	}
	verb := "enable"
	if disable {
		verb = "disable"
	}
	if arg != node.ID && !yes && !confirm(&c.Meta, c.Stdin, fmt.Sprintf("Are you sure you want to %s drain mode for node %q? [y/N]", verb, node.ID), "Canceling drain toggle") {
		return 0
	}
	meta := map[string]string{}
	if disable && node.LastDrain != nil {
		for k, v := range node.LastDrain.Meta {
			meta[k] = v
		}
	}
	if message != "" {
		if enable {
			meta["message"] = message
		} else {
			meta["cancel_message"] = message
		}
	}
	if len(meta) == 0 {
		meta = nil
	}
	_, err = client.Nodes().UpdateDrainOpts(node.ID, &api.DrainOptions{DrainSpec: spec, MarkEligible: !keepIneligible, Meta: meta}, c.WriteOptions())
	if err != nil {
		return c.Fail("updating drain specification", err)
	}
	if disable {
		c.Ui.Output(fmt.Sprintf("Node %q drain strategy unset", node.ID))
		return 0
	}
	if detach {
		c.Ui.Output(fmt.Sprintf("Node %q drain strategy set", node.ID))
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	p := &progress{m: &c.Meta, paint: color(), now: time.Now}
	p.headline(fmt.Sprintf("Node %q drain strategy set; Ctrl-C to stop monitoring: will not cancel the node drain", node.ID))
	return c.monitorDrain(ctx, client, node.ID, p)
}

// drainSpecOf checks the drain flags as Nomad's node drain does and returns
// the spec to send (nil for -disable).
func drainSpecOf(enable, disable bool, deadline string, force, noDeadline, ignoreSystem bool) (*structs.DrainSpec, error) {
	switch {
	case enable == disable:
		return nil, fmt.Errorf("Either the '-enable' or '-disable' flag must be set")
	case disable && (deadline != "" || force || noDeadline || ignoreSystem):
		return nil, fmt.Errorf("-disable can't be combined with flags configuring drain strategy")
	case deadline != "" && (force || noDeadline):
		return nil, fmt.Errorf("-deadline can't be combined with -force or -no-deadline")
	case force && noDeadline:
		return nil, fmt.Errorf("-force and -no-deadline are mutually exclusive")
	case disable:
		return nil, nil
	}
	spec := &structs.DrainSpec{Deadline: defaultDrainDeadline, IgnoreSystemJobs: ignoreSystem}
	switch {
	case force:
		spec.Deadline = -time.Second
	case noDeadline:
		spec.Deadline = 0
	case deadline != "":
		d, err := time.ParseDuration(deadline)
		if err != nil {
			return nil, fmt.Errorf("Failed to parse deadline %q: %v", deadline, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("A positive drain duration must be given")
		}
		spec.Deadline = d
	}
	return spec, nil
}

// confirm asks a yes/no question and reads the answer, a line, from in;
// only an exact "y" is a yes, as Nomad's.
func confirm(m *Meta, in io.Reader, question, canceled string) bool {
	m.Ui.Output(question)
	answer, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		m.Ui.Error(fmt.Sprintf("Failed to parse answer: %v", err))
		return false
	}
	if strings.TrimSpace(answer) != "y" {
		m.Ui.Output(canceled)
		return false
	}
	return true
}

// NodeEligibilityCommand sets a node's scheduling eligibility, as Nomad's.
type NodeEligibilityCommand struct{ Meta }

func (c *NodeEligibilityCommand) Synopsis() string {
	return "Toggle scheduling eligibility for a given node"
}

func (c *NodeEligibilityCommand) Help() string {
	return helpText(`
Usage: volplane node eligibility [options] <node>

  Toggles the scheduling eligibility of a client node (by ID, unique ID
  prefix or name), as Nomad's. An ineligible node gets no new allocations,
  of any job; what runs there keeps running. A draining node cannot be made
  eligible: disable the drain instead.
`, `
Node Eligibility Options:

  -enable
    Enable scheduling eligibility.

  -disable
    Disable scheduling eligibility.`, FlagSetClient)
}

func (c *NodeEligibilityCommand) Run(args []string) int {
	f := c.FlagSet("node eligibility", FlagSetClient)
	var enable, disable bool
	f.BoolVar(&enable, "enable", false, "")
	f.BoolVar(&disable, "disable", false, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if enable == disable {
		return c.UsageError(c, "Either the '-enable' or '-disable' flag must be set")
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <node>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	node, err := lookupNode(client, f.Arg(0))
	if err != nil {
		return c.Fail("updating scheduling eligibility", err)
	}
	if _, err := client.Nodes().ToggleEligibility(node.ID, enable, c.WriteOptions()); err != nil {
		return c.Fail("updating scheduling eligibility", err)
	}
	if enable {
		c.Ui.Output(fmt.Sprintf("Node %q scheduling eligibility set: eligible for scheduling", node.ID))
	} else {
		c.Ui.Output(fmt.Sprintf("Node %q scheduling eligibility set: ineligible for scheduling", node.ID))
	}
	return 0
}

// drainProgress is what is left on a node for its drain: the allocations
// that still run there or still hold claims there, and those claims.
type drainProgress struct {
	allocs []*structs.Allocation
	// claims are, by allocation ID, the volumes it holds a claim on (live
	// or being released) on the node, with the claim's state.
	claims map[string][]string
}

// fetchDrainProgress reads what is left on the node.
func fetchDrainProgress(client *api.Client, nodeID string, q *api.QueryOptions) (*drainProgress, error) {
	all := *q
	all.Namespace = "*"
	allocs, _, err := client.Allocations().List(&all)
	if err != nil {
		return nil, err
	}
	vq := all
	vq.NodeID = nodeID
	stubs, _, err := client.Volumes().List(&vq)
	if err != nil {
		return nil, err
	}
	p := &drainProgress{claims: map[string][]string{}}
	for _, s := range stubs {
		v, _, err := client.Volumes().Info(s.ID, &api.QueryOptions{Namespace: s.Namespace, Context: q.Context})
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, m := range []map[string]*structs.CSIVolumeClaim{v.PastClaims, v.WriteClaims, v.ReadClaims} {
			for id, cl := range m {
				if cl == nil || cl.NodeID != nodeID || seen[id] {
					continue
				}
				seen[id] = true
				p.claims[id] = append(p.claims[id], fmt.Sprintf("%s (%s)", v.ID, cl.State))
			}
		}
	}
	for _, a := range allocs {
		if a.NodeID == nodeID && (!a.ClientTerminal() || len(p.claims[a.ID]) > 0) {
			p.allocs = append(p.allocs, a)
		}
	}
	slices.SortFunc(p.allocs, func(a, b *structs.Allocation) int { return strings.Compare(a.Name+a.ID, b.Name+b.ID) })
	for id := range p.claims {
		slices.Sort(p.claims[id])
	}
	return p, nil
}

// rows are the progress as table rows.
func (p *drainProgress) rows() [][]string {
	var rows [][]string
	for _, a := range p.allocs {
		claims := strings.Join(p.claims[a.ID], ", ")
		if claims == "" {
			claims = "none"
		}
		rows = append(rows, []string{shortID(a.ID, false), a.JobID, a.Name, a.DesiredStatus, a.ClientStatus, claims})
	}
	return rows
}

// lines are, for the monitor, a line per allocation saying where it stands.
func (p *drainProgress) lines() map[string]string {
	out := map[string]string{}
	for _, a := range p.allocs {
		text := fmt.Sprintf("Allocation %q (%s) %s/%s", shortID(a.ID, false), a.Name, a.DesiredStatus, a.ClientStatus)
		if c := p.claims[a.ID]; len(c) > 0 {
			text += ", claims on the node: " + strings.Join(c, ", ")
		}
		out[a.ID] = text
	}
	return out
}

// monitorDrain follows a node's drain until it is done, printing what
// changes on the node, and returns 0 when it completed, 1 otherwise.
func (m *Meta) monitorDrain(ctx context.Context, client *api.Client, nodeID string, p *progress) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := make(chan error, 1)
	notify := func(err error) {
		select {
		case wake <- err:
		default:
		}
	}
	// Three blocking queries, each woken by its own table: the node, the
	// allocations, the node's volumes (claims being released).
	watch := func(read func(q *api.QueryOptions) (*api.QueryMeta, error)) {
		var idx uint64
		for ctx.Err() == nil {
			qm, err := read(&api.QueryOptions{WaitIndex: idx, WaitTime: monitorWait, Context: ctx})
			if ctx.Err() != nil {
				return
			}
			notify(err)
			if err != nil {
				return
			}
			idx = max(qm.LastIndex, idx)
		}
	}
	go watch(func(q *api.QueryOptions) (*api.QueryMeta, error) {
		_, qm, err := client.Nodes().Info(nodeID, q)
		return qm, err
	})
	go watch(func(q *api.QueryOptions) (*api.QueryMeta, error) {
		q.Namespace = "*"
		_, qm, err := client.Allocations().List(q)
		return qm, err
	})
	go watch(func(q *api.QueryOptions) (*api.QueryMeta, error) {
		q.Namespace, q.NodeID = "*", nodeID
		_, qm, err := client.Volumes().List(q)
		return qm, err
	})
	seen := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return 1
		case err := <-wake:
			if err != nil {
				m.Ui.Error(fmt.Sprintf("Error monitoring node %q: %s", nodeID, err))
				return 1
			}
		}
		node, _, err := client.Nodes().Info(nodeID, &api.QueryOptions{Context: ctx})
		if err != nil {
			m.Ui.Error(fmt.Sprintf("Error monitoring node %q: %s", nodeID, err))
			return 1
		}
		prog, err := fetchDrainProgress(client, nodeID, &api.QueryOptions{Context: ctx})
		if err != nil {
			m.Ui.Error(fmt.Sprintf("Error monitoring node %q: %s", nodeID, err))
			return 1
		}
		now := prog.lines()
		for _, id := range slices.Sorted(maps.Keys(seen)) {
			if _, ok := now[id]; !ok {
				p.line(styleGreen, fmt.Sprintf("Allocation %q stopped and released its claims on the node", shortID(id, false)))
				delete(seen, id)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(now)) {
			if seen[id] != now[id] {
				p.line("", now[id])
				seen[id] = now[id]
			}
		}
		if node.DrainStrategy == nil {
			switch {
			case node.LastDrain != nil && node.LastDrain.Status == structs.DrainStatusComplete:
				p.m.Ui.Output(p.paint.paint(styleBold, "==> "+p.stamp()+": ") +
					p.paint.paint(styleGreen, fmt.Sprintf("Drain complete for node %q", nodeID)))
				return 0
			default:
				p.m.Ui.Output(p.paint.paint(styleBold, "==> "+p.stamp()+": ") +
					p.paint.paint(styleYellow, fmt.Sprintf("Drain for node %q canceled", nodeID)))
				return 1
			}
		}
	}
}
