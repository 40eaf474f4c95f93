package devplugin

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
)

// TestSanity runs the CSI conformance suite against a plugin over its
// socket, with a topology (so the topology paths run), an attach limit (so
// the limit test runs) and a mutable parameter (so the modify tests run).
func TestSanity(t *testing.T) {
	// Ginkgo refuses to run a suite twice in one process (and fails the
	// whole binary if asked to), so flake hunts with -count=N skip it.
	if f := flag.Lookup("test.count"); f != nil && f.Value.String() != "1" {
		t.Skip("the sanity suite runs only with -count=1 (a Ginkgo limit)")
	}
	stateDir := t.TempDir()
	p := startInstance(t, stateDir, "sanity-node", func(c *Config) {
		c.MaxVolumesPerNode = 3
		c.Topology = map[string]string{"topology.dev.csi.volplane.io/zone": "z1"}
	})

	cfg := sanity.NewTestConfig()
	cfg.Address = p.Endpoint()
	base := t.TempDir()
	cfg.TargetPath = filepath.Join(base, "target")
	cfg.StagingPath = filepath.Join(base, "staging")
	cfg.TestNodeVolumeAttachLimit = true
	cfg.TestVolumeMutableParameters = map[string]string{"tier": "fast"}
	cfg.TestVolumeParameters = map[string]string{"purpose": "sanity"}
	sanity.Test(t, cfg)
}
