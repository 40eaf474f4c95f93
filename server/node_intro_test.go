package server

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

const configIntroSecret = "static-intro-secret-0123456789"

func register(s *Server, n *structs.Node, token string) error {
	var reply structs.NodeUpdateResponse
	return s.RPC("Node.Register", &structs.NodeRegisterRequest{Node: n, IntroToken: token}, &reply)
}

func createIntro(t *testing.T, s *Server, req structs.NodeIntroCreateRequest) *structs.NodeIntroCreateResponse {
	t.Helper()
	var reply structs.NodeIntroCreateResponse
	must.NoError(t, s.RPC("Operator.NodeIntroCreate", &req, &reply))
	must.NotEq(t, "", reply.SecretID)
	must.Nil(t, reply.Token.SecretHash)
	return &reply
}

func mustDeny(t *testing.T, err error, msg string) {
	t.Helper()
	must.Error(t, err)
	must.Eq(t, structs.ErrCodePermissionDenied, structs.CodeOf(err), must.Sprint(err))
	must.StrContains(t, err.Error(), msg)
}

func TestNodeIntro_Required(t *testing.T) {
	s := TestServer(t, func(c *Config) {
		c.NodeIntroRequired = true
		c.NodeIntroTokens = []string{configIntroSecret}
	})
	WaitForLeader(t, s)

	n := mock.Node("dev")
	mustDeny(t, register(s, n, ""), "requires a node introduction token")
	mustDeny(t, register(s, n, "guess"), "unknown node introduction token")
	got, err := s.State().NodeByID(nil, n.ID)
	must.NoError(t, err)
	must.Nil(t, got)

	// A token from the configuration lets it in, and a re-registration
	// (an agent restart) needs only the node's secret.
	must.NoError(t, register(s, n, configIntroSecret))
	must.NoError(t, register(s, n, ""))
	got, err = s.State().NodeByID(nil, n.ID)
	must.NoError(t, err)
	must.Eq(t, structs.NodeIntroducedByToken, got.IntroducedBy)

	// A client cannot claim to have been introduced.
	forged := mock.Node("dev")
	forged.IntroducedBy = structs.NodeIntroducedByTLS
	mustDeny(t, register(s, forged, ""), "requires a node introduction token")
}

func TestNodeIntro_RaftTokens(t *testing.T) {
	s := TestServer(t, func(c *Config) { c.NodeIntroRequired = true })
	WaitForLeader(t, s)

	once := createIntro(t, s, structs.NodeIntroCreateRequest{Name: "rack 4", SingleUse: true})
	n1, n2 := mock.Node("dev"), mock.Node("dev")
	must.NoError(t, register(s, n1, once.SecretID))
	mustDeny(t, register(s, n2, once.SecretID), "was already used by node")

	// The token is listed, used, and never with its hash or secret.
	var list structs.NodeIntroListResponse
	must.NoError(t, s.RPC("Operator.NodeIntroList", &structs.NodeIntroListRequest{}, &list))
	must.SliceLen(t, 1, list.Tokens)
	must.Eq(t, n1.ID, list.Tokens[0].UsedBy)
	must.Nil(t, list.Tokens[0].SecretHash)
	stored, err := s.State().NodeIntroTokenByAccessor(nil, once.Token.AccessorID)
	must.NoError(t, err)
	must.Eq(t, structs.HashIntroSecret(once.SecretID), stored.SecretHash)

	// A revoked token lets nobody in.
	multi := createIntro(t, s, structs.NodeIntroCreateRequest{Name: "fleet"})
	var gen structs.GenericResponse
	must.NoError(t, s.RPC("Operator.NodeIntroDelete", &structs.NodeIntroDeleteRequest{AccessorIDs: []string{multi.Token.AccessorID}}, &gen))
	mustDeny(t, register(s, n2, multi.SecretID), "unknown node introduction token")
	err = s.RPC("Operator.NodeIntroDelete", &structs.NodeIntroDeleteRequest{AccessorIDs: []string{multi.Token.AccessorID}}, &gen)
	must.Eq(t, structs.ErrCodeNotFound, structs.CodeOf(err))

	// An expired token neither.
	short := createIntro(t, s, structs.NodeIntroCreateRequest{TTL: time.Millisecond})
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		return time.Now().After(short.Token.ExpirationTime), nil
	})
	mustDeny(t, register(s, n2, short.SecretID), "expired at")

	// Bad requests say what is wrong.
	var bad structs.NodeIntroCreateResponse
	err = s.RPC("Operator.NodeIntroCreate", &structs.NodeIntroCreateRequest{TTL: -time.Second}, &bad)
	must.Eq(t, structs.ErrCodeInvalid, structs.CodeOf(err))
}

// The FSM checks the token again: a single-use token that two
// registrations both passed on the leader introduces one node only.
func TestNodeIntro_FSMRefusesSecondUse(t *testing.T) {
	s := TestServer(t, func(c *Config) { c.NodeIntroRequired = true })
	WaitForLeader(t, s)
	once := createIntro(t, s, structs.NodeIntroCreateRequest{SingleUse: true})

	now := time.Now().UnixNano()
	n1, n2 := mock.Node("dev"), mock.Node("dev")
	n1.StatusUpdatedAt, n2.StatusUpdatedAt = now, now
	_, _, err := s.raftApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n1, IntroAccessorID: once.Token.AccessorID})
	must.NoError(t, err)
	_, _, err = s.raftApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n2, IntroAccessorID: once.Token.AccessorID})
	mustDeny(t, err, "already used")
	got, err := s.State().NodeByID(nil, n2.ID)
	must.NoError(t, err)
	must.Nil(t, got)
}

func TestNode_ExternalNodeIDUnique(t *testing.T) {
	s := TestServer(t, nil)
	WaitForLeader(t, s)
	n1, n2 := mock.Node("dev"), mock.Node("dev")
	n2.CSINodePlugins["dev"].NodeInfo.ID = n1.CSINodePlugins["dev"].NodeInfo.ID
	must.NoError(t, register(s, n1, ""))
	err := register(s, n2, "")
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err), must.Sprint(err))
	must.StrContains(t, err.Error(), n1.ID)

	// Nor by a later fingerprint.
	n3 := mock.Node("dev")
	must.NoError(t, register(s, n3, ""))
	var resp structs.NodeUpdateResponse
	info := mock.NodeInfo("dev", n1.ID, true)
	err = s.RPC("Node.UpdateStatus", &structs.NodeUpdateStatusRequest{NodeID: n3.ID, SecretID: n3.SecretID,
		Status: structs.NodeStatusReady, CSINodePlugins: map[string]*structs.CSIInfo{"dev": info}}, &resp)
	must.Eq(t, structs.ErrCodeConflict, structs.CodeOf(err), must.Sprint(err))
}

// In a secured cluster, controller calls skip a node that was never
// introduced (it registered while the cluster was open).
func TestControllerCandidates_OnlyIntroduced(t *testing.T) {
	s := TestServer(t, func(c *Config) {
		c.NodeIntroRequired = true
		c.NodeIntroTokens = []string{configIntroSecret}
	})
	WaitForLeader(t, s)
	old := mock.NodeWithController("dev")
	old.StatusUpdatedAt = time.Now().UnixNano()
	_, _, err := s.raftApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: old})
	must.NoError(t, err)

	_, err = s.ControllerNodes("dev")
	must.Eq(t, structs.ErrCodeUnschedulable, structs.CodeOf(err))
	must.StrContains(t, err.Error(), "never introduced")

	fresh := mock.NodeWithController("dev")
	must.NoError(t, register(s, fresh, configIntroSecret))
	got, err := s.ControllerNodes("dev")
	must.NoError(t, err)
	must.Eq(t, []string{fresh.ID}, got)
}
