package command

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/testutil"
)

// Run as a plugin task, csi-dev-plugin serves on $CSI_ENDPOINT and names
// its node $VOLPLANE_NODE_ID when no flag says otherwise.
func TestCSIDevPlugin_Env(t *testing.T) {
	dir, err := os.MkdirTemp("", "vpdev")
	must.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "csi.sock")
	t.Setenv("CSI_ENDPOINT", "unix://"+socket)
	t.Setenv("VOLPLANE_NODE_ID", "node-from-env")

	ui := cli.NewMockUi()
	stop := make(chan struct{})
	done := make(chan int, 1)
	cmd := &CSIDevPluginCommand{UI: ui, ShutdownCh: stop}
	go func() { done <- cmd.Run([]string{"-state-dir", t.TempDir()}) }()
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		_, err := os.Stat(socket)
		return err == nil, err
	})
	close(stop)
	select {
	case code := <-done:
		must.Zero(t, code, must.Sprint(ui.ErrorWriter.String()))
	case <-time.After(10 * time.Second):
		t.Fatal("csi-dev-plugin did not stop")
	}
	must.StrContains(t, ui.OutputWriter.String(), `as node "node-from-env"`)
	must.StrContains(t, ui.OutputWriter.String(), socket)

	t.Setenv("CSI_ENDPOINT", "")
	code := (&CSIDevPluginCommand{UI: ui, ShutdownCh: stop}).Run([]string{"-state-dir", t.TempDir()})
	must.Eq(t, 1, code)
	must.StrContains(t, ui.ErrorWriter.String(), "-endpoint (or CSI_ENDPOINT) and -state-dir are required")
}
