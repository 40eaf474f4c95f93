package command

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestAgentInfo(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/agent/self", 200, &structs.AgentSelf{
		Member: &structs.AgentMember{Name: "s1.global"},
		Stats: map[string]map[string]string{
			"raft":  {"state": "Follower", "applied_index": "90", "commit_index": "97", "last_contact": "12ms"},
			"nomad": {"leader": "false", "server": "true"},
		},
	})
	r := run(t, "", "agent-info", "-token=t0k")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `nomad
  leader = false
  server = true
raft
  applied_index = 90
  commit_index = 97
  last_contact = 12ms
  state = Follower
`, r.out)
	must.Eq(t, request{Method: "GET", Path: "/v1/agent/self", Token: "t0k"}, f.requests()[0])

	r = run(t, "", "agent-info", "-t", "{{.Stats.raft.applied_index}}/{{.Stats.raft.commit_index}}")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "90/97\n", r.out)

	r = run(t, "", "agent-info", "extra")
	must.Eq(t, 1, r.code)
	must.StrHasPrefix(t, "This command takes no arguments", r.stderr)
}

func TestAgentInfo_Denied(t *testing.T) {
	f := newFakeAgent(t)
	f.text("GET /v1/agent/self", 403, "Permission denied")
	r := run(t, "", "agent-info")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying agent info: Permission denied\n", r.stderr)
}

func TestServerMembers(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/agent/members", 200, &structs.ServerMembers{ServerName: "s2.west", ServerRegion: "west", Members: []*structs.AgentMember{
		{Name: "s2.west", Addr: "10.0.0.2", Port: 4647, Status: "alive",
			Tags: map[string]string{"leader": "false", "raft_vsn": "3", "build": "volplane", "dc": "dc1", "region": "west"}},
		{Name: "s1.west", Addr: "10.0.0.1", Port: 4647, Status: "alive",
			Tags: map[string]string{"leader": "true", "raft_vsn": "3", "build": "volplane", "dc": "dc1", "region": "west"}},
	}})
	r := run(t, "", "server", "members")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `Name     Address   Port  Status  Leader  Raft Version  Build     Datacenter  Region
s1.west  10.0.0.1  4647  alive   true    3             volplane  dc1         west
s2.west  10.0.0.2  4647  alive   false   3             volplane  dc1         west
`, r.out)

	r = run(t, "", "server", "members", "-json")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, "\"Name\": \"s1.west\"")
}
