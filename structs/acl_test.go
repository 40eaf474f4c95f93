package structs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

func TestACLToken_Validate(t *testing.T) {
	for name, tc := range map[string]struct {
		tok  ACLToken
		want string
	}{
		"client":             {ACLToken{Type: ACLClientToken, Policies: []string{"a"}}, ""},
		"management":         {ACLToken{Type: ACLManagementToken, ExpirationTTL: time.Hour}, ""},
		"no type":            {ACLToken{}, `type "" must be "client" or "management"`},
		"client, no policy":  {ACLToken{Type: ACLClientToken}, "a client token needs at least one policy"},
		"management, policy": {ACLToken{Type: ACLManagementToken, Policies: []string{"a"}}, "a management token cannot have policies"},
		"bad policy name":    {ACLToken{Type: ACLClientToken, Policies: []string{"a/b"}}, `policy name "a/b"`},
		"long name":          {ACLToken{Type: ACLManagementToken, Name: strings.Repeat("n", MaxACLTokenName+1)}, "name is longer"},
		"short TTL":          {ACLToken{Type: ACLManagementToken, ExpirationTTL: time.Second}, "between 1m0s and 24h0m0s"},
		"negative TTL":       {ACLToken{Type: ACLManagementToken, ExpirationTTL: -time.Hour}, "must not be negative"},
		"too many policies": {ACLToken{Type: ACLClientToken, Policies: func() []string {
			p := make([]string, MaxACLTokenPolicies+1)
			for i := range p {
				p[i] = "p"
			}
			return p
		}()}, "more than the limit"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.tok.Validate()
			if tc.want == "" {
				must.NoError(t, err)
				return
			}
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			must.StrContains(t, MessageOf(err), tc.want)
		})
	}
}

func TestACLToken_NoSecretOutside(t *testing.T) {
	exp := time.Unix(100, 0).UTC()
	tok := &ACLToken{AccessorID: "a", SecretID: "the-secret", Type: ACLClientToken, Policies: []string{"p"},
		SecretHash: HashACLSecret("the-secret"), ExpirationTime: &exp}
	pub := tok.Public()
	must.Eq(t, "", pub.SecretID)
	must.SliceEmpty(t, pub.SecretHash)
	must.Eq(t, "the-secret", tok.SecretID, must.Sprint("Public copies"))
	js, err := json.Marshal(tok)
	must.NoError(t, err)
	must.StrNotContains(t, string(js), "SecretHash")
	stub, err := json.Marshal(tok.Stub())
	must.NoError(t, err)
	must.StrNotContains(t, string(stub), "the-secret")

	// The hash crosses the msgpack wire (into the Raft log), the secret
	// is kept out of it by the servers.
	inLog := tok.Copy()
	inLog.SecretID = ""
	var got ACLTokenUpsertRequest
	roundTrip(t, ACLTokenUpsertRequestType, &ACLTokenUpsertRequest{Tokens: []*ACLToken{inLog}}, &got)
	must.Eq(t, tok.SecretHash, got.Tokens[0].SecretHash)
	must.True(t, ACLSecretMatches("the-secret", got.Tokens[0].SecretHash))
	must.False(t, ACLSecretMatches("other", got.Tokens[0].SecretHash))

	must.True(t, tok.IsExpired(exp))
	must.False(t, tok.IsExpired(exp.Add(-time.Second)))
	must.False(t, (&ACLToken{}).IsExpired(exp))
}

func TestACLPolicy_Validate(t *testing.T) {
	must.NoError(t, (&ACLPolicy{Name: "readers", Rules: `node { policy = "read" }`}).Validate())
	err := (&ACLPolicy{Name: "bad name", Description: strings.Repeat("d", MaxACLPolicyDescription+1),
		Rules: "namespace \"a\" {\n  policy = \"raed\"\n}"}).Validate()
	must.Eq(t, ErrCodeInvalid, CodeOf(err))
	for _, want := range []string{`name "bad name"`, "description is longer", `rules: line 2: namespace "a": unknown policy "raed"`} {
		must.StrContains(t, MessageOf(err), want)
	}
}

func TestNamespace_Validate(t *testing.T) {
	must.NoError(t, (&Namespace{Name: "team-a", Meta: map[string]string{"k": "v"}}).Validate())
	for _, n := range []*Namespace{
		{Name: ""}, {Name: "a b"}, {Name: "*"}, {Name: strings.Repeat("n", 129)},
		{Name: "a", Description: strings.Repeat("d", MaxNamespaceDescription+1)},
		{Name: "a", Meta: map[string]string{"k": strings.Repeat("v", MaxNamespaceMetaBytes)}},
	} {
		must.Eq(t, ErrCodeInvalid, CodeOf(n.Validate()), must.Sprintf("%q", n.Name))
	}
}
