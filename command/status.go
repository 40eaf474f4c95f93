package command

import (
	"flag"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
)

// statusCommand is what one "<noun> status" command knows of its objects
// (of type T, listed as stubs of type S). runStatus does the rest, so that
// every status command takes the same flags and arguments and fails the
// same way.
type statusCommand[T, S any] struct {
	name  string       // the flag set's name: "node status"
	flags FlagSetFlags // the shared flags the command takes
	noun  string       // one object, in "Error querying <noun>: ..."
	nouns string       // the list, in "Error querying <nouns>: ..."

	// list reads the stubs of every object; nil when the command needs an ID.
	list func(client *api.Client) ([]S, error)
	// none is printed instead of an empty table.
	none   string
	header []string
	row    func(stub S, verbose bool) []string

	// find returns the object an ID, or a unique prefix of one, names (see
	// lookup).
	find func(client *api.Client, id string) (T, error)
	// clean, when set, removes from the object found what must never reach
	// the terminal; -json output goes through it too.
	clean func(T) T
	// detail prints the object found, without -json, and returns the exit
	// code.
	detail func(client *api.Client, v T, verbose bool) int
	// footer, when set, is printed after the table of the list.
	footer func(client *api.Client) string

	// ownFlags, when set, adds the command's own flags to its flag set;
	// check, when set, checks them once parsed (a usage error otherwise).
	ownFlags func(f *flag.FlagSet)
	check    func() error
	// afterList, when set, runs after the list (an empty one too) without
	// -json, and returns the exit code.
	afterList func(client *api.Client, verbose bool) int
}

// runStatus runs a status command: without an argument it lists the
// objects, with one it shows the object the argument names, both as JSON
// with -json or through a template with -t.
func runStatus[T, S any](m *Meta, c cli.Command, s statusCommand[T, S], args []string) int {
	var verbose bool
	f := m.FlagSet(s.name, s.flags)
	format := m.FormatFlags(f)
	f.BoolVar(&verbose, "verbose", false, "")
	if s.ownFlags != nil {
		s.ownFlags(f)
	}
	if ok, code := m.Parse(c, f, args); !ok {
		return code
	}
	if s.check != nil {
		if err := s.check(); err != nil {
			return m.UsageError(c, "%s", err)
		}
	}
	switch {
	case s.list == nil && f.NArg() != 1:
		return m.UsageError(c, "This command takes one argument: <id>")
	case f.NArg() > 1:
		return m.UsageError(c, "This command takes at most one argument: [id]")
	}
	client, err := m.Client()
	if err != nil {
		return m.Fail("creating client", err)
	}
	if f.NArg() == 0 {
		return s.printList(m, client, format, verbose)
	}
	v, err := s.find(client, f.Arg(0))
	if err != nil {
		return m.Fail("querying "+s.noun, err)
	}
	if s.clean != nil {
		v = s.clean(v)
	}
	if format.set() {
		return m.Output(format, v)
	}
	return s.detail(client, v, verbose)
}

// printList prints every object's stub, as a table or as JSON.
func (s statusCommand[T, S]) printList(m *Meta, client *api.Client, format *outputFormat, verbose bool) int {
	stubs, err := s.list(client)
	if err != nil {
		return m.Fail("querying "+s.nouns, err)
	}
	if format.set() {
		return m.Output(format, stubs)
	}
	if len(stubs) == 0 {
		m.Ui.Output(s.none)
		return s.after(client, verbose)
	}
	rows := make([][]string, 0, len(stubs))
	for _, stub := range stubs {
		rows = append(rows, s.row(stub, verbose))
	}
	m.Ui.Output(table(s.header, rows))
	if s.footer != nil {
		if text := s.footer(client); text != "" {
			m.Ui.Output(text)
		}
	}
	return s.after(client, verbose)
}

func (s statusCommand[T, S]) after(client *api.Client, verbose bool) int {
	if s.afterList == nil {
		return 0
	}
	return s.afterList(client, verbose)
}

// listCommand is a command that only lists objects of type T: it takes no
// argument, and -json.
type listCommand[T any] struct {
	name   string // the flag set's name: "operator node-intro list"
	doing  string // in "Error <doing>: ..."
	list   func(client *api.Client) ([]T, error)
	none   string // printed instead of an empty table
	header []string
	row    func(T) []string
}

// runList runs a list command.
func runList[T any](m *Meta, c cli.Command, l listCommand[T], args []string) int {
	client, format, code := noArgClient(m, c, l.name, args)
	if client == nil {
		return code
	}
	items, err := l.list(client)
	if err != nil {
		return m.Fail(l.doing, err)
	}
	if format.set() {
		return m.Output(format, items)
	}
	if len(items) == 0 {
		m.Ui.Output(l.none)
		return 0
	}
	rows := make([][]string, 0, len(items))
	for _, it := range items {
		rows = append(rows, l.row(it))
	}
	m.Ui.Output(table(l.header, rows))
	return 0
}

// showCommand is a command that only shows one object of type T: it
// takes no argument, and -json and -t.
type showCommand[T any] struct {
	name  string // the flag set's name: "agent-info"
	doing string // in "Error <doing>: ..."
	get   func(client *api.Client) (T, error)
	text  func(T) string
}

// runShow runs a show command.
func runShow[T any](m *Meta, c cli.Command, s showCommand[T], args []string) int {
	client, format, code := noArgClient(m, c, s.name, args)
	if client == nil {
		return code
	}
	v, err := s.get(client)
	if err != nil {
		return m.Fail(s.doing, err)
	}
	if format.set() {
		return m.Output(format, v)
	}
	m.Ui.Output(s.text(v))
	return 0
}

// noArgClient parses the arguments of a command that takes none, only
// the client flags, -json and -t, and returns its client; nil and the exit
// code when it is to stop there.
func noArgClient(m *Meta, c cli.Command, name string, args []string) (*api.Client, *outputFormat, int) {
	f := m.FlagSet(name, FlagSetClient)
	format := m.FormatFlags(f)
	if ok, code := m.Parse(c, f, args); !ok {
		return nil, nil, code
	}
	if f.NArg() != 0 {
		return nil, nil, m.UsageError(c, "This command takes no arguments")
	}
	client, err := m.Client()
	if err != nil {
		return nil, nil, m.Fail("creating client", err)
	}
	return client, format, 0
}
