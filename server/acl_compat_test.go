package server

import (
	"testing"
	"time"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
	"github.com/volplane/volplane/testutil"
)

// TestHTTP_NomadClientACLCompat runs Nomad's official Go client against the
// ACL and namespace endpoints of a real 3-server cluster with ACLs on,
// through a follower.
func TestHTTP_NomadClientACLCompat(t *testing.T) {
	servers := TestCluster(t, 3, func(_ int, c *Config) { c.ACLEnabled = true })
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	registerNode(t, leader, "acl-compat")
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		p, err := f.State().CSIPluginByID(nil, "acl-compat")
		return p != nil, err
	})
	httpapitest.RunNomadClientACLCompat(t, "http://"+f.HTTPAddr(), httpapitest.ACLFixture{PluginID: "acl-compat"})
}
