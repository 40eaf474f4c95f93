package server

import (
	"testing"
	"time"

	"github.com/volplane/volplane/structs"
)

// BenchmarkACL_Authorize is what every request pays for its token with ACLs
// on: resolving it (from the cache after the first) and checking its
// endpoint's row, for a volume register in the namespace the token writes.
func BenchmarkACL_Authorize(b *testing.B) {
	s := TestServer(b, func(c *Config) { c.ACLEnabled = true })
	WaitForLeader(b, s)
	var boot structs.ACLTokenUpsertResponse
	if err := s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &boot); err != nil {
		b.Fatal(err)
	}
	mgmt := boot.Tokens[0].SecretID
	pol := &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: "w", Rules: `namespace "default" { policy = "write" }
plugin { policy = "read" }`}}}
	pol.AuthToken = mgmt
	if err := s.RPC("ACL.UpsertPolicies", pol, &structs.GenericResponse{}); err != nil {
		b.Fatal(err)
	}
	tok := &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{Type: structs.ACLClientToken, Policies: []string{"w"}}}}
	tok.AuthToken = mgmt
	var reply structs.ACLTokenUpsertResponse
	if err := s.RPC("ACL.UpsertTokens", tok, &reply); err != nil {
		b.Fatal(err)
	}
	args := &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{{ID: "v", PluginID: "p"}}}
	args.AuthToken = reply.Tokens[0].SecretID

	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.authorize("CSIVolume.Register", args, args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		// Every resolution a miss: what a server pays after a policy or
		// token change, or for a token it has not seen.
		b.ReportAllocs()
		for b.Loop() {
			r := newACLResolver(time.Minute, time.Minute)
			if _, err := r.resolve(s.State(), args.AuthToken, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
