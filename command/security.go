package command

import (
	"strings"

	"github.com/volplane/volplane/api"
)

// securityNote tells the operator, under a listing of servers or nodes,
// when the cluster is open to anything on its network, and how to close
// it. It says nothing when the server cannot be asked.
func securityNote(client *api.Client) string {
	st, err := client.Operator().Security(nil)
	if err != nil {
		return ""
	}
	var b strings.Builder
	switch {
	case st.Open:
		b.WriteString("\nSecurity: OPEN, no TLS and no node introduction required:")
	case !st.RPCTLS:
		b.WriteString("\nSecurity: node introduction required, but no TLS on RPC:")
	default:
		return ""
	}
	for _, w := range st.Warnings {
		b.WriteString("\n  - " + w)
	}
	return b.String()
}
