package e2e

// SetToken makes the CLI (VOLPLANE_TOKEN) and the harness's HTTP reads
// (X-Nomad-Token) send token, on a cluster with ACLs on.
func (c *ProcessCluster) SetToken(token string) { c.token = token }

// Token is the token set by SetToken, "" before.
func (c *ProcessCluster) Token() string { return c.token }

// tokenHeader is the X-Nomad-Token header of c's token, for doHTTP; none
// for a cluster without one.
func tokenHeader(c Cluster) []string {
	if tc, ok := c.(interface{ Token() string }); ok && tc.Token() != "" {
		return []string{"X-Nomad-Token", tc.Token()}
	}
	return nil
}
