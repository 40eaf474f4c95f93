package command

import (
	"io"

	"github.com/hashicorp/cli"
)

// lineUI is cli.BasicUi writing each message and its newline in one
// write. BasicUi writes them in two, and the agent's log lines, written to
// the same stream by other goroutines, could then land between a message
// and its end: a script reading the agent's "started" line got the log's
// timestamp glued to the HTTP port.
type lineUI struct {
	cli.BasicUi
}

func (u *lineUI) Output(message string) { _, _ = io.WriteString(u.Writer, message+"\n") }

func (u *lineUI) Info(message string) { u.Output(message) }

func (u *lineUI) Error(message string) {
	w := u.Writer
	if u.ErrorWriter != nil {
		w = u.ErrorWriter
	}
	_, _ = io.WriteString(w, message+"\n")
}

func (u *lineUI) Warn(message string) { u.Error(message) }
