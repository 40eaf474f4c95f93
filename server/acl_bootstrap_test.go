package server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/acl"
	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/state"
	"github.com/volplane/volplane/structs"
)

// TestACL_BootstrapOnceAndReset: a second bootstrap is refused naming the
// reset index; with that index in the reset file it runs again.
func TestACL_BootstrapOnceAndReset(t *testing.T) {
	s, first := aclTestServer(t, nil)
	var reply structs.ACLTokenUpsertResponse
	err := s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &reply)
	done, err2 := s.State().ACLBootstrapIndex()
	must.NoError(t, err2)
	must.Eq(t, fmt.Sprintf("ACL bootstrap already done (reset index: %d)", done), structs.MessageOf(err))
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))

	// A wrong index in the file is refused too.
	path := BootstrapResetPath(s.config.DataDir)
	must.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	must.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf("%d\n", done+100)), 0o600))
	err = s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &reply)
	must.Eq(t, fmt.Sprintf("Invalid bootstrap reset index (specified %d, reset index: %d)", done+100, done), structs.MessageOf(err))

	// The right one: a new management token, chosen by the operator; the
	// first one keeps working.
	must.NoError(t, os.WriteFile(path, []byte(fmt.Sprint(done)), 0o600))
	const chosen = "2b778dd9-f5f1-6f29-b4b4-9a5fa948757a"
	must.NoError(t, s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{BootstrapSecret: chosen}, &reply))
	must.Eq(t, chosen, reply.Tokens[0].SecretID)
	must.Eq(t, structs.BootstrapTokenName, reply.Tokens[0].Name)
	for _, secret := range []string{first, chosen} {
		tok, err := s.State().ACLTokenBySecret(secret)
		must.NoError(t, err)
		must.True(t, tok.IsManagement())
	}
	// The file is single use in effect: its index is no longer the last
	// bootstrap's.
	err = s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &reply)
	must.StrContains(t, structs.MessageOf(err), "Invalid bootstrap reset index")

	// A chosen secret must be a UUID.
	fresh := TestServer(t, func(c *Config) { c.ACLEnabled = true })
	WaitForLeader(t, fresh)
	err = fresh.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{BootstrapSecret: "not-a-uuid"}, &reply)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	idx, _ := fresh.State().ACLBootstrapIndex()
	must.Eq(t, uint64(0), idx, must.Sprint("nothing written"))
}

// TestACL_BootstrapRace: two servers bootstrap at once: one token is made,
// the other caller is told the reset index; the state holds one
// management token.
func TestACL_BootstrapRace(t *testing.T) {
	servers := TestCluster(t, 3, func(_ int, c *Config) { c.ACLEnabled = true })
	leader := WaitForLeader(t, servers...)
	fs := followers(servers, leader)
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = fs[i].RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{}, &structs.ACLTokenUpsertResponse{})
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
				continue
			}
			must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err), must.Sprint(err))
			must.StrContains(t, structs.MessageOf(err), "ACL bootstrap already done (reset index: ")
		}
		if round == 0 {
			must.Eq(t, 1, ok)
		} else {
			must.Eq(t, 0, ok)
		}
		iter, err := leader.State().ACLTokens(nil, "")
		must.NoError(t, err)
		n := 0
		for raw := iter.Next(); raw != nil; raw = iter.Next() {
			n++
		}
		must.Eq(t, 1, n)
	}
}

// TestACL_ForwardedRequestsCheckedTwice: a follower refuses what the token
// may not do without asking the leader, and the leader checks a forwarded
// request again (a follower's check is not trusted).
func TestACL_ForwardedRequestsCheckedTwice(t *testing.T) {
	servers := TestCluster(t, 3, func(_ int, c *Config) { c.ACLEnabled = true })
	leader := WaitForLeader(t, servers...)
	f := followers(servers, leader)[0]
	mgmt := bootstrap(t, f)
	reader := tokenWith(t, leader, mgmt, `namespace "default" { policy = "read" }`).SecretID
	waitForToken(t, f, reader)

	list := &structs.CSIVolumeListRequest{}
	list.AuthToken = reader
	must.NoError(t, f.RPC("CSIVolume.List", list, &structs.CSIVolumeListResponse{}))
	reg := &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{mock.CSIVolume("dev")}}
	reg.AuthToken = reader
	must.ErrorIs(t, f.RPC("CSIVolume.Register", reg, &structs.CSIVolumeRegisterResponse{}), structs.ErrPermissionDenied)

	// What a follower that let the request through would send.
	reg = &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{mock.CSIVolume("dev")}}
	reg.AuthToken = reader
	reg.SetForwarded()
	must.ErrorIs(t, leader.RPC("CSIVolume.Register", reg, &structs.CSIVolumeRegisterResponse{}), structs.ErrPermissionDenied)

	// A token the follower has not seen (garbage, or one it lags behind
	// on) is left to the leader, which refuses a garbage one.
	list.AuthToken = "garbage"
	must.ErrorIs(t, f.RPC("CSIVolume.List", list, &structs.CSIVolumeListResponse{}), structs.ErrTokenNotFound)
	// A stale read is the follower's own to decide.
	list.AllowStale = true
	must.ErrorIs(t, f.RPC("CSIVolume.List", list, &structs.CSIVolumeListResponse{}), structs.ErrTokenNotFound)
}

func waitForToken(t *testing.T, s *Server, secret string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() (bool, error) {
		tok, err := s.State().ACLTokenBySecret(secret)
		return tok != nil, err
	})
}

// TestACL_Resolver: expired tokens are refused; deleting a token or
// changing a policy ends what the cache knew at once.
func TestACL_Resolver(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	r := newACLResolver(time.Hour, time.Hour)

	req := &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{Type: structs.ACLManagementToken, ExpirationTTL: time.Minute}}}
	req.AuthToken = mgmt
	var reply structs.ACLTokenUpsertResponse
	must.NoError(t, s.RPC("ACL.UpsertTokens", req, &reply))
	expiring := reply.Tokens[0]
	must.NotNil(t, expiring.ExpirationTime)
	now := time.Now()
	id, err := r.resolve(s.State(), expiring.SecretID, now)
	must.NoError(t, err)
	must.True(t, id.acl.IsManagement())
	_, err = r.resolve(s.State(), expiring.SecretID, expiring.ExpirationTime.Add(time.Second))
	must.ErrorIs(t, err, structs.ErrTokenExpired)
	// Through the endpoints, once expired (the server's own clock): a token
	// made to expire in the past cannot be, so the resolver is the test.

	tok := tokenWith(t, s, mgmt, `namespace "default" { policy = "read" }`)
	id, err = r.resolve(s.State(), tok.SecretID, now)
	must.NoError(t, err)
	must.True(t, id.acl.AllowNamespaceOperation("default", acl.NamespaceCapabilityCSIReadVolume))
	cached, err := r.resolve(s.State(), tok.SecretID, now)
	must.NoError(t, err)
	must.True(t, cached == id, must.Sprint("a second resolution comes from the cache"))

	// A policy change reaches the next resolution.
	upd := &structs.ACLPolicyUpsertRequest{Policies: []*structs.ACLPolicy{{Name: tok.Policies[0], Rules: `namespace "default" { policy = "deny" }`}}}
	upd.AuthToken = mgmt
	must.NoError(t, s.RPC("ACL.UpsertPolicies", upd, &structs.GenericResponse{}))
	id, err = r.resolve(s.State(), tok.SecretID, now)
	must.NoError(t, err)
	must.False(t, id.acl.AllowNamespaceOperation("default", acl.NamespaceCapabilityCSIReadVolume))

	// A deleted token is gone at once.
	del := &structs.ACLTokenDeleteRequest{AccessorIDs: []string{tok.AccessorID}}
	del.AuthToken = mgmt
	must.NoError(t, s.RPC("ACL.DeleteTokens", del, &structs.GenericResponse{}))
	_, err = r.resolve(s.State(), tok.SecretID, now)
	must.ErrorIs(t, err, structs.ErrTokenNotFound)

	// The TTL bounds an entry's life even when nothing changes.
	short := newACLResolver(time.Millisecond, time.Millisecond)
	a, err := short.resolve(s.State(), mgmt, now)
	must.NoError(t, err)
	b, err := short.resolve(s.State(), mgmt, now.Add(time.Second))
	must.NoError(t, err)
	must.True(t, a != b)
}

// TestACL_BadInput: what an operator gets wrong is refused clearly, and
// nothing is written half.
func TestACL_BadInput(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	policies := func(ps ...*structs.ACLPolicy) error {
		req := &structs.ACLPolicyUpsertRequest{Policies: ps}
		req.AuthToken = mgmt
		return s.RPC("ACL.UpsertPolicies", req, &structs.GenericResponse{})
	}
	before, err := s.State().Index(state.TableACLPolicies)
	must.NoError(t, err)

	err = policies(&structs.ACLPolicy{Name: "good", Rules: `node { policy = "read" }`},
		&structs.ACLPolicy{Name: "bad", Rules: "namespace \"default\" {\n  policy = \"read\"\n  capabilities = [\"csi-wrte-volume\"]\n}"})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, structs.MessageOf(err), `line 3: namespace "default": unknown capability "csi-wrte-volume"`)
	err = policies(&structs.ACLPolicy{Name: "huge", Rules: `node { policy = "read" }` + "\n" + strings.Repeat("#", acl.MaxRulesBytes)})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, structs.MessageOf(err), "more than the limit")
	after, err := s.State().Index(state.TableACLPolicies)
	must.NoError(t, err)
	must.Eq(t, before, after, must.Sprint("no policy written"))
	good, err := s.State().ACLPolicyByName(nil, "good")
	must.NoError(t, err)
	must.Nil(t, good)

	tokens := func(ts ...*structs.ACLToken) error {
		req := &structs.ACLTokenUpsertRequest{Tokens: ts}
		req.AuthToken = mgmt
		return s.RPC("ACL.UpsertTokens", req, &structs.ACLTokenUpsertResponse{})
	}
	must.NoError(t, policies(&structs.ACLPolicy{Name: "readers", Rules: `node { policy = "read" }`}))
	err = tokens(&structs.ACLToken{Name: "ok", Type: structs.ACLClientToken, Policies: []string{"readers"}},
		&structs.ACLToken{Name: "bad", Type: structs.ACLClientToken, Policies: []string{"readers", "nope"}})
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
	must.StrContains(t, structs.MessageOf(err), `policy "nope" does not exist`)
	iter, err := s.State().ACLTokens(nil, "")
	must.NoError(t, err)
	n := 0
	for raw := iter.Next(); raw != nil; raw = iter.Next() {
		n++
	}
	must.Eq(t, 1, n, must.Sprint("only the bootstrap token"))
	for name, tok := range map[string]*structs.ACLToken{
		"unknown type":       {Type: "admin"},
		"management+policy":  {Type: structs.ACLManagementToken, Policies: []string{"readers"}},
		"client, no policy":  {Type: structs.ACLClientToken},
		"TTL below the min":  {Type: structs.ACLManagementToken, ExpirationTTL: time.Second},
		"TTL above the max":  {Type: structs.ACLManagementToken, ExpirationTTL: 48 * time.Hour},
		"unknown accessor":   {AccessorID: "nope", Type: structs.ACLManagementToken},
		"policy name spaces": {Type: structs.ACLClientToken, Policies: []string{"a b"}},
	} {
		err := tokens(tok)
		must.NotNil(t, err, must.Sprint(name))
		must.NotEq(t, structs.ErrCodeInternal, structs.CodeOf(err), must.Sprintf("%s: %v", name, err))
	}
}

// TestACL_NomadCapabilities pins the capabilities the operations Nomad
// guards take, as Nomad's: a read-only CSI token lists and reads volumes
// and nothing more.
func TestACL_NomadCapabilities(t *testing.T) {
	for method, want := range map[string][]string{
		"CSIVolume.Register":   {acl.NamespaceCapabilityCSIWriteVolume, "plugin:read"},
		"CSIVolume.Deregister": {acl.NamespaceCapabilityCSIWriteVolume},
		"CSIVolume.Detach":     {acl.NamespaceCapabilityCSIMountVolume, "plugin:read"},
		"CSIVolume.Delete":     {acl.NamespaceCapabilityCSIWriteVolume, "plugin:read"},
		"Job.Deregister":       {acl.NamespaceCapabilitySubmitJob},
		"Job.Register":         {acl.NamespaceCapabilitySubmitJob},
	} {
		var got []string
		for _, n := range ruleNeeds(aclRules[method], nil) {
			switch n.area {
			case areaNamespace:
				got = append(got, n.caps...)
			case areaPlugin:
				got = append(got, "plugin:"+n.level)
			}
		}
		must.SliceContainsAll(t, want, got, must.Sprint(method))
	}
	must.Eq(t, []aclNeed{operatorNeed(levelWrite)}, aclRules["Operator.RaftRemovePeer"].needs)

	// A job that mounts a CSI volume takes csi-mount-volume and plugin read.
	job := &structs.JobRegisterRequest{Job: &structs.Job{ID: "j", Namespace: "team", TaskGroups: []*structs.TaskGroup{{
		Name: "g", Volumes: map[string]*structs.VolumeRequest{"v": {Type: structs.VolumeTypeCSI, Source: "v"}}}}}}
	needs := ruleNeeds(aclRules["Job.Register"], job)
	must.Eq(t, []aclNeed{
		{area: areaNamespace, caps: []string{acl.NamespaceCapabilitySubmitJob}, ns: "team"},
		{area: areaNamespace, caps: []string{acl.NamespaceCapabilityCSIMountVolume}, ns: "team"},
		pluginNeed(levelRead),
	}, needs)

	// A job that runs a CSI plugin takes csi-register-plugin, as in Nomad.
	plugin := &structs.JobRegisterRequest{Job: &structs.Job{ID: "p", Namespace: "team", TaskGroups: []*structs.TaskGroup{{
		Name: "g", Tasks: []*structs.Task{{Name: "t", CSIPluginConfig: &structs.TaskCSIPluginConfig{ID: "dev"}}}}}}}
	must.Eq(t, []aclNeed{
		{area: areaNamespace, caps: []string{acl.NamespaceCapabilitySubmitJob}, ns: "team"},
		{area: areaNamespace, caps: []string{acl.NamespaceCapabilityCSIRegisterPlugin}, ns: "team"},
	}, ruleNeeds(aclRules["Job.Register"], plugin))
}

// TestACL_SecretsNeverInRaftLog: neither the secret of a token that made a
// write, nor a bootstrap's or a created token's secret, is in any Raft log
// entry: the log is on every server's disk.
func TestACL_SecretsNeverInRaftLog(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	const chosen = "6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b"
	reset := &structs.ACLTokenUpsertRequest{Tokens: []*structs.ACLToken{{Name: "t", Type: structs.ACLManagementToken}}}
	reset.AuthToken = mgmt
	var created structs.ACLTokenUpsertResponse
	must.NoError(t, s.RPC("ACL.UpsertTokens", reset, &created))
	registerNode(t, s, "dev")
	reg := &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{mock.CSIVolume("dev")}}
	reg.AuthToken = created.Tokens[0].SecretID
	must.NoError(t, s.RPC("CSIVolume.Register", reg, &structs.CSIVolumeRegisterResponse{}))
	// A second bootstrap, after a reset, with a chosen secret.
	done, err := s.State().ACLBootstrapIndex()
	must.NoError(t, err)
	path := BootstrapResetPath(s.config.DataDir)
	must.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	must.NoError(t, os.WriteFile(path, []byte(fmt.Sprint(done)), 0o600))
	must.NoError(t, s.RPC("ACL.Bootstrap", &structs.ACLTokenBootstrapRequest{BootstrapSecret: chosen}, &structs.ACLTokenUpsertResponse{}))

	first, err := s.raftStore.logs.FirstIndex()
	must.NoError(t, err)
	last, err := s.raftStore.logs.LastIndex()
	must.NoError(t, err)
	must.Greater(t, first, last)
	for i := first; i <= last; i++ {
		var l raft.Log
		must.NoError(t, s.raftStore.logs.GetLog(i, &l))
		for _, secret := range []string{mgmt, created.Tokens[0].SecretID, chosen} {
			must.False(t, bytes.Contains(l.Data, []byte(secret)), must.Sprintf("log entry %d holds a token's secret", i))
		}
	}
}
