package command

import (
	"flag"
	"io"
	"os"

	"github.com/hashicorp/cli"
	"github.com/mattn/go-isatty"
)

// ANSI styles of the progress output, as Nomad's monitor colours it: bold
// headlines, green for what runs or is done, yellow for what waits, red
// for what failed.
const (
	styleBold   = "\x1b[1m"
	styleGreen  = "\x1b[32m"
	styleYellow = "\x1b[33m"
	styleRed    = "\x1b[31m"
	styleReset  = "\x1b[0m"
)

// painter colours text when colour is on, and passes it through otherwise.
type painter bool

func (p painter) paint(style, s string) string {
	if !p || s == "" || style == "" {
		return s
	}
	return style + s + styleReset
}

// noColorHelp documents -no-color for the commands that show progress.
const noColorHelp = `
  -no-color
    Disable colored output. Output is not colored either when it does not
    go to a terminal, or when NO_COLOR is set.`

// colorFlag adds -no-color to f; the returned function tells, once f is
// parsed, whether to colour the output.
func (m *Meta) colorFlag(f *flag.FlagSet) func() painter {
	var noColor bool
	f.BoolVar(&noColor, "no-color", false, "")
	return func() painter {
		if noColor || os.Getenv("NO_COLOR") != "" {
			return false
		}
		return painter(isTerminal(outputWriter(m.Ui)))
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// outputWriter is the writer behind ui's standard output, for output that
// is not written line by line (logs), or nil when ui does not say.
func outputWriter(ui cli.Ui) io.Writer {
	switch u := ui.(type) {
	case *cli.BasicUi:
		return u.Writer
	case *lineUI:
		return u.Writer
	case *cli.MockUi:
		return u.OutputWriter
	case *cli.ColoredUi:
		return outputWriter(u.Ui)
	case *cli.PrefixedUi:
		return outputWriter(u.Ui)
	}
	return nil
}
