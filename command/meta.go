package command

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
)

// Meta holds what every command that talks to an agent shares: the UI and
// the client options. Commands embed it.
type Meta struct {
	Ui cli.Ui

	address   string
	token     string
	namespace string
	tls       api.TLSConfig

	// format, once FormatFlags added -json and -t, and volType, once
	// TypeFlag added -type, are checked by Parse, so that every command
	// refuses the same mistakes with the same words.
	format  *outputFormat
	volType *string
}

// FlagSetFlags selects the shared flags a command's flag set gets.
type FlagSetFlags uint

const (
	// FlagSetClient adds -address and -token.
	FlagSetClient FlagSetFlags = 1 << iota
	// FlagSetNamespace adds -namespace, for commands about volumes.
	FlagSetNamespace
)

// EnvNamespace is read for the default of -namespace.
const EnvNamespace = "VOLPLANE_NAMESPACE"

// FlagSet returns a flag set that reports errors through the command (see
// Parse) instead of printing them itself.
func (m *Meta) FlagSet(name string, fs FlagSetFlags) *flag.FlagSet {
	f := flag.NewFlagSet(name, flag.ContinueOnError)
	f.SetOutput(io.Discard)
	f.Usage = func() {}
	if fs&FlagSetClient != 0 {
		f.StringVar(&m.address, "address", api.DefaultAddress(), "")
		f.StringVar(&m.token, "token", api.Getenv(api.EnvToken), "")
		env := api.DefaultTLSConfig()
		f.StringVar(&m.tls.CACert, "ca-cert", env.CACert, "")
		f.StringVar(&m.tls.ClientCert, "client-cert", env.ClientCert, "")
		f.StringVar(&m.tls.ClientKey, "client-key", env.ClientKey, "")
		f.StringVar(&m.tls.TLSServerName, "tls-server-name", env.TLSServerName, "")
		f.BoolVar(&m.tls.Insecure, "tls-skip-verify", env.Insecure, "")
	}
	if fs&FlagSetNamespace != 0 {
		f.StringVar(&m.namespace, "namespace", api.Getenv(EnvNamespace), "")
	}
	return f
}

// Parse parses args into f, flags and arguments in any order (Nomad's CLI
// takes `volume status ID -verbose` as well as `volume status -verbose
// ID`); after "--" everything is an argument. f.Args() then holds the
// arguments alone, in their order. On a bad flag, or flags that do not go
// together, it prints the problem and the command's usage and returns false
// with the exit code to use.
func (m *Meta) Parse(c cli.Command, f *flag.FlagSet, args []string) (ok bool, code int) {
	err := parseInterleaved(f, args)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		m.Ui.Output(strings.TrimSpace(c.Help()))
		return false, 0
	default:
		return false, m.UsageError(c, "Error parsing arguments: %s", err)
	}
	if m.format != nil {
		if err := m.format.check(); err != nil {
			return false, m.UsageError(c, "%s", err)
		}
	}
	if m.volType != nil {
		if err := checkVolumeType(*m.volType); err != nil {
			return false, m.UsageError(c, "%s", err)
		}
	}
	return true, 0
}

// parseInterleaved parses flags wherever they stand among the arguments:
// the flag package stops at the first argument, so each argument is set
// aside and parsing goes on after it. The arguments are then handed back to
// f (after a "--", so that one starting with "-" stays an argument).
func parseInterleaved(f *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := f.Parse(args); err != nil {
			return err
		}
		rest := f.Args()
		// The flag package consumed a "--" when what it read ends with
		// one: everything after it is an argument.
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return f.Parse(append([]string{"--"}, positional...))
}

// UsageError prints a one-line problem and the command's usage to stderr and
// returns the exit code of a usage error.
func (m *Meta) UsageError(c cli.Command, format string, args ...any) int {
	m.Ui.Error(fmt.Sprintf(format, args...))
	m.Ui.Error("")
	m.Ui.Error(strings.TrimSpace(c.Help()))
	return 1
}

// Fail prints "Error <doing>: <err>" to stderr and returns exit code 1.
// API errors print as the server's message alone. When no agent answered
// at all, a second line says how to start one or point at one, since that
// is nearly always the first thing a new user meets.
func (m *Meta) Fail(doing string, err error) int {
	m.Ui.Error(fmt.Sprintf("Error %s: %s", doing, err))
	var connErr *api.ConnectError
	if errors.As(err, &connErr) {
		m.Ui.Error(noAgentHint)
	}
	return 1
}

// noAgentHint follows an error that says no agent answered.
const noAgentHint = "Is an agent running? Start one with `volplane agent -dev`, " +
	"or point -address (or VOLPLANE_ADDR) at one."

// Client returns an API client for the -address and -token flags.
func (m *Meta) Client() (*api.Client, error) {
	return api.NewClient(api.Config{Address: m.address, Token: m.token, TLS: m.tls})
}

// QueryOptions carries -namespace into a read.
func (m *Meta) QueryOptions() *api.QueryOptions {
	return &api.QueryOptions{Namespace: m.namespace}
}

// WriteOptions carries -namespace into a write.
func (m *Meta) WriteOptions() *api.WriteOptions {
	return &api.WriteOptions{Namespace: m.namespace}
}

// OutputJSON prints v as indented JSON on stdout.
func (m *Meta) OutputJSON(v any) int {
	out, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return m.Fail("formatting JSON", err)
	}
	m.Ui.Output(string(out))
	return 0
}

// clientOptionsHelp documents the shared flags in every command's help.
const clientOptionsHelp = `
Client Options:

  -address=<addr>
    The address of the volplane agent's HTTP API. Overrides the
    VOLPLANE_ADDR environment variable. Default: http://127.0.0.1:4646.

  -token=<token>
    The token sent with every request (X-Nomad-Token). Overrides the
    VOLPLANE_TOKEN environment variable.

  -ca-cert=<path>
    The CA certificate that signed the agent's HTTPS certificate.
    Overrides VOLPLANE_CACERT.

  -client-cert=<path>, -client-key=<path>
    A client certificate and its key, for agents that require one
    (tls.verify_https_client). Override VOLPLANE_CLIENT_CERT and
    VOLPLANE_CLIENT_KEY.

  -tls-server-name=<name>
    The name to check on the agent's certificate instead of the address's
    host. Overrides VOLPLANE_TLS_SERVER_NAME.

  -tls-skip-verify
    Do not check the agent's certificate (unsafe). Overrides
    VOLPLANE_SKIP_VERIFY.

  Nomad's NOMAD_* variables are read when the VOLPLANE_* ones are unset.`

const namespaceOptionHelp = `
  -namespace=<namespace>
    The namespace of the volumes. Overrides the VOLPLANE_NAMESPACE
    environment variable. Default: the server's default namespace.`

// helpText assembles a command's help from its usage and description, its
// own options and the shared ones.
func helpText(usage, options string, fs FlagSetFlags) string {
	s := strings.TrimSpace(usage) + "\n"
	if fs&FlagSetClient != 0 {
		s += clientOptionsHelp + "\n"
		if fs&FlagSetNamespace != 0 {
			s += namespaceOptionHelp + "\n"
		}
	}
	if options = strings.Trim(options, "\n"); options != "" {
		s += "\n" + options + "\n"
	}
	return s
}

// table renders rows under a header as aligned columns.
func table(header []string, rows [][]string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		for i := range r {
			r[i] = oneLine(r[i])
		}
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
	return trimLines(b.String())
}

// kv renders "Key = Value" lines with the "=" aligned.
func kv(pairs [][2]string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 1, ' ', 0)
	for _, p := range pairs {
		fmt.Fprintf(w, "%s\t= %s\n", p[0], oneLine(p[1]))
	}
	_ = w.Flush()
	return trimLines(b.String())
}

// trimLines drops the padding tabwriter leaves at the end of lines and the
// final newline (Ui.Output adds one).
func trimLines(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// oneLine keeps a value on its row: newlines and tabs would break the table.
func oneLine(s string) string {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(s)
	if s == "" {
		return "<none>"
	}
	return s
}

// shortID shortens UUID-like IDs to their first 8 characters, as the
// tables show them unless -verbose is given.
func shortID(id string, verbose bool) string {
	if verbose || len(id) <= 8 {
		return id
	}
	return id[:8]
}

// unixNano formats a time stamped in Unix nanoseconds; 0 means never.
func unixNano(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).Format(time.RFC3339)
}

// timeOf formats a time.Time; the zero time means never.
func timeOf(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format(time.RFC3339)
}

// yesNo formats a boolean the way the tables show it.
func yesNo(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// ratio formats "healthy/expected".
func ratio(healthy, expected int) string { return fmt.Sprintf("%d/%d", healthy, expected) }
