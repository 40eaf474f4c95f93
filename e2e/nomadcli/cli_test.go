package nomadcli

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/e2e"
	"github.com/volplane/volplane/testutil"
)

// A volume of the dev agent's plugin, in Nomad's volume specification
// format as Nomad's CLI reads it.
const nomadVolumeSpec = `id        = "%s"
name      = "%s"
type      = "csi"
plugin_id = "dev"

capacity_min = "1GiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`

// A job in Nomad's job specification format, using the volume "nvol".
const nomadJobSpec = `job "web" {
  datacenters = ["*"]
  type        = "service"

  group "app" {
    count = 1

    volume "data" {
      type            = "csi"
      source          = "nvol"
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }

    task "writer" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello && sleep 3600"]
      }

      volume_mount {
        volume      = "data"
        destination = "/data"
      }
    }
  }
}
`

func volumeSpec(id string) string { return strings.ReplaceAll(nomadVolumeSpec, "%s", id) }

// Nomad's CLI against `volplane agent -dev`: volumes, snapshots, plugins,
// nodes, jobs, allocations, the agent and the event stream. Each command
// must exit 0 without a panic; each failure names the command and shows
// its output.
func TestNomadCLI_DevAgent(t *testing.T) {
	needNomad(t)
	n := &nomad{addr: startDevAgent(t), dir: t.TempDir()}

	// Plugins and nodes.
	n.ok(t, "plugin", "status")
	n.ok(t, "plugin", "status", "-type", "csi")
	n.ok(t, "plugin", "status", "dev")
	n.ok(t, "plugin", "status", "-type", "csi", "dev")
	n.ok(t, "node", "status")
	var nodes []struct{ ID string }
	getJSON(t, n.addr, "", "/v1/nodes", &nodes)
	must.SliceNotEmpty(t, nodes)
	nodeID := nodes[0].ID
	n.ok(t, "node", "status", nodeID)

	// Volumes.
	n.ok(t, "volume", "create", n.write(t, "nvol.hcl", volumeSpec("nvol")))
	n.ok(t, "volume", "register", n.write(t, "reg.hcl", volumeSpec("reg")))
	n.ok(t, "volume", "status")
	n.ok(t, "volume", "status", "-type", "csi")
	n.ok(t, "volume", "status", "-verbose")
	out := n.ok(t, "volume", "status", "-json")
	must.StrContains(t, out, `"nvol"`)
	out = n.ok(t, "volume", "status", "-t", `{{range .}}{{.ID}} {{end}}`)
	must.StrContains(t, out, "nvol")
	n.ok(t, "volume", "status", "nvol")
	n.ok(t, "volume", "status", "-type", "csi", "nvol")
	n.ok(t, "volume", "deregister", "reg")

	// Snapshots.
	out = n.ok(t, "volume", "snapshot", "create", "nvol", "nightly")
	n.ok(t, "volume", "snapshot", "list", "-plugin", "dev")
	var snaps struct{ Snapshots []struct{ ID string } }
	getJSON(t, n.addr, "", "/v1/volumes/snapshot?plugin_id=dev", &snaps)
	if len(snaps.Snapshots) == 0 {
		t.Errorf("no snapshot of plugin dev after snapshot create:\n%s", out)
	} else {
		n.ok(t, "volume", "snapshot", "delete", "dev", snaps.Snapshots[0].ID)
	}

	// Jobs and allocations.
	job := n.write(t, "web.nomad.hcl", nomadJobSpec)
	n.ok(t, "job", "validate", job)
	n.ok(t, "job", "run", "-detach", job)
	n.ok(t, "job", "run", job)
	n.ok(t, "job", "status")
	n.ok(t, "job", "status", "web")
	n.ok(t, "job", "inspect", "web")
	// An unchanged job: plan's exit code 0 means nothing would change.
	n.ok(t, "job", "plan", job)
	// The commands go on after a failure, so that one run lists every
	// command that fails.
	var allocs []struct{ ID string }
	getJSON(t, n.addr, "", "/v1/job/web/allocations", &allocs)
	if len(allocs) == 0 {
		t.Errorf("job web has no allocations: alloc status not run")
	} else {
		n.ok(t, "alloc", "status", allocs[0].ID)
	}
	n.ok(t, "job", "stop", "-yes", "web")
	// Once the claim is released, detach has nothing left to do on the
	// node and says so with exit 0.
	var last result
	if !waitFor(time.Minute, func() bool {
		last = n.run(t, "volume", "detach", "nvol", nodeID)
		return last.code == 0 && !last.panicked()
	}) {
		t.Errorf("%s", last)
	}
	n.ok(t, "volume", "delete", "nvol")

	// The agent and the cluster.
	n.ok(t, "server", "members")
	// agent-info shows Raft's own stats, as Nomad's does.
	if out := n.ok(t, "agent-info"); !strings.Contains(out, "applied_index") || !strings.Contains(out, "state = Leader") {
		t.Errorf("nomad agent-info: no Raft stats in:\n%s", out)
	}
	n.ok(t, "operator", "raft", "list-peers")
	n.ok(t, "system", "gc")
	// Nomad's metrics command reads the JSON and the Prometheus text; the
	// Raft figures are there under volplane's name.
	// -pretty asks the agent to indent (?pretty).
	if out := n.ok(t, "operator", "metrics", "-pretty"); !strings.Contains(out, `"Name": "volplane_raft_commitTime"`) {
		t.Errorf("nomad operator metrics -pretty: no indented volplane_raft_commitTime sample in:\n%s", out)
	}
	if out := n.ok(t, "operator", "metrics", "-format", "prometheus"); !strings.Contains(out, "volplane_raft_entry_requests_count{kind=\"register\"}") {
		t.Errorf("nomad operator metrics -format prometheus: no volplane_raft_entry_requests in:\n%s", out)
	}

	// Events, through the API command: the stream does not end by itself,
	// so it is read until an event of the volume registered here came, then
	// interrupted as Ctrl-C does.
	n.ok(t, "volume", "register", n.write(t, "ev.hcl", volumeSpec("ev")))
	streamEvents(t, n, "/v1/event/stream?topic=CSIVolume&index=1", `"ev"`)
}

// Nomad's ACL commands against a dev agent with ACLs on.
func TestNomadCLI_ACL(t *testing.T) {
	needNomad(t)
	n := &nomad{addr: startDevAgent(t, "-acl-enabled"), dir: t.TempDir()}

	n.token = strings.TrimSpace(n.ok(t, "acl", "bootstrap", "-t", "{{.SecretID}}"))
	must.NotEq(t, "", n.token)
	rules := n.write(t, "csi-read.hcl", "namespace \"default\" {\n  policy = \"read\"\n  capabilities = [\"csi-list-volume\"]\n}\nplugin {\n  policy = \"read\"\n}\n")
	n.ok(t, "acl", "policy", "apply", "-description", "read CSI volumes", "csi-read", rules)
	n.ok(t, "acl", "policy", "list")
	n.ok(t, "acl", "policy", "info", "csi-read")
	accessor := strings.TrimSpace(n.ok(t, "acl", "token", "create", "-name", "reader", "-policy", "csi-read", "-t", "{{.AccessorID}}"))
	must.NotEq(t, "", accessor)
	n.ok(t, "acl", "token", "list")
	n.ok(t, "acl", "token", "info", accessor)
	n.ok(t, "acl", "token", "self")
	n.ok(t, "acl", "token", "update", "-name", "reader-2", accessor)
	n.ok(t, "acl", "token", "delete", accessor)
	n.ok(t, "acl", "policy", "delete", "csi-read")
}

// Nomad's operator and server commands against a 3-server cluster,
// remove-peer of a server that was killed included.
func TestNomadCLI_Cluster(t *testing.T) {
	needNomad(t)
	c := e2e.NewProcessCluster(t, e2e.ProcessConfig{Servers: 3})
	leader := e2e.WaitForLeader(t, c)
	n := &nomad{addr: leader.HTTPAddr(), dir: t.TempDir()}

	n.ok(t, "operator", "raft", "list-peers")
	n.ok(t, "server", "members")
	n.ok(t, "agent-info")
	n.ok(t, "volume", "status")
	n.ok(t, "plugin", "status")
	n.ok(t, "node", "status")

	// A follower dies for good; it is removed by its Raft ID, as an
	// operator does (Nomad 1.10's remove-peer takes -peer-id only).
	victim := e2e.Followers(c, leader)[0]
	var conf struct {
		Servers []struct{ ID, Address string }
	}
	getJSON(t, n.addr, "", "/v1/operator/raft/configuration", &conf)
	peerID := ""
	for _, s := range conf.Servers {
		if s.Address == victim.RPCAddr() {
			peerID = s.ID
		}
	}
	must.NotEq(t, "", peerID, must.Sprintf("no peer at %s in %+v", victim.RPCAddr(), conf))
	c.Kill(t, victim)
	n.ok(t, "operator", "raft", "remove-peer", "-peer-id", peerID)
	out := n.ok(t, "operator", "raft", "list-peers")
	must.StrNotContains(t, out, victim.RPCAddr())
}

// streamEvents runs `nomad operator api path` until its output contains
// want, then interrupts it; the CLI must not have panicked.
func streamEvents(t *testing.T, n *nomad, path, want string) {
	t.Helper()
	out := &testutil.Buffer{}
	cmd := n.command(path)
	cmd.Stdout, cmd.Stderr = out, out
	must.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		select {
		case err := <-exited:
			t.Fatalf("nomad operator api %s exited (%v) before an event came:\n%s", path, err, out.String())
		default:
		}
		return strings.Contains(out.String(), want), errorOf(result{args: []string{"operator", "api", path}, output: out.String()})
	})
	must.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	must.False(t, result{output: out.String()}.panicked(), must.Sprint(out.String()))
}

// waitFor polls cond every 250 ms until it holds or the timeout passes, and
// reports whether it held; unlike testutil.WaitForResult it does not end
// the test, so the commands after it still run.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// errorOf turns a result into the error WaitForResult reports last.
func errorOf(r result) error {
	return &resultError{r}
}

type resultError struct{ r result }

func (e *resultError) Error() string { return e.r.String() }

// command is `nomad operator api path` ready to start, with the CLI's
// environment.
func (n *nomad) command(path string) *exec.Cmd {
	cmd := exec.Command(nomadBin, "operator", "api", path)
	cmd.Dir = n.dir
	cmd.Env = append(cleanEnv(), "NOMAD_ADDR="+n.addr)
	if n.token != "" {
		cmd.Env = append(cmd.Env, "NOMAD_TOKEN="+n.token)
	}
	return cmd
}
