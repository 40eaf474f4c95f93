package command

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// VolumeInitCommand writes an example volume specification, as `nomad
// volume init` does.
type VolumeInitCommand struct{ Meta }

// The files volume init writes when it is given no file name.
const (
	defaultVolumeInitHCL  = "volume.hcl"
	defaultVolumeInitJSON = "volume.json"
)

func (c *VolumeInitCommand) Synopsis() string { return "Create an example volume specification file" }

func (c *VolumeInitCommand) Help() string {
	return helpText(`
Usage: volplane volume init [options] [filename]

  Writes an example CSI volume specification to filename (volume.hcl, or
  volume.json with -json), for "volume create" or "volume register". The
  example names the development plugin of "volplane agent -dev", so that

    volplane volume init && volplane volume create volume.hcl

  works against a dev agent as it is. An existing file is never
  overwritten.
`, `
Init Options:

  -json
    Write the specification in JSON (structs.CSIVolume's field names, as
    "volume register" reads it) instead of HCL.
`+typeOptionHelp, 0)
}

func (c *VolumeInitCommand) Run(args []string) int {
	var asJSON bool
	f := c.FlagSet("volume init", 0)
	f.BoolVar(&asJSON, "json", false, "")
	c.TypeFlag(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	if f.NArg() > 1 {
		return c.UsageError(c, "This command takes no arguments or one: <filename>")
	}
	name, content := defaultVolumeInitHCL, exampleVolumeHCL
	if asJSON {
		name, content = defaultVolumeInitJSON, exampleVolumeJSON
	}
	if f.NArg() == 1 {
		name = f.Arg(0)
	}
	// O_EXCL: the check that the file does not exist and its creation are
	// one step, so a file that appears meanwhile is not overwritten either.
	file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		c.Ui.Error(fmt.Sprintf("Volume specification %q already exists", name))
		return 1
	}
	if err != nil {
		return c.Fail(fmt.Sprintf("writing %q", name), err)
	}
	_, err = file.WriteString(content)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.Fail(fmt.Sprintf("writing %q", name), err)
	}
	c.Ui.Output(fmt.Sprintf("Example volume specification written to %s", name))
	return 0
}

// exampleVolumeHCL is what volume init writes: a volume of the dev agent's
// plugin, every common field shown and explained.
const exampleVolumeHCL = `# A CSI volume specification, for
#
#   volplane volume create volume.hcl     # create it in the plugin, then register it
#   volplane volume register volume.hcl   # register a volume the provider already has
#
# As written it uses the development plugin "dev" that "volplane agent -dev"
# runs. Nomad's volume specification format: "nomad volume create" reads it
# too.

# The volume's ID in volplane, unique in its namespace; name is the name
# the storage provider gets on create.
id        = "example"
name      = "example"
type      = "csi"
namespace = "default"
plugin_id = "dev"

# The size asked for on create; a larger capacity_min on an existing volume
# expands it.
capacity_min = "1GiB"
capacity_max = "10GiB"

# How allocations may use it; create asks the plugin for every capability
# listed, and a job's volume block must ask for one of them.
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "single-node-reader-only"
  attachment_mode = "file-system"
}

# Options for mounting it as a file system (mount flags are never shown by
# the API or the CLI).
mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

# Passed to the plugin with every call; never shown by the API or the CLI.
# secrets {
#   password = "..."
# }

# Passed to the plugin's CreateVolume.
parameters {
  replicas = "1"
}
`

// exampleVolumeJSON is what volume init -json writes: the same volume in
// the JSON that "volume register" reads and PUT /v1/volume/csi/:id takes
// inside {"Volumes": [...]}.
const exampleVolumeJSON = `{
  "ID": "example",
  "Name": "example",
  "Namespace": "default",
  "PluginID": "dev",
  "RequestedCapacityMin": 1073741824,
  "RequestedCapacityMax": 10737418240,
  "RequestedCapabilities": [
    {"AccessMode": "single-node-writer", "AttachmentMode": "file-system"},
    {"AccessMode": "single-node-reader-only", "AttachmentMode": "file-system"}
  ],
  "MountOptions": {"FSType": "ext4", "MountFlags": ["noatime"]},
  "Parameters": {"replicas": "1"}
}
`
