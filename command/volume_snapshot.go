package command

import (
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

func init() {
	Register("volume snapshot", func(ui cli.Ui) cli.CommandFactory {
		return parent("volume snapshot", "Create, list and delete volume snapshots",
			"Snapshots are made, listed and deleted by a CSI plugin's controller; volplane\n  keeps no record of them.")
	})
	Register("volume snapshot create", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &VolumeSnapshotCreateCommand{Meta: Meta{Ui: ui}}, nil }
	})
	Register("volume snapshot list", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &VolumeSnapshotListCommand{Meta: Meta{Ui: ui}}, nil }
	})
	Register("volume snapshot delete", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &VolumeSnapshotDeleteCommand{Meta: Meta{Ui: ui}}, nil }
	})
}

// keyValues collects repeated -flag key=value values.
type keyValues map[string]string

func (k keyValues) String() string { return fmt.Sprintf("%d values", len(k)) }

func (k keyValues) Set(s string) error {
	key, value, ok := strings.Cut(s, "=")
	if !ok || key == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	k[key] = value
	return nil
}

const secretOptionHelp = `
  -secret=<key=value>
    A secret for the plugin's call; repeatable. Secrets are used for the
    call only: never stored or shown.`

// VolumeSnapshotCreateCommand snapshots a volume.
type VolumeSnapshotCreateCommand struct{ Meta }

func (c *VolumeSnapshotCreateCommand) Synopsis() string { return "Snapshot a volume" }

func (c *VolumeSnapshotCreateCommand) Help() string {
	return helpText(`
Usage: volplane volume snapshot create [options] <volume id> [snapshot name]

  Snapshots a registered CSI volume through a controller of its plugin,
  which must advertise CREATE_DELETE_SNAPSHOT. The plugin keys the snapshot
  on its name: creating it again with the same name gives the same
  snapshot. Without a name, the volume's ID and the time make one.
  The snapshot's ID can then be a new volume's snapshot_id.
`, `
Snapshot Create Options:

  -parameter=<key=value>
    A parameter for the plugin; repeatable.
`+secretOptionHelp+`

  -verbose
    Show full volume IDs.`, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeSnapshotCreateCommand) Run(args []string) int {
	params, secrets := keyValues{}, keyValues{}
	var verbose bool
	f := c.FlagSet("volume snapshot create", FlagSetClient|FlagSetNamespace)
	f.Var(params, "parameter", "")
	f.Var(secrets, "secret", "")
	f.BoolVar(&verbose, "verbose", false, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() < 1 || f.NArg() > 2 {
		return c.UsageError(c, "This command takes one or two arguments: <volume id> [snapshot name]")
	}
	snap := &structs.CSISnapshot{SourceVolumeID: f.Arg(0), Name: f.Arg(1)}
	if len(params) > 0 {
		snap.Parameters = params
	}
	if len(secrets) > 0 {
		snap.Secrets = structs.CSISecrets(secrets)
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	snaps, _, err := client.Volumes().CreateSnapshot([]*structs.CSISnapshot{snap}, c.WriteOptions())
	if err != nil {
		return c.Fail("snapshotting volume", err)
	}
	c.Ui.Output(formatSnapshots(snaps, verbose))
	return 0
}

// VolumeSnapshotListCommand lists a plugin's snapshots.
type VolumeSnapshotListCommand struct{ Meta }

func (c *VolumeSnapshotListCommand) Synopsis() string { return "List a plugin's volume snapshots" }

func (c *VolumeSnapshotListCommand) Help() string {
	return helpText(`
Usage: volplane volume snapshot list [options]

  Lists the snapshots a CSI plugin's storage provider holds, as a controller
  of the plugin pages them (it must advertise LIST_SNAPSHOTS), with the
  volplane volume each was taken of, when it is registered.
`, `
Snapshot List Options:

  -plugin=<id>
    The plugin, by ID or a unique prefix of one. Without it, the only
    plugin there is.

  -per-page=<n>
    How many snapshots to ask for at a time (default 30).

  -page-token=<token>
    Where to start: the token printed under the previous page.
`+secretOptionHelp+`

  -json
    Print the page as JSON.`+templateOptionHelp+`

  -verbose
    Show full volume IDs.`, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeSnapshotListCommand) Run(args []string) int {
	var (
		pluginID, pageToken string
		perPage             int
		verbose             bool
	)
	secrets := keyValues{}
	f := c.FlagSet("volume snapshot list", FlagSetClient|FlagSetNamespace)
	f.StringVar(&pluginID, "plugin", "", "")
	f.IntVar(&perPage, "per-page", 30, "")
	f.StringVar(&pageToken, "page-token", "", "")
	f.Var(secrets, "secret", "")
	format := c.FormatFlags(f)
	f.BoolVar(&verbose, "verbose", false, "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	switch {
	case f.NArg() > 0:
		return c.UsageError(c, "This command takes no arguments")
	case perPage < 0 || perPage > structs.MaxPerPage:
		return c.UsageError(c, "-per-page must be from 0 to %d", structs.MaxPerPage)
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	plugin, err := onePlugin(client, pluginID)
	if err != nil {
		return c.Fail("querying plugins", err)
	}
	q := c.QueryOptions()
	q.PerPage, q.NextToken = int32(perPage), pageToken
	snaps, qm, err := client.Volumes().ListSnapshots(plugin, secrets, q)
	if err != nil {
		return c.Fail(fmt.Sprintf("listing the snapshots of plugin %q", plugin), err)
	}
	if format.set() {
		return c.Output(format, map[string]any{"Snapshots": orNone(snaps), "NextToken": qm.NextToken})
	}
	if len(snaps) == 0 {
		c.Ui.Output("No snapshots")
	} else {
		c.Ui.Output(formatSnapshots(snaps, verbose))
	}
	if qm.NextToken != "" {
		c.Ui.Output(fmt.Sprintf("\nResults have been paginated. To get the next page run:\n%s -page-token %s",
			argsWithout(os.Args, "-page-token"), qm.NextToken))
	}
	return 0
}

// VolumeSnapshotDeleteCommand deletes a snapshot.
type VolumeSnapshotDeleteCommand struct{ Meta }

func (c *VolumeSnapshotDeleteCommand) Synopsis() string { return "Delete a volume snapshot" }

func (c *VolumeSnapshotDeleteCommand) Help() string {
	return helpText(`
Usage: volplane volume snapshot delete [options] <plugin id> <snapshot id>

  Deletes a snapshot through a controller of its plugin, which must
  advertise CREATE_DELETE_SNAPSHOT. A snapshot already gone is deleted.
`, `
Snapshot Delete Options:
`+secretOptionHelp, FlagSetClient|FlagSetNamespace)
}

func (c *VolumeSnapshotDeleteCommand) Run(args []string) int {
	secrets := keyValues{}
	f := c.FlagSet("volume snapshot delete", FlagSetClient|FlagSetNamespace)
	f.Var(secrets, "secret", "")
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() != 2 {
		return c.UsageError(c, "This command takes two arguments: <plugin id> <snapshot id>")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	if _, err := client.Volumes().DeleteSnapshot(f.Arg(0), f.Arg(1), secrets, c.WriteOptions()); err != nil {
		return c.Fail("deleting snapshot", err)
	}
	c.Ui.Output(fmt.Sprintf("Deleted snapshot %q of plugin %q", f.Arg(1), f.Arg(0)))
	return 0
}

// formatSnapshots is the table of snapshots: the snapshot, the volplane
// volume it was taken of (and the provider's ID of that volume), its size,
// when it was taken and whether it is ready.
func formatSnapshots(snaps []*structs.CSISnapshot, verbose bool) string {
	rows := make([][]string, 0, len(snaps))
	for _, s := range snaps {
		created := ""
		if s.CreateTime > 0 {
			created = unixNano(s.CreateTime * 1e9)
		}
		rows = append(rows, []string{s.ID, shortID(s.SourceVolumeID, verbose), s.ExternalSourceVolumeID,
			bytesOf(s.SizeBytes), created, yesNo(s.IsReady)})
	}
	return table([]string{"Snapshot ID", "Volume ID", "External Volume ID", "Size", "Create Time", "Ready"}, rows)
}

// onePlugin resolves -plugin: an exact ID, a unique prefix, or, when it is
// empty, the only plugin there is.
func onePlugin(client *api.Client, prefix string) (string, error) {
	stubs, _, err := client.Plugins().List(nil)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, p := range stubs {
		if p.ID == prefix && prefix != "" {
			return p.ID, nil
		}
		if strings.HasPrefix(p.ID, prefix) {
			ids = append(ids, p.ID)
		}
	}
	switch {
	case len(ids) == 1:
		return ids[0], nil
	case len(ids) == 0 && prefix == "":
		return "", fmt.Errorf("no CSI plugins")
	case len(ids) == 0:
		return "", fmt.Errorf("no CSI plugin with ID or prefix %q", prefix)
	case prefix == "":
		return "", fmt.Errorf("several CSI plugins (%s): name one with -plugin", strings.Join(ids, ", "))
	}
	return "", fmt.Errorf("prefix %q matches several CSI plugins (%s)", prefix, strings.Join(ids, ", "))
}

// argsWithout is the command line with a flag (and its value) left out,
// to print the command that fetches the next page.
func argsWithout(args []string, name string) string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == name || a == "-"+name:
			i++ // its value
			continue
		case strings.HasPrefix(a, name+"=") || strings.HasPrefix(a, "-"+name+"="):
			continue
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

func orNone[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
