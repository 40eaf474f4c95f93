package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/volplane/volplane/server"
	"github.com/volplane/volplane/structs"
)

// aclBenchRules is the policy of the ACL phase's token: what an operator
// who manages the volumes of one namespace holds.
const aclBenchRules = `namespace "default" {
  policy       = "write"
}
plugin { policy = "read" }
`

// runACL measures what ACLs cost registers and lists. Two 3-server
// clusters of their own run side by side, the same but for ACLs: one with
// ACLs off, one with ACLs on, bootstrapped, whose every call carries a
// client token with a namespace policy (the token every server resolves,
// from its cache after the first call). Registers with cfg.Writers
// writers, then sequential GET /v1/volumes of cfg.ACLListVolumes volumes,
// are measured on both in cfg.ACLRounds interleaved rounds; what is judged
// is the ACL cluster's rate as a share of the other's in the same round,
// the median over the rounds.
func runACL(ctx context.Context, cfg *Config, dir string, rep *Report) (err error) {
	var off, on *volplane
	defer func() {
		cfg.progress("acl: shutting its clusters down")
		for _, vp := range []*volplane{off, on} {
			if vp != nil {
				err = errors.Join(err, vp.close())
			}
		}
	}()
	cfg.progress("acl: starting two 3-server volplane clusters, one with ACLs off, one with ACLs on")
	if off, err = startVolplane(ctx, cfg, filepath.Join(dir, "acl-off"), "acl-off"); err != nil {
		return err
	}
	if on, err = startVolplane(ctx, cfg, filepath.Join(dir, "acl-on"), "acl-on",
		func(c *server.Config) { c.ACLEnabled = true }); err != nil {
		return err
	}
	if err := on.aclToken(); err != nil {
		return err
	}
	for _, vp := range []*volplane{off, on} {
		if err := vp.registerNode(); err != nil {
			return err
		}
	}

	sides := []*side{
		{name: "acl-off", run: off.registerChunk(ctx, cfg)},
		{name: "acl-on", run: on.registerChunk(ctx, cfg)},
	}
	if err := interleave(cfg, PhaseACLRegister, cfg.Writers, cfg.ACLOps, cfg.ACLRounds, sides); err != nil {
		return err
	}
	rep.addACL(PhaseACLRegister, cfg.Writers, 0, &sides[0].s, &sides[1].s, "a client token with a namespace policy")

	for _, vp := range []*volplane{off, on} {
		cfg.progress("acl: registering %d volumes to list, %d per request", cfg.ACLListVolumes, cfg.ListBatch)
		if err := vp.registerMany(ctx, cfg.ACLListVolumes, cfg.ListBatch); err != nil {
			return err
		}
		got, err := vp.listVolumes(ctx, true)
		if err != nil {
			return err
		}
		if got != cfg.ACLListVolumes {
			return fmt.Errorf("the list has %d volumes, want %d", got, cfg.ACLListVolumes)
		}
	}
	listChunk := func(vp *volplane) func(n int) ([]time.Duration, time.Duration, error) {
		return func(n int) ([]time.Duration, time.Duration, error) {
			return drive(ctx, n, 1, func(int) error {
				_, err := vp.listVolumes(ctx, false)
				return err
			})
		}
	}
	sides = []*side{{name: "acl-off", run: listChunk(off)}, {name: "acl-on", run: listChunk(on)}}
	if err := interleave(cfg, PhaseACLList, 1, cfg.ACLListRequests, cfg.ACLRounds, sides); err != nil {
		return err
	}
	rep.addACL(PhaseACLList, 1, cfg.ACLListVolumes, &sides[0].s, &sides[1].s, "GET /v1/volumes with the same token")
	for _, vp := range []*volplane{off, on} {
		if !vp.stillLeader() {
			rep.Notes = append(rep.Notes, "a volplane leader changed during the acl phase: figures are skewed")
		}
	}
	return nil
}

// aclToken bootstraps the cluster, writes the phase's policy and makes the
// token every later call of vp carries.
func (vp *volplane) aclToken() error {
	var boot structs.ACLTokenUpsertResponse
	if err := vp.call("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &boot); err != nil {
		return fmt.Errorf("bootstrapping ACLs: %w", err)
	}
	mgmt := boot.Tokens[0].SecretID
	pol := &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: "bench", Rules: aclBenchRules}}}
	pol.AuthToken = mgmt
	if err := vp.call("ACL.UpsertPolicies", pol, &structs.GenericResponse{}); err != nil {
		return fmt.Errorf("writing the policy: %w", err)
	}
	tok := &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{Name: "bench", Type: structs.ACLClientToken,
		Policies: []string{"bench"}}}}
	tok.AuthToken = mgmt
	var reply structs.ACLTokenUpsertResponse
	if err := vp.call("ACL.UpsertTokens", tok, &reply); err != nil {
		return fmt.Errorf("creating the token: %w", err)
	}
	vp.token = reply.Tokens[0].SecretID
	return nil
}
