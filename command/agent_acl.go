package command

import (
	"fmt"

	"github.com/volplane/volplane/server"
)

// ACLBlock is the agent's acl block, as Nomad's:
//
//	acl {
//	  enabled    = true
//	  token_ttl  = "30s"  # how long a server caches a resolved token
//	  policy_ttl = "30s"  # and a compiled set of policies
//	}
//
// With ACLs enabled, every HTTP and RPC call needs a token that allows it:
// bootstrap the first management token with `volplane acl bootstrap`. The
// bootstrap runs once; to run it again (a lost management token), write
// the reset index its refusal names into <data_dir>/server/acl-bootstrap-reset
// on the leader and bootstrap again, as in Nomad.
type ACLBlock struct {
	Enabled   bool   `hcl:"enabled,optional"`
	TokenTTL  string `hcl:"token_ttl,optional"`
	PolicyTTL string `hcl:"policy_ttl,optional"`
}

func (b *ACLBlock) validate() error {
	if b == nil {
		return nil
	}
	for _, d := range [][2]string{{"token_ttl", b.TokenTTL}, {"policy_ttl", b.PolicyTTL}} {
		if _, err := positiveDuration(d[1]); err != nil {
			return fmt.Errorf("acl.%s %q: %v", d[0], d[1], err)
		}
	}
	return nil
}

// applyACL sets the server's ACL settings from the acl block (validated
// with the file).
func applyACL(a *AgentConfig, cfg *server.Config) {
	if a.ACL == nil {
		return
	}
	cfg.ACLEnabled = a.ACL.Enabled
	cfg.ACLTokenTTL, _ = positiveDuration(a.ACL.TokenTTL)
	cfg.ACLPolicyTTL, _ = positiveDuration(a.ACL.PolicyTTL)
}
