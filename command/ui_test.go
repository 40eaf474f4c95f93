package command

import (
	"testing"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"
)

// writes records each Write call.
type writes struct{ calls []string }

func (w *writes) Write(p []byte) (int, error) {
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

// Each message goes out with its newline in one write, so that log lines
// written to the same stream never land inside it.
func TestLineUI_OneWritePerMessage(t *testing.T) {
	out, errs := &writes{}, &writes{}
	ui := &lineUI{cli.BasicUi{Writer: out, ErrorWriter: errs}}
	ui.Output("volplane agent started: HTTP http://127.0.0.1:43533")
	ui.Info("info")
	ui.Error("error")
	ui.Warn("warn")
	must.Eq(t, []string{"volplane agent started: HTTP http://127.0.0.1:43533\n", "info\n"}, out.calls)
	must.Eq(t, []string{"error\n", "warn\n"}, errs.calls)
	must.Eq(t, out, outputWriter(ui).(*writes), must.Sprint("logs go to the same stream as the output"))
}
