package command

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/volplane/volplane/api"
)

// OperatorMetricsCommand prints the answering agent's metrics, as Nomad's
// "operator metrics" does.
type OperatorMetricsCommand struct{ Meta }

func (c *OperatorMetricsCommand) Synopsis() string {
	return "Display the metrics of the agent"
}

func (c *OperatorMetricsCommand) Help() string {
	return helpText(`
Usage: volplane operator metrics [options]

  Displays the metrics of the agent that answers (GET /v1/metrics): the
  volume watcher's and the claims' figures, the group commit's and Raft's
  (volplane_raft_*), and the Go runtime's. In JSON, Nomad's summary form,
  by default; in the Prometheus text format with -format=prometheus.
`, `
Metrics Options:

  -pretty
    Indent the JSON.

  -format=prometheus
    Print the Prometheus text format instead of JSON.

  -json
    Print the metrics decoded and indented, as the other commands' -json.`+templateOptionHelp, FlagSetClient)
}

func (c *OperatorMetricsCommand) Run(args []string) int {
	var pretty bool
	var format string
	f := c.FlagSet("operator metrics", FlagSetClient)
	f.BoolVar(&pretty, "pretty", false, "")
	f.StringVar(&format, "format", "", "")
	out := c.FormatFlags(f)
	if ok, code := c.Parse(c, f, args); !ok {
		return code
	}
	switch {
	case f.NArg() != 0:
		return c.UsageError(c, "This command takes no arguments")
	case format != "" && format != api.MetricsFormatPrometheus:
		return c.UsageError(c, "Unknown -format %q: the only other format than JSON is %s", format, api.MetricsFormatPrometheus)
	case format != "" && (pretty || out.set()):
		return c.UsageError(c, "-format=prometheus prints the text format: -pretty, -json and -t apply to JSON")
	}
	client, err := c.Client()
	if err != nil {
		return c.Fail("creating client", err)
	}
	if out.set() {
		summary, err := client.Operator().MetricsSummary(nil)
		if err != nil {
			return c.Fail("querying metrics", err)
		}
		return c.Output(out, summary)
	}
	raw, err := client.Operator().Metrics(format, nil)
	if err != nil {
		return c.Fail("querying metrics", err)
	}
	if pretty {
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "    "); err != nil {
			return c.Fail("formatting the metrics", err)
		}
		raw = b.Bytes()
	}
	c.Ui.Output(strings.TrimRight(string(raw), "\n"))
	return 0
}

func init() {
	Register("operator metrics", func(ui cli.Ui) cli.CommandFactory {
		return func() (cli.Command, error) { return &OperatorMetricsCommand{Meta{Ui: ui}}, nil }
	})
}
