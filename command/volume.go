package command

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/spec"
	"github.com/volplane/volplane/structs"
)

// maxSpecSize bounds a specification read from a file or stdin; a volume
// spec is a few hundred bytes, so anything near this is a mistake.
const maxSpecSize = 4 << 20

// VolumeRegisterCommand registers (or updates) a volume from a
// specification file.
type VolumeRegisterCommand struct {
	Meta
	// Stdin is read when the file is "-".
	Stdin io.Reader
}

func (c *VolumeRegisterCommand) Synopsis() string { return "Register or update a volume" }

func (c *VolumeRegisterCommand) Help() string {
	return helpText(`
Usage: volplane volume register [options] <file>

  Registers a CSI volume that already exists in the storage provider, or
  updates a registered volume, from a specification file in HCL (Nomad's
  volume specification format) or JSON. Use "-" as the file to read the
  specification from standard input.

  See examples/volume.hcl for a specification with every common field.
`, "", FlagSetClient|FlagSetNamespace)
}

func (c *VolumeRegisterCommand) Run(args []string) int {
	f := c.FlagSet("volume register", FlagSetClient|FlagSetNamespace)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <file>")
	}
	path := f.Arg(0)

	src, name, err := readSpec(c.Stdin, path)
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
	warnings, _, err := client.Volumes().Register([]*structs.CSIVolume{vol}, c.WriteOptions())
	if err != nil {
		return c.Fail("registering volume", err)
	}
	for _, w := range warnings {
		c.Ui.Warn("Warning: " + w)
	}
	c.Ui.Output(fmt.Sprintf("Volume %q registered", vol.ID))
	return 0
}

// readSpec reads a specification file of at most maxSpecSize bytes, or
// stdin (the process's when nil) for "-", and returns it with the name to
// use in messages.
func readSpec(stdin io.Reader, path string) ([]byte, string, error) {
	var r io.Reader
	name := path
	if path == "-" {
		r, name = stdin, "<stdin>"
		if r == nil {
			r = os.Stdin
		}
	} else {
		file, err := os.Open(path)
		if err != nil {
			return nil, "", err
		}
		defer file.Close()
		r = file
	}
	src, err := io.ReadAll(io.LimitReader(r, maxSpecSize+1))
	if err != nil {
		return nil, "", err
	}
	if len(src) > maxSpecSize {
		return nil, "", fmt.Errorf("%s is larger than %d bytes", name, maxSpecSize)
	}
	return src, name, nil
}

// VolumeDeregisterCommand removes a volume from the cluster's state.
type VolumeDeregisterCommand struct{ Meta }

func (c *VolumeDeregisterCommand) Synopsis() string { return "Deregister a volume" }

func (c *VolumeDeregisterCommand) Help() string {
	return helpText(`
Usage: volplane volume deregister [options] <id>

  Removes a CSI volume from volplane. The volume itself is left in the
  storage provider. A volume that allocations still claim is refused.
`, `
Deregister Options:

  -force
    Deregister the volume even though it has claims, when every claiming
    allocation is terminal or gone. Only volplane's state changes: the
    plugin is not asked to detach anything. Each step is shown: the claims
    found and their allocations' status, then the removal.`+noColorHelp, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeDeregisterCommand) Run(args []string) int {
	var force bool
	f := c.FlagSet("volume deregister", FlagSetClient|FlagSetNamespace)
	f.BoolVar(&force, "force", false, "")
	color := c.colorFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 1 {
		return c.UsageError(c, "This command takes one argument: <id>")
	}
	id := f.Arg(0)
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	if force {
		p := &progress{m: &c.Meta, paint: color(), now: time.Now}
		p.headline(fmt.Sprintf("Deregistering volume %q with -force", id))
		if err := c.showForcedClaims(client, id, p); err != nil {
			return c.Fail("reading the volume's claims", err)
		}
		p.line("", "Removing the volume and its claims from the servers' state; no node or controller is asked to unpublish it")
	}
	warnings, _, err := client.Volumes().Deregister(id, force, c.WriteOptions())
	if err != nil {
		return c.Fail("deregistering volume", err)
	}
	for _, w := range warnings {
		c.Ui.Warn("Warning: " + w)
	}
	c.Ui.Output(fmt.Sprintf("Successfully deregistered volume %q", id))
	return 0
}

// showForcedClaims prints, before a forced deregister, every claim the
// volume has and how its allocation stands: the claims the deregister
// drops without unpublishing anything.
func (c *VolumeDeregisterCommand) showForcedClaims(client *api.Client, id string, p *progress) error {
	vol, _, err := client.Volumes().Info(id, c.QueryOptions())
	if api.IsNotFound(err) {
		// The deregister says so.
		return nil
	}
	if err != nil {
		return err
	}
	claims := map[string]*structs.CSIVolumeClaim{}
	for _, m := range []map[string]*structs.CSIVolumeClaim{vol.ReadClaims, vol.WriteClaims, vol.PastClaims} {
		maps.Copy(claims, m)
	}
	if len(claims) == 0 {
		p.line("", "The volume has no claims")
		return nil
	}
	p.line("", fmt.Sprintf("The volume has %s", plural(len(claims), "claim")))
	for _, allocID := range slices.Sorted(maps.Keys(claims)) {
		cl := claims[allocID]
		what := fmt.Sprintf("Claim of allocation %q on node %q (%s, %s)", shortID(allocID, false),
			shortID(cl.NodeID, false), cl.Mode, cl.State)
		a, _, err := client.Allocations().Info(allocID, &api.QueryOptions{Namespace: vol.Namespace})
		switch {
		case api.IsNotFound(err):
			p.line(styleYellow, what+": the allocation is gone")
		case err != nil:
			return err
		case a.Terminal():
			p.line(styleYellow, fmt.Sprintf("%s: the allocation is %s (desired %s)", what, a.ClientStatus, a.DesiredStatus))
		default:
			p.line(styleRed, fmt.Sprintf("%s: the allocation still runs (%s)", what, a.ClientStatus))
		}
	}
	return nil
}
