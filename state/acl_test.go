package state

import (
	"context"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const readRules = `namespace "default" { policy = "read" }`

func testPolicy(name string) *structs.ACLPolicy {
	return &structs.ACLPolicy{Name: name, Description: "test", Rules: readRules}
}

func testToken(accessor, secret string, policies ...string) *structs.ACLToken {
	typ := structs.ACLClientToken
	if len(policies) == 0 {
		typ = structs.ACLManagementToken
	}
	return &structs.ACLToken{AccessorID: accessor, Name: "t-" + accessor, Type: typ, Policies: policies,
		SecretHash: structs.HashACLSecret(secret), CreateTime: time.Unix(100, 0).UTC()}
}

// aclWorld has policies "readers" and "ops", a bootstrap token "boot", a
// client token "t1" with readers, a namespace "team" holding volume
// "team-vol" and job "team-job", and an empty namespace "empty".
func aclWorld(t *testing.T) *StateStore {
	t.Helper()
	s := TestStateStore(t)
	must.NoError(t, s.UpsertACLPolicies(10, []*structs.ACLPolicy{testPolicy("readers"), testPolicy("ops")}))
	must.NoError(t, s.BootstrapACLToken(11, 0, testToken("boot", "boot-secret")))
	must.NoError(t, s.UpsertACLTokens(12, []*structs.ACLToken{testToken("t1", "t1-secret", "readers")}))
	must.NoError(t, s.UpsertNamespaces(13, []*structs.Namespace{{Name: "team", Description: "a team"}, {Name: "empty"}}))
	must.NoError(t, s.UpsertNode(14, healthyNodePlugin("n1", "p")))
	v := testVolume("team-vol", "p")
	v.Namespace = "team"
	must.NoError(t, s.UpsertCSIVolume(15, []*structs.CSIVolume{v}))
	j := testJob("team-job")
	j.Namespace = "team"
	must.NoError(t, s.UpsertJob(16, 16, j))
	return s
}

// TestACLAuthority_RefusedWritesChangeNothing applies every ACL and
// namespace write the rules forbid directly to the store, as an unchecked
// Raft entry would be, and finds each refused with its code and the store
// unchanged.
func TestACLAuthority_RefusedWritesChangeNothing(t *testing.T) {
	const at = 1000
	cases := []struct {
		name  string
		write func(s *StateStore) error
		code  structs.ErrorCode
	}{
		{"policy that does not parse", func(s *StateStore) error {
			return s.UpsertACLPolicies(at, []*structs.ACLPolicy{testPolicy("good"),
				{Name: "bad", Rules: `namespace "a" { capabilities = ["csi-wrte-volume"] }`}})
		}, structs.ErrCodeInvalid},
		{"policy with a bad name", func(s *StateStore) error {
			return s.UpsertACLPolicies(at, []*structs.ACLPolicy{{Name: "a b", Rules: readRules}})
		}, structs.ErrCodeInvalid},
		{"no policies", func(s *StateStore) error { return s.UpsertACLPolicies(at, nil) }, structs.ErrCodeInvalid},
		{"delete an unknown policy", func(s *StateStore) error {
			return s.DeleteACLPolicies(at, []string{"ops", "nope"})
		}, structs.ErrCodeNotFound},
		{"token naming an unknown policy", func(s *StateStore) error {
			return s.UpsertACLTokens(at, []*structs.ACLToken{testToken("t2", "t2-secret", "readers", "nope")})
		}, structs.ErrCodeInvalid},
		{"token carrying its secret", func(s *StateStore) error {
			tok := testToken("t2", "t2-secret", "readers")
			tok.SecretID = "t2-secret"
			return s.UpsertACLTokens(at, []*structs.ACLToken{tok})
		}, structs.ErrCodeInvalid},
		{"new token without a hash", func(s *StateStore) error {
			tok := testToken("t2", "t2-secret", "readers")
			tok.SecretHash = nil
			return s.UpsertACLTokens(at, []*structs.ACLToken{tok})
		}, structs.ErrCodeInvalid},
		{"token reusing another's secret", func(s *StateStore) error {
			return s.UpsertACLTokens(at, []*structs.ACLToken{testToken("t2", "t1-secret", "readers")})
		}, structs.ErrCodeConflict},
		{"token changing its secret", func(s *StateStore) error {
			return s.UpsertACLTokens(at, []*structs.ACLToken{testToken("t1", "other-secret", "readers")})
		}, structs.ErrCodeInvalid},
		{"management token with policies", func(s *StateStore) error {
			tok := testToken("t2", "t2-secret", "readers")
			tok.Type = structs.ACLManagementToken
			return s.UpsertACLTokens(at, []*structs.ACLToken{tok})
		}, structs.ErrCodeInvalid},
		{"client token without policies", func(s *StateStore) error {
			tok := testToken("t2", "t2-secret")
			tok.Type = structs.ACLClientToken
			return s.UpsertACLTokens(at, []*structs.ACLToken{tok})
		}, structs.ErrCodeInvalid},
		{"delete an unknown token", func(s *StateStore) error {
			return s.DeleteACLTokens(at, []string{"t1", "nope"})
		}, structs.ErrCodeNotFound},
		{"second bootstrap", func(s *StateStore) error {
			return s.BootstrapACLToken(at, 0, testToken("boot2", "boot2-secret"))
		}, structs.ErrCodeInvalid},
		{"bootstrap with a stale reset index", func(s *StateStore) error {
			return s.BootstrapACLToken(at, 5, testToken("boot2", "boot2-secret"))
		}, structs.ErrCodeInvalid},
		{"bootstrap of a client token", func(s *StateStore) error {
			return s.BootstrapACLToken(at, 11, testToken("boot2", "boot2-secret", "readers"))
		}, structs.ErrCodeInvalid},
		{"namespace with a bad name", func(s *StateStore) error {
			return s.UpsertNamespaces(at, []*structs.Namespace{{Name: "ok"}, {Name: "not/ok"}})
		}, structs.ErrCodeInvalid},
		{"delete the default namespace", func(s *StateStore) error {
			return s.DeleteNamespaces(at, []string{structs.DefaultNamespace})
		}, structs.ErrCodeInvalid},
		{"delete a namespace holding volumes and jobs", func(s *StateStore) error {
			return s.DeleteNamespaces(at, []string{"empty", "team"})
		}, structs.ErrCodeConflict},
		{"delete an unknown namespace", func(s *StateStore) error {
			return s.DeleteNamespaces(at, []string{"nope"})
		}, structs.ErrCodeNotFound},
		{"volume in an unknown namespace", func(s *StateStore) error {
			v := testVolume("lost", "p")
			v.Namespace = "nope"
			return s.UpsertCSIVolume(at, []*structs.CSIVolume{v})
		}, structs.ErrCodeInvalid},
		{"job in an unknown namespace", func(s *StateStore) error {
			j := testJob("lost")
			j.Namespace = "nope"
			return s.UpsertJob(at, at, j)
		}, structs.ErrCodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := aclWorld(t)
			before := storeDump(t, s)
			latest, err := s.LatestIndex()
			must.NoError(t, err)

			err = tc.write(s)
			mustCode(t, err, tc.code)
			must.Eq(t, before, storeDump(t, s))
			after, err := s.LatestIndex()
			must.NoError(t, err)
			must.Eq(t, latest, after)
		})
	}
}

func TestACLAuthority_ErrorsNameWhatIsWrong(t *testing.T) {
	s := aclWorld(t)
	err := s.DeleteNamespaces(30, []string{"team"})
	must.ErrorContains(t, err, `namespace "team" still holds 1 volume (team-vol) and 1 job (team-job)`)
	err = s.BootstrapACLToken(30, 0, testToken("b", "b-secret"))
	must.Eq(t, "ACL bootstrap already done (reset index: 11)", structs.MessageOf(err))
	err = s.UpsertACLTokens(30, []*structs.ACLToken{testToken("t2", "t2-secret", "nope")})
	must.ErrorContains(t, err, `policy "nope" does not exist`)
	v := testVolume("lost", "p")
	v.Namespace = "nope"
	must.ErrorContains(t, s.UpsertCSIVolume(30, []*structs.CSIVolume{v}), `namespace "nope" does not exist`)
	err = s.UpsertACLPolicies(30, []*structs.ACLPolicy{{Name: "bad", Rules: "namespace \"a\" {\n  capabilities = [\"csi-wrte-volume\"]\n}"}})
	must.ErrorContains(t, err, `line 2: namespace "a": unknown capability "csi-wrte-volume"`)
}

func TestACLTokens_LookupAndUpdate(t *testing.T) {
	s := aclWorld(t)
	tok, err := s.ACLTokenBySecret("t1-secret")
	must.NoError(t, err)
	must.Eq(t, "t1", tok.AccessorID)
	must.True(t, tok.Global)
	tok, err = s.ACLTokenBySecret("wrong")
	must.NoError(t, err)
	must.Nil(t, tok)

	// An update keeps the hash, the times and the expiry; the same update
	// again writes nothing.
	upd := &structs.ACLToken{AccessorID: "t1", Name: "renamed", Type: structs.ACLClientToken, Policies: []string{"readers", "ops"}}
	must.NoError(t, s.UpsertACLTokens(30, []*structs.ACLToken{upd}))
	got, err := s.ACLTokenByAccessorID(nil, "t1")
	must.NoError(t, err)
	must.Eq(t, "renamed", got.Name)
	must.Eq(t, []string{"readers", "ops"}, got.Policies)
	must.Eq(t, structs.HashACLSecret("t1-secret"), got.SecretHash)
	must.Eq(t, time.Unix(100, 0).UTC(), got.CreateTime)
	must.Eq(t, uint64(12), got.CreateIndex)
	must.Eq(t, uint64(30), got.ModifyIndex)
	must.NoError(t, s.UpsertACLTokens(31, []*structs.ACLToken{upd}))
	mustIndex(t, s, TableACLTokens, 30)

	// A reset bootstrap: allowed with the index of the last one.
	done, err := s.ACLBootstrapIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(11), done)
	must.NoError(t, s.BootstrapACLToken(32, 11, testToken("boot2", "boot2-secret")))
	done, err = s.ACLBootstrapIndex()
	must.NoError(t, err)
	must.Eq(t, uint64(32), done)

	must.NoError(t, s.DeleteACLTokens(33, []string{"t1"}))
	tok, err = s.ACLTokenBySecret("t1-secret")
	must.NoError(t, err)
	must.Nil(t, tok)
}

func TestNamespaces_DefaultAlwaysExists(t *testing.T) {
	s := TestStateStore(t)
	def, err := s.NamespaceByName(nil, structs.DefaultNamespace)
	must.NoError(t, err)
	must.Eq(t, structs.DefaultNamespace, def.Name)
	must.NoError(t, s.UpsertNamespaces(10, []*structs.Namespace{{Name: "b"}, {Name: "a"}, {Name: "e"}}))
	all, err := s.Namespaces(nil, "")
	must.NoError(t, err)
	var names []string
	for _, n := range all {
		names = append(names, n.Name)
	}
	must.Eq(t, []string{"a", "b", "default", "e"}, names)
	some, err := s.Namespaces(nil, "de")
	must.NoError(t, err)
	must.Len(t, 1, some)

	// The default namespace's description may change; it is then stored.
	must.NoError(t, s.UpsertNamespaces(11, []*structs.Namespace{{Name: structs.DefaultNamespace, Description: "ours"}}))
	def, err = s.NamespaceByName(nil, structs.DefaultNamespace)
	must.NoError(t, err)
	must.Eq(t, "ours", def.Description)
	must.Eq(t, uint64(11), def.CreateIndex)

	must.NoError(t, s.DeleteNamespaces(12, []string{"a", "b"}))
	gone, err := s.NamespaceByName(nil, "a")
	must.NoError(t, err)
	must.Nil(t, gone)
}

func TestNodeBySecret(t *testing.T) {
	s := TestStateStore(t)
	n := testNode("n1")
	must.NoError(t, s.UpsertNode(10, n))
	got, err := s.NodeBySecret(n.SecretID)
	must.NoError(t, err)
	must.Eq(t, "n1", got.ID)
	for _, secret := range []string{"", "wrong"} {
		got, err = s.NodeBySecret(secret)
		must.NoError(t, err)
		must.Nil(t, got)
	}
	// Stored is the secret's hash, never the secret.
	stored, err := s.NodeByID(nil, "n1")
	must.NoError(t, err)
	must.Eq(t, "", stored.SecretID)
	must.Eq(t, structs.HashACLSecret(n.SecretID), stored.SecretHash)
	must.True(t, stored.SecretMatches(n.SecretID))
	must.False(t, stored.SecretMatches(""))

	// A registration again with the secret, or with its hash, is the
	// node's; with another secret it is refused.
	again := n.Copy()
	again.Name = "renamed"
	must.NoError(t, s.UpsertNode(11, again))
	again.HashSecret()
	must.NoError(t, s.UpsertNode(12, again))
	other := n.Copy()
	other.SecretID = "wrong"
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(s.UpsertNode(13, other)))

	// Two nodes with one secret: the secret names neither.
	twin := testNode("n2")
	twin.SecretID = n.SecretID
	must.NoError(t, s.UpsertNode(14, twin))
	got, err = s.NodeBySecret(n.SecretID)
	must.NoError(t, err)
	must.Nil(t, got)
}

// TestNodeRestore_HashesTheSecret: a snapshot of an older build holds each
// node's secret itself; the restored state holds its hash, and the node's
// calls still authenticate.
func TestNodeRestore_HashesTheSecret(t *testing.T) {
	s := TestStateStore(t)
	r, err := s.Restore()
	must.NoError(t, err)
	n := testNode("n1")
	secret := n.SecretID
	must.NoError(t, r.NodeRestore(n))
	must.NoError(t, r.Commit())
	got, err := s.NodeBySecret(secret)
	must.NoError(t, err)
	must.NotNil(t, got)
	must.Eq(t, "", got.SecretID)
	must.Eq(t, structs.HashACLSecret(secret), got.SecretHash)
}

func TestACLEvents_NoSecrets(t *testing.T) {
	s := TestStateStore(t)
	sub, err := s.Events().Subscribe([]string{TopicACLToken, TopicACLPolicy}, 0)
	must.NoError(t, err)
	defer sub.Close()
	must.NoError(t, s.UpsertACLPolicies(10, []*structs.ACLPolicy{testPolicy("readers")}))
	must.NoError(t, s.UpsertACLTokens(11, []*structs.ACLToken{testToken("t1", "t1-secret", "readers")}))
	must.NoError(t, s.DeleteACLTokens(12, []string{"t1"}))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var types []string
	for range 3 {
		ev, err := sub.Next(ctx)
		must.NoError(t, err)
		types = append(types, ev.Type)
		if tok, ok := ev.Payload.(*structs.ACLToken); ok {
			must.Eq(t, "", tok.SecretID)
			must.SliceEmpty(t, tok.SecretHash)
			must.Eq(t, "t1", ev.Key)
		}
	}
	must.Eq(t, []string{EventACLPolicyUpserted, EventACLTokenUpserted, EventACLTokenDeleted}, types)
}
