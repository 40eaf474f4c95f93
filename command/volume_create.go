package command

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/spec"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// VolumeCreateCommand creates a volume in its plugin and registers it.
type VolumeCreateCommand struct {
	Meta
	// Stdin is read when the file is "-".
	Stdin io.Reader
}

func (c *VolumeCreateCommand) Synopsis() string {
	return "Create a volume in its plugin and register it"
}

func (c *VolumeCreateCommand) Help() string {
	return helpText(`
Usage: volplane volume create [options] <file>

  Creates a CSI volume in the storage provider through one of the plugin's
  controllers, then registers it, from a specification file in HCL (Nomad's
  volume specification format) or JSON. The provider's volume ID, capacity,
  context and topology are stored with the volume. Use "-" as the file to
  read the specification from standard input.
`, "", FlagSetClient|FlagSetNamespace)
}

func (c *VolumeCreateCommand) Run(args []string) int {
	f := c.FlagSet("volume create", FlagSetClient|FlagSetNamespace)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <file>")
	}
	src, name, err := readSpec(c.Stdin, f.Arg(0))
	if err != nil {
		return c.Fail("reading volume specification", err)
	}
	vol, err := spec.ParseVolume(name, src)
	if err != nil {
		return c.Fail("parsing volume specification", err)
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	created, warnings, _, err := client.Volumes().Create([]*structs.CSIVolume{vol}, c.WriteOptions())
	if err != nil {
		return c.Fail("creating volume", err)
	}
	for _, w := range warnings {
		c.Ui.Warn("Warning: " + w)
	}
	for _, v := range created {
		c.Ui.Output(fmt.Sprintf("Created volume %q with external ID %q", v.ID, v.ExternalID))
	}
	return 0
}

// VolumeDeleteCommand deletes a volume in its plugin and deregisters it.
type VolumeDeleteCommand struct{ Meta }

func (c *VolumeDeleteCommand) Synopsis() string {
	return "Delete a volume in its plugin and deregister it"
}

func (c *VolumeDeleteCommand) Help() string {
	return helpText(`
Usage: volplane volume delete [options] <id>

  Deletes a CSI volume in the storage provider through one of the plugin's
  controllers, then deregisters it. A claimed volume is refused before
  anything is deleted. A volume the provider no longer has is deregistered.
`, `
Delete Options:

  -secret key=value
    A secret for the plugin's delete call, merged over the volume's own.
    Repeatable.
`+typeOptionHelp, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeDeleteCommand) Run(args []string) int {
	var secrets stringList
	f := c.FlagSet("volume delete", FlagSetClient|FlagSetNamespace)
	f.Var(&secrets, "secret", "")
	c.TypeFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <id>")
	}
	sec := map[string]string{}
	for _, kv := range secrets {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			// The value is a secret: do not echo it back.
			return c.UsageError(c, "-secret takes key=value")
		}
		sec[k] = v
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	id := f.Arg(0)
	if _, err := client.Volumes().Delete(id, sec, c.WriteOptions()); err != nil {
		return c.Fail("deleting volume", err)
	}
	c.Ui.Output(fmt.Sprintf("Successfully deleted volume %q", id))
	return 0
}

// VolumeDetachCommand releases a volume's claims on a node now.
type VolumeDetachCommand struct{ Meta }

func (c *VolumeDetachCommand) Synopsis() string { return "Release a volume's claims on a node now" }

func (c *VolumeDetachCommand) Help() string {
	return helpText(`
Usage: volplane volume detach [options] <volume> <node>

  Runs the release of the volume's claims on the node now, ignoring any
  backoff: node unpublish (skipped when the node is down or gone), then
  controller unpublish, then the claim is freed. Prints each step as it
  happens. A claim whose allocation still runs on a ready node is refused.

  The volume is its ID or a unique prefix of one; the node is its ID, a
  unique prefix of one (as "node status" prints it) or its name.
`, `
Detach Options:
`+noColorHelp, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeDetachCommand) Run(args []string) int {
	f := c.FlagSet("volume detach", FlagSetClient|FlagSetNamespace)
	color := c.colorFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 2 {
		return c.UsageError(c, "This command takes two arguments: <volume> <node>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	volID, nodeID := f.Arg(0), f.Arg(1)
	// Found as the status commands find them. An ID nothing matches goes
	// to the server as typed: a node gone from the state may still have
	// claims to release, and the server says what it does not know.
	vol, err := (&VolumeStatusCommand{Meta: c.Meta}).lookupVolume(client, volID)
	switch {
	case err == nil:
		volID = vol.ID
	case !api.IsNotFound(err):
		return c.Fail("querying volume", err)
	}
	node, err := lookupNode(client, nodeID)
	switch {
	case err == nil:
		nodeID = node.ID
	case !api.IsNotFound(err):
		return c.Fail("querying node", err)
	}
	p := &progress{m: &c.Meta, paint: color(), now: time.Now}
	p.headline(fmt.Sprintf("Detaching volume %q from node %q", volID, shortID(nodeID, false)))
	steps, shown, err := c.detachFollowing(client, volID, nodeID, p)
	if shown == 0 {
		// Without the event stream, the steps as the server reports them.
		for _, s := range steps {
			p.line("", s)
		}
	}
	if err != nil {
		return c.Fail("detaching volume", err)
	}
	c.Ui.Output(p.paint.paint(styleBold, "==> "+p.stamp()+": ") + p.paint.paint(styleGreen, fmt.Sprintf("Volume %q detached from node %q", volID, nodeID)))
	return 0
}

// detachSettle bounds how long a detach that returned waits for the events
// of its last steps, which the agent answering may apply a moment after
// the leader that ran the detach.
const detachSettle = 5 * time.Second

// detachFollowing runs the detach while printing, from the event stream,
// each step of the release of the volume's claims on the node as it
// happens. It returns the server's list of steps and how many were shown
// live.
func (c *VolumeDetachCommand) detachFollowing(client *api.Client, volID, nodeID string, p *progress) ([]string, int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var events <-chan *claimEvent
	if stream, err := openClaimEvents(ctx, client, 0); err == nil {
		defer stream.Close()
		events, _ = nextClaimEvents(ctx, stream)
	}
	type result struct {
		steps []string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		steps, err := client.Volumes().Detach(volID, nodeID, c.WriteOptions())
		done <- result{steps, err}
	}()
	shown := 0
	// open holds the claims seen in events and not freed yet.
	open := map[string]bool{}
	var res *result
	var settle <-chan time.Time
	for {
		// Once the detach returned: done when its claims were seen freed.
		// Until the first event, the stream may just lag the answer.
		if res != nil && (res.err != nil || events == nil || (shown > 0 && len(open) == 0)) {
			return res.steps, shown, res.err
		}
		select {
		case r := <-done:
			res = &r
			t := time.NewTimer(detachSettle)
			defer t.Stop()
			settle = t.C
		case <-settle:
			return res.steps, shown, res.err
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if ev.VolumeID != volID || ev.NodeID != nodeID || ev.Type == state.EventClaimTaken {
				continue
			}
			ch := claimEventLine(ev)
			p.line(ch.style, ch.text)
			shown++
			if ev.Type == state.EventClaimFreed {
				delete(open, ev.AllocationID)
			} else {
				open[ev.AllocationID] = true
			}
		}
	}
}
