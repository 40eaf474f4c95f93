package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
)

// TestNomadClientCompat runs Nomad's official Go client against the handler
// over the fake backend. The same suite runs against a real server in the
// server package's integration tests.
func TestNomadClientCompat(t *testing.T) {
	be := newFakeBackend()
	srv := httptest.NewServer(NewHandler(Config{Backend: be}))
	t.Cleanup(srv.Close)

	httpapitest.RunNomadClientCompat(t, srv.URL, func(t *testing.T, fx *httpapitest.Fixture) {
		be.upsertNode(fx.Node)
		// Nomad's client decodes register warnings as one string.
		be.warnings = []string{"compat warning"}
		fx.Leader = be.leader
		fx.Peers = be.peers
	})
}
