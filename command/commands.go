// Package command is volplane's command line: the CLI commands that talk to
// an agent's HTTP API, and (added by another file through Register) the
// agent command itself.
package command

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/cli"
)

// Version is the version of volplane; release builds set it (and GitCommit)
// with -ldflags "-X github.com/volplane/volplane/command.Version=...".
var (
	Version   = "0.1.0-dev"
	GitCommit = ""
)

// VersionString is what `volplane version` prints.
func VersionString() string {
	s := "volplane v" + Version
	if GitCommit != "" {
		s += " (" + GitCommit + ")"
	}
	return s
}

var (
	registryMu sync.Mutex
	registry   = map[string]func(ui cli.Ui) cli.CommandFactory{}
)

// Register adds a command defined elsewhere, typically from an init function
// of another file of this package:
//
//	func init() {
//		Register("agent", func(ui cli.Ui) cli.CommandFactory {
//			return func() (cli.Command, error) { return &AgentCommand{Ui: ui}, nil }
//		})
//	}
//
// The name may contain spaces for a subcommand ("operator snapshot"). It
// panics when the name is already taken, built in or registered, because two
// commands silently shadowing each other is a bug to catch at start-up.
func Register(name string, f func(ui cli.Ui) cli.CommandFactory) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("command %q registered twice", name))
	}
	if _, builtin := builtinCommands(nil, nil)[name]; builtin {
		panic(fmt.Sprintf("command %q is built in and cannot be registered", name))
	}
	registry[name] = f
}

// Commands returns every command by name (subcommands as "volume status"),
// built in and registered, writing to ui and reading standard input from the
// process's.
func Commands(ui cli.Ui) map[string]cli.CommandFactory {
	return commandsWith(ui, os.Stdin)
}

func commandsWith(ui cli.Ui, stdin io.Reader) map[string]cli.CommandFactory {
	all := builtinCommands(ui, stdin)
	registryMu.Lock()
	defer registryMu.Unlock()
	for name, f := range registry {
		all[name] = f(ui)
	}
	return all
}

// builtinCommands is the one table of the built-in commands. Factories are
// lazy, so it is also called with a nil ui just to learn the names.
func builtinCommands(ui cli.Ui, stdin io.Reader) map[string]cli.CommandFactory {
	meta := func() Meta { return Meta{Ui: ui} }
	return map[string]cli.CommandFactory{
		"volume": parent("volume", "Interact with CSI volumes",
			"Register, deregister and inspect CSI volumes."),
		"volume register": func() (cli.Command, error) {
			return &VolumeRegisterCommand{Meta: meta(), Stdin: stdin}, nil
		},
		"volume deregister": func() (cli.Command, error) { return &VolumeDeregisterCommand{Meta: meta()}, nil },
		"volume create": func() (cli.Command, error) {
			return &VolumeCreateCommand{Meta: meta(), Stdin: stdin}, nil
		},
		"volume delete": func() (cli.Command, error) { return &VolumeDeleteCommand{Meta: meta()}, nil },
		"volume detach": func() (cli.Command, error) { return &VolumeDetachCommand{Meta: meta()}, nil },
		"volume status": func() (cli.Command, error) { return &VolumeStatusCommand{Meta: meta()}, nil },
		"volume init":   func() (cli.Command, error) { return &VolumeInitCommand{Meta: meta()}, nil },
		"plugin": parent("plugin", "Inspect CSI plugins",
			"Inspect the CSI plugins the client nodes run. Plugins are derived from\n  the nodes' fingerprints; they are never registered by hand."),
		"plugin status": func() (cli.Command, error) { return &PluginStatusCommand{Meta: meta()}, nil },
		"node": parent("node", "Inspect client nodes",
			"Inspect the client nodes and the CSI plugins they run."),
		"node status": func() (cli.Command, error) { return &NodeStatusCommand{Meta: meta()}, nil },
		"node drain":  func() (cli.Command, error) { return &NodeDrainCommand{Meta: meta(), Stdin: stdin}, nil },
		"node eligibility": func() (cli.Command, error) {
			return &NodeEligibilityCommand{Meta: meta()}, nil
		},
		"job": parent("job", "Run and inspect jobs",
			"Run, stop and inspect jobs: workloads whose task groups use volumes."),
		"job run": func() (cli.Command, error) {
			return &JobRunCommand{Meta: meta(), Stdin: stdin}, nil
		},
		"job stop":   func() (cli.Command, error) { return &JobStopCommand{Meta: meta()}, nil },
		"job status": func() (cli.Command, error) { return &JobStatusCommand{Meta: meta()}, nil },
		"alloc": parent("alloc", "Inspect allocations",
			"Inspect allocations: the placed instances of a job's task groups, and\n  the claims on their volumes."),
		"alloc status": func() (cli.Command, error) { return &AllocStatusCommand{Meta: meta()}, nil },
		"alloc logs":   func() (cli.Command, error) { return &AllocLogsCommand{Meta: meta()}, nil },
		"operator": parent("operator", "Cluster operations",
			"Operations on the servers of the cluster."),
		"operator raft": parent("operator raft", "Inspect and change the Raft peer set",
			"Inspect the Raft configuration of the servers, remove dead peers, and\n  move a stopped server's log to another log store backend."),
		"operator raft list-peers":  func() (cli.Command, error) { return &OperatorRaftListPeersCommand{Meta: meta()}, nil },
		"operator raft remove-peer": func() (cli.Command, error) { return &OperatorRaftRemovePeerCommand{Meta: meta()}, nil },
		"operator raft migrate-backend": func() (cli.Command, error) {
			return &OperatorRaftMigrateBackendCommand{Meta: meta(), Stdin: stdin}, nil
		},
		"version": func() (cli.Command, error) { return &VersionCommand{Ui: ui}, nil },
	}
}

// Run runs the command line args (without the program name) on the
// process's standard streams and returns the exit code.
func Run(args []string) int {
	ui := &lineUI{cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}}
	return RunWithUi(args, ui)
}

// RunWithUi runs args with every line of output going through ui.
func RunWithUi(args []string, ui cli.Ui) int {
	return runWith(args, ui, os.Stdin)
}

func runWith(args []string, ui cli.Ui, stdin io.Reader) int {
	commands := commandsWith(ui, stdin)
	if msg, ok := unknownCommand(args, commands); ok {
		ui.Error(msg)
		return 1
	}
	// The cli library writes help in pieces; collect them and hand each
	// stream to the UI in one go, so that a UI that adds a newline (or a
	// colour) per call does not cut the text up.
	var help, errs strings.Builder
	c := &cli.CLI{
		Name:        "volplane",
		Version:     VersionString(),
		Args:        args,
		Commands:    commands,
		HelpFunc:    helpFunc(commands),
		HelpWriter:  &help,
		ErrorWriter: &errs,
	}
	code, err := c.Run()
	if s := strings.TrimRight(help.String(), "\n"); s != "" {
		ui.Output(s)
	}
	if s := strings.TrimRight(errs.String(), "\n"); s != "" {
		ui.Error(s)
	}
	if err != nil {
		ui.Error(fmt.Sprintf("Error executing CLI: %s", err))
		return 1
	}
	// An unknown command is a usage error like any other (the library
	// uses the shell's 127 for it).
	if code == 127 {
		return 1
	}
	return code
}

// helpFunc lists only the top-level commands; their subcommands are listed
// by `volplane <command> -help`.
func helpFunc(all map[string]cli.CommandFactory) cli.HelpFunc {
	return func(map[string]cli.CommandFactory) string {
		var names []string
		for name := range all {
			if !strings.Contains(name, " ") {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		width := len(slices.MaxFunc(names, func(a, b string) int { return len(a) - len(b) }))
		var b strings.Builder
		b.WriteString("Usage: volplane [-version] [-help] <command> [args]\n\nCommands:\n")
		for _, name := range names {
			cmd, err := all[name]()
			synopsis := ""
			if err == nil {
				synopsis = cmd.Synopsis()
			}
			fmt.Fprintf(&b, "    %-*s  %s\n", width, name, synopsis)
		}
		return strings.TrimRight(b.String(), "\n")
	}
}

// parentCommand is a command that only groups subcommands; the cli library
// lists them after its help.
type parentCommand struct {
	name, synopsis, description string
}

func parent(name, synopsis, description string) cli.CommandFactory {
	return func() (cli.Command, error) { return &parentCommand{name, synopsis, description}, nil }
}

func (c *parentCommand) Help() string {
	return fmt.Sprintf("Usage: volplane %s <subcommand> [options] [args]\n\n  %s", c.name, c.description)
}
func (c *parentCommand) Synopsis() string      { return c.synopsis }
func (c *parentCommand) Run(args []string) int { return cli.RunResultHelp }

// VersionCommand prints the version.
type VersionCommand struct{ Ui cli.Ui }

func (c *VersionCommand) Help() string {
	return "Usage: volplane version\n\n  Prints the version of volplane."
}
func (c *VersionCommand) Synopsis() string { return "Print the version" }
func (c *VersionCommand) Run(args []string) int {
	if len(args) > 0 {
		c.Ui.Error("This command takes no arguments")
		c.Ui.Error("")
		c.Ui.Error(c.Help())
		return 1
	}
	c.Ui.Output(VersionString())
	return 0
}

// registeredNames lists the names added through Register, for tests.
func registeredNames() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	return slices.Sorted(maps.Keys(registry))
}
