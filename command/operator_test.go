package command

import (
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestOperatorRaftListPeers(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/operator/raft/configuration", 200, &structs.RaftConfigurationResponse{
		Servers: []*structs.RaftServer{
			{ID: "s1", Node: "server-1", Address: "10.0.0.1:4647", Leader: true, Voter: true, RaftProtocol: "3"},
			{ID: "s2", Node: "server-2", Address: "10.0.0.2:4647", Voter: true, RaftProtocol: "3"},
			{ID: "s3", Node: "server-3", Address: "10.0.0.3:4647", Voter: false, RaftProtocol: "3"},
		},
		Index: 12,
	})
	f.json("GET /v1/operator/security", 200, &structs.SecurityStatus{RPCTLS: true, NodeIntroRequired: true})

	r := run(t, "", "operator", "raft", "list-peers", "-stale", "-token=t0k")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `Node      ID  Address        State     Voter  RaftProtocol
server-1  s1  10.0.0.1:4647  leader    true   3
server-2  s2  10.0.0.2:4647  follower  true   3
server-3  s3  10.0.0.3:4647  follower  false  3
`, r.out)
	reqs := f.requests()
	must.Len(t, 2, reqs)
	must.Eq(t, request{Method: "GET", Path: "/v1/operator/raft/configuration", Query: "stale=true", Token: "t0k"}, reqs[0])
	must.Eq(t, request{Method: "GET", Path: "/v1/operator/security", Token: "t0k"}, reqs[1])
}

// An open cluster says so under its peers, with what anything on the
// network could do.
func TestOperatorRaftListPeers_OpenCluster(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/operator/raft/configuration", 200, &structs.RaftConfigurationResponse{
		Servers: []*structs.RaftServer{{ID: "s1", Node: "server-1", Address: "10.0.0.1:4647", Leader: true, Voter: true, RaftProtocol: "3"}},
	})
	f.json("GET /v1/operator/security", 200, &structs.SecurityStatus{Open: true,
		Warnings: []string{"RPC without TLS: any process ...", "open node registration: ..."}})
	r := run(t, "", "operator", "raft", "list-peers")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "\nSecurity: OPEN, no TLS and no node introduction required:\n  - RPC without TLS: any process ...\n  - open node registration: ...\n")
}

func TestOperatorRaftListPeers_NoLeader(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/operator/raft/configuration", 503, "no cluster leader")
	r := run(t, "", "operator", "raft", "list-peers")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error retrieving Raft configuration: no cluster leader\n", r.stderr)
}

func TestOperatorRaftRemovePeer(t *testing.T) {
	f := newFakeAgent(t)
	f.routes["DELETE /v1/operator/raft/peer"] = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("id") == "unknown" {
			http.Error(w, `no peer with id "unknown"`, http.StatusNotFound)
		}
	}

	r := run(t, "", "operator", "raft", "remove-peer", "-peer-id=s3")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Removed peer with id \"s3\"\n", r.out)
	must.Eq(t, request{Method: "DELETE", Path: "/v1/operator/raft/peer", Query: "id=s3"}, f.requests()[0])

	r = run(t, "", "operator", "raft", "remove-peer", "-peer-address=10.0.0.3:4647")
	must.Eq(t, 0, r.code)
	must.Eq(t, "Removed peer with address \"10.0.0.3:4647\"\n", r.out)
	must.Eq(t, "address=10.0.0.3%3A4647", f.requests()[1].Query)

	r = run(t, "", "operator", "raft", "remove-peer", "-peer-id=unknown")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error removing peer: no peer with id \"unknown\"\n", r.stderr)

	for _, args := range [][]string{{}, {"-peer-id=a", "-peer-address=b"}, {"-peer-id=a", "extra"}} {
		r = run(t, "", append([]string{"operator", "raft", "remove-peer"}, args...)...)
		must.Eq(t, 1, r.code)
		must.StrContains(t, r.stderr, "Usage: volplane operator raft remove-peer")
	}
	must.Len(t, 3, f.requests())
}
