package command

import (
	"regexp"
	"testing"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"
)

// hookCommand stands in for a command another file registers (agent).
type hookCommand struct {
	ui   cli.Ui
	args []string
}

func (c *hookCommand) Help() string     { return "Usage: volplane zz-test-hook" }
func (c *hookCommand) Synopsis() string { return "A registered test command" }
func (c *hookCommand) Run(args []string) int {
	c.ui.Output("hook ran with " + args[0])
	return 3
}

func TestRegister(t *testing.T) {
	Register("zz-test-hook", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &hookCommand{ui: ui}, nil }
	})
	t.Cleanup(func() {
		registryMu.Lock()
		delete(registry, "zz-test-hook")
		registryMu.Unlock()
	})
	must.SliceContains(t, registeredNames(), "zz-test-hook")

	r := run(t, "", "zz-test-hook", "x")
	must.Eq(t, 3, r.code)
	must.Eq(t, "hook ran with x\n", r.out)

	r = run(t, "", "-help")
	must.Eq(t, 0, r.code)
	// The column width follows the longest command name, so match words.
	must.RegexMatch(t, regexp.MustCompile(`(?m)^\s+zz-test-hook\s+A registered test command$`), r.out)
	must.RegexMatch(t, regexp.MustCompile(`(?m)^\s+volume\s+Interact with CSI volumes$`), r.out)

	noop := func(cli.Ui) cli.CommandFactory { return nil }
	func() {
		defer func() { must.Eq[any](t, `command "zz-test-hook" registered twice`, recover()) }()
		Register("zz-test-hook", noop)
	}()
	func() {
		defer func() { must.Eq[any](t, `command "volume status" is built in and cannot be registered`, recover()) }()
		Register("volume status", noop)
	}()
}

func TestTopLevel(t *testing.T) {
	r := run(t, "", "version")
	must.Eq(t, 0, r.code)
	must.Eq(t, "volplane v"+Version+"\n", r.out)

	r = run(t, "", "-version")
	must.Eq(t, 0, r.code)
	must.Eq(t, VersionString()+"\n", r.out)

	r = run(t, "", "version", "extra")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes no arguments")

	// Unknown commands and bare parents are usage errors.
	r = run(t, "", "nope")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Unknown command: volplane nope\n")

	r = run(t, "", "volume")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Usage: volplane volume <subcommand>")
	must.StrContains(t, r.stderr, "    register      Register or update a volume\n")

	r = run(t, "", "operator", "raft")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "list-peers")
	must.StrContains(t, r.stderr, "remove-peer")

	// -help of a command prints its usage on stdout and succeeds.
	r = run(t, "", "volume", "status", "-help")
	must.Eq(t, 0, r.code)
	must.StrContains(t, r.out, "Usage: volplane volume status [options] [id]")
	must.StrContains(t, r.out, "-address=<addr>")
}

func TestCommands_AllHaveHelp(t *testing.T) {
	for name, factory := range builtinCommands(cli.NewMockUi(), nil) {
		cmd, err := factory()
		must.NoError(t, err, must.Sprint(name))
		must.NotEq(t, "", cmd.Synopsis(), must.Sprint(name))
		must.StrContains(t, cmd.Help(), "Usage: volplane "+name, must.Sprint(name))
	}
}
