package command

import (
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/hashicorp/cli"
	"github.com/hashicorp/go-hclog"

	"github.com/volplane/volplane/plugins/csi/devplugin"
)

func init() {
	Register("csi-dev-plugin", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &CSIDevPluginCommand{UI: ui}, nil }
	})
}

// CSIDevPluginCommand runs volplane's development CSI plugin on a unix
// socket until it is interrupted.
type CSIDevPluginCommand struct {
	UI cli.Ui
	// ShutdownCh, when set, replaces the process signals (for tests).
	ShutdownCh <-chan struct{}
}

func (c *CSIDevPluginCommand) Synopsis() string { return "Run the development CSI plugin" }

func (c *CSIDevPluginCommand) Help() string {
	return strings.TrimSpace(`
Usage: volplane csi-dev-plugin [-endpoint unix:///path.sock] -state-dir DIR [options]

  Runs volplane's development CSI plugin (Identity, Controller and Node
  services, plugin name dev.csi.volplane.io) until it is interrupted (SIGINT
  or SIGTERM). Its volumes are directories under the state directory;
  several instances started with the same state directory share them, as the
  nodes of one storage system, each under its own node ID.

  -endpoint=ADDR        The unix socket to serve on (unix:///path or a path);
                        default $CSI_ENDPOINT, which the client sets for a
                        task with a csi_plugin block.
  -state-dir=DIR        Where volumes, state, the call log and faults.json live.
  -node-id=ID           This node's ID (default: $VOLPLANE_NODE_ID, which the
                        client sets for its tasks, else the host name).
  -max-volumes=N        Volumes that may be published to this node at once
                        (default 0: no limit).
  -topology=KEY=VALUE   A segment of this node's topology; repeatable.
  -create-on-demand     Create unknown volumes when they are first
                        controller-published, so volumes registered by hand
                        work without CreateVolume.
  -disable-capability=NAME
                        Run without a capability, to test a CO against
                        plugins that lack it; repeatable. NAME is
                        controller:<CAPABILITY> or node:<CAPABILITY> by its
                        CSI name (controller:CREATE_DELETE_SNAPSHOT,
                        controller:LIST_VOLUMES, controller:EXPAND_VOLUME,
                        node:STAGE_UNSTAGE_VOLUME, node:EXPAND_VOLUME, ...),
                        or plugin:ONLINE to expand volumes offline only, or
                        plugin:CONTROLLER_SERVICE for a node-only plugin
                        (no controller service, no controller capability).
  -log-level=LEVEL      trace, debug, info, warn or error (default info).
`)
}

// listFlags collects a repeated flag's values.
type listFlags []string

func (l *listFlags) String() string     { return strings.Join(*l, ",") }
func (l *listFlags) Set(s string) error { *l = append(*l, s); return nil }

// topologyFlags collects repeated -topology key=value flags.
type topologyFlags map[string]string

func (t topologyFlags) String() string {
	var parts []string
	for k, v := range t {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (t topologyFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	t[k] = v
	return nil
}

func (c *CSIDevPluginCommand) Run(args []string) int {
	fs := flag.NewFlagSet("csi-dev-plugin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var (
		cfg      devplugin.Config
		logLevel string
	)
	topology := topologyFlags{}
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "")
	fs.StringVar(&cfg.NodeID, "node-id", "", "")
	fs.Int64Var(&cfg.MaxVolumesPerNode, "max-volumes", 0, "")
	fs.Var(topology, "topology", "")
	fs.BoolVar(&cfg.CreateOnDemand, "create-on-demand", false, "")
	fs.Var((*listFlags)(&cfg.Disable), "disable-capability", "")
	fs.StringVar(&logLevel, "log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		c.UI.Error(fmt.Sprintf("Error: %v\n\n%s", err, c.Help()))
		return 1
	}
	switch {
	case fs.NArg() > 0:
		c.UI.Error(fmt.Sprintf("Error: csi-dev-plugin takes no arguments, got %q\n\n%s", fs.Args(), c.Help()))
		return 1
	}
	// Run as a plugin task (a csi_plugin block), the client names the
	// socket in CSI_ENDPOINT and the node in VOLPLANE_NODE_ID; flags win.
	if cfg.Endpoint == "" {
		cfg.Endpoint = os.Getenv("CSI_ENDPOINT")
	}
	if cfg.NodeID == "" {
		cfg.NodeID = os.Getenv("VOLPLANE_NODE_ID")
	}
	if cfg.Endpoint == "" || cfg.StateDir == "" {
		c.UI.Error("Error: -endpoint (or CSI_ENDPOINT) and -state-dir are required\n\n" + c.Help())
		return 1
	}
	level := hclog.LevelFromString(logLevel)
	if level == hclog.NoLevel {
		c.UI.Error(fmt.Sprintf("Error: -log-level: unknown level %q", logLevel))
		return 1
	}
	cfg.Topology = topology
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "csi-dev-plugin", Level: level, Output: os.Stderr})

	p, err := devplugin.New(cfg)
	if err != nil {
		c.UI.Error("Error: " + err.Error())
		return 1
	}
	if err := p.Start(); err != nil {
		c.UI.Error("Error: " + err.Error())
		return 1
	}
	c.UI.Output(fmt.Sprintf("CSI dev plugin %s serving on %s as node %q, state in %s",
		devplugin.PluginName, p.Endpoint(), p.NodeID(), p.StateDir()))
	waitForShutdown(c.ShutdownCh, nil, func() {})
	c.UI.Output("Shutting down")
	p.Stop()
	return 0
}
