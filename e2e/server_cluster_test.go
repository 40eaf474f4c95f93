package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
	"github.com/volplane/volplane/testutil"
)

// TestE2E_ServerCluster registers volumes through a follower of a 3-server
// cluster, crashes the leader, reads everything back from each survivor,
// writes once more, and brings the crashed server back until it has caught
// up.
func TestE2E_ServerCluster(t *testing.T) {
	t.Parallel()
	c := NewProcessCluster(t, ProcessConfig{Servers: 3})
	testServerCluster(t, c)
}

const clusterVolumes = 20

func testServerCluster(t *testing.T, c Cluster) {
	leader := WaitForLeader(t, c)
	followers := Followers(c, leader)
	must.SliceLen(t, 2, followers)

	// Two client nodes fingerprint the plugin; a follower forwards the
	// registrations to the leader.
	registerNodes(t, c, followers[0], 2, "dev")
	checkPluginHealthy(t, followers[1], "dev", 2)

	secret := newSecret(t)
	dir := t.TempDir()
	var ids []string
	for i := range clusterVolumes {
		id := fmt.Sprintf("vol-%02d", i)
		ids = append(ids, id)
		res := c.CLI(t, followers[i%2], "volume register", writeVolumeSpec(t, dir, id, secret))
		must.Zero(t, res.Code, must.Sprint(res))
		must.StrContains(t, res.Stdout, id)
		noSecret(t, secret, "volume register", res.Stdout+res.Stderr)
	}
	res := c.CLI(t, followers[0], "volume status")
	must.Zero(t, res.Code, must.Sprint(res))
	noSecret(t, secret, "volume status", res.Stdout+res.Stderr)
	must.Eq(t, ids, firstColumn(tableRows(res.Stdout)), must.Sprint(res))

	// Crash the leader: the survivors elect one of themselves and still
	// have every volume.
	c.Kill(t, leader)
	crashed := leader
	leader = WaitForLeader(t, c)
	must.NotEq(t, crashed.Name(), leader.Name())
	survivors := c.Running()
	must.SliceLen(t, 2, survivors)
	for _, s := range survivors {
		for _, id := range ids {
			res := c.CLI(t, s, "volume status", "-json", id)
			must.Zero(t, res.Code, must.Sprint(res))
			noSecret(t, secret, "volume status -json "+id, res.Stdout+res.Stderr)
			var vol structs.CSIVolume
			must.NoError(t, json.Unmarshal([]byte(res.Stdout), &vol), must.Sprint(res))
			checkVolume(t, "CLI on "+s.Name(), id, &vol)

			checkVolume(t, "HTTP on "+s.Name(), id, getVolume(t, s, id, "", secret))
		}
	}

	// A write after the failover, through a follower of the new leader.
	extra := "vol-after-failover"
	res = c.CLI(t, Followers(c, leader)[0], "volume register", writeVolumeSpec(t, dir, extra, secret))
	must.Zero(t, res.Code, must.Sprint(res))

	// The crashed server comes back with its data dir, rejoins as a voter
	// and catches up on the write it missed.
	c.Restart(t, crashed)
	leader = WaitForLeader(t, c)
	for _, s := range []Server{crashed, leader} {
		var res CLIResult
		testutil.WaitForResult(t, leaderTimeout, func() (bool, error) {
			res = c.CLI(t, s, "operator raft list-peers")
			if res.Code != 0 {
				return false, fmt.Errorf("%s", res)
			}
			return checkPeers(res.Stdout, c.Servers())
		})
		t.Logf("operator raft list-peers on %s:\n%s", s.Name(), res.Stdout)
	}
	checkVolume(t, "stale read on "+crashed.Name(), extra, waitVolume(t, crashed, extra, secret))
	stale, _ := volumeList(t, crashed, "?stale")
	must.Eq(t, append(slices.Clone(ids), extra), stale)

	for name, log := range c.Logs(t) {
		noSecret(t, secret, "the log of "+name, log)
	}
}

func firstColumn(rows [][]string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r[0])
	}
	return out
}

// checkPeers checks the output of `operator raft list-peers`: every server
// (the restarted one included) is a voter, and one of them is the leader.
func checkPeers(out string, servers []Server) (bool, error) {
	// Node, ID, Address, State, Voter, RaftProtocol.
	rows := tableRows(out)
	voters, leaders := map[string]bool{}, 0
	for _, r := range rows {
		if len(r) != 6 {
			return false, fmt.Errorf("unexpected row %q in:\n%s", r, out)
		}
		if r[4] == "true" {
			voters[r[2]] = true
		}
		if r[3] == "leader" {
			leaders++
		}
	}
	if len(rows) != len(servers) || len(voters) != len(servers) || leaders != 1 {
		return false, fmt.Errorf("want %d voters, one the leader:\n%s", len(servers), out)
	}
	for _, s := range servers {
		if !voters[s.RPCAddr()] {
			return false, fmt.Errorf("%s (%s) is not a voter:\n%s", s.Name(), s.RPCAddr(), out)
		}
	}
	return true, nil
}
