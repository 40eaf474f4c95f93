package command

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/cli"
	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/spec"
	"github.com/volplane/volplane/structs"
)

// unsetEnv removes the variables for the test (t.Setenv restores them).
func unsetEnv(t *testing.T, names ...string) {
	for _, n := range names {
		t.Setenv(n, "")
		must.NoError(t, os.Unsetenv(n))
	}
}

// Nomad users' environments carry over: NOMAD_ADDR, NOMAD_TOKEN,
// NOMAD_NAMESPACE and the TLS names are read when volplane's are unset, and
// volplane's win when both are set.
func TestNomadEnvFallbacks(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volumes", 200, stubs())
	unsetEnv(t, "VOLPLANE_ADDR", "VOLPLANE_TOKEN", "VOLPLANE_NAMESPACE", "VOLPLANE_CACERT")
	t.Setenv("NOMAD_ADDR", f.srv.URL)
	t.Setenv("NOMAD_TOKEN", "nomad-token")
	t.Setenv("NOMAD_NAMESPACE", "prod")

	r := run(t, "", "volume", "status")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, request{Method: "GET", Path: "/v1/volumes", Query: "namespace=prod&type=csi", Token: "nomad-token"}, r0(f))

	// VOLPLANE_* first.
	t.Setenv("VOLPLANE_ADDR", f.srv.URL)
	t.Setenv("NOMAD_ADDR", "http://"+closedAddress(t))
	t.Setenv("VOLPLANE_TOKEN", "volplane-token")
	t.Setenv("VOLPLANE_NAMESPACE", "dev")
	r = run(t, "", "volume", "status")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	reqs := f.requests()
	must.Eq(t, request{Method: "GET", Path: "/v1/volumes", Query: "namespace=dev&type=csi", Token: "volplane-token"}, reqs[len(reqs)-1])

	// The TLS settings: NOMAD_CACERT is read (and here fails, naming it).
	t.Setenv("NOMAD_CACERT", filepath.Join(t.TempDir(), "missing-ca.pem"))
	r = run(t, "", "volume", "status")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "reading the CA certificate")
	must.StrContains(t, r.stderr, "missing-ca.pem")
}

// Flags may follow the arguments, as Nomad's CLI takes them; "--" ends
// the flags.
func TestParse_FlagsAfterArguments(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volume/csi/database", 200, &structs.CSIVolume{ID: "database", Namespace: "prod", PluginID: "dev"})

	r := run(t, "", "volume", "status", "database", "-namespace", "prod", "-json")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.StrContains(t, r.out, `"ID": "database"`)
	must.Eq(t, request{Method: "GET", Path: "/v1/volume/csi/database", Query: "namespace=prod"}, r0(f))

	// A bad flag after the argument is still a usage error.
	r = run(t, "", "volume", "status", "database", "-bogus")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "flag provided but not defined: -bogus")

	// Two arguments around a flag are still two arguments.
	r = run(t, "", "volume", "status", "a", "-verbose", "b")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes at most one argument")

	cases := []struct {
		args      []string
		verbose   bool
		name      string
		remaining []string
	}{
		{[]string{"a", "-verbose", "b"}, true, "", []string{"a", "b"}},
		{[]string{"-name", "x", "a"}, false, "x", []string{"a"}},
		{[]string{"a", "-name=x", "-verbose"}, true, "x", []string{"a"}},
		{[]string{"a", "--", "-verbose", "b"}, false, "", []string{"a", "-verbose", "b"}},
		{[]string{"-", "-verbose"}, true, "", []string{"-"}},
		{nil, false, "", []string{}},
	}
	for _, tc := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		verbose := fs.Bool("verbose", false, "")
		name := fs.String("name", "", "")
		must.NoError(t, parseInterleaved(fs, tc.args), must.Sprint(tc.args))
		must.Eq(t, tc.verbose, *verbose, must.Sprint(tc.args))
		must.Eq(t, tc.name, *name, must.Sprint(tc.args))
		must.Eq(t, tc.remaining, fs.Args(), must.Sprint(tc.args))
	}
}

// -type csi is taken wherever Nomad's volume and plugin commands take it,
// and any other type is refused before anything is sent.
func TestTypeFlag(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volumes", 200, stubs())
	f.json("GET /v1/plugins", 200, []*structs.CSIPluginListStub{{ID: "dev", Provider: "dev.volplane"}})

	for _, args := range [][]string{
		{"volume", "status", "-type", "csi"},
		{"volume", "status", "-type=csi", "-verbose=false"},
		{"plugin", "status", "-type", "csi"},
	} {
		r := run(t, "", args...)
		must.Eq(t, 0, r.code, must.Sprint(args, r.stderr))
	}
	n := len(f.requests())
	for _, args := range [][]string{
		{"volume", "status", "-type", "host"},
		{"plugin", "status", "-type", "host"},
		{"volume", "delete", "-type", "host", "database"},
		{"volume", "init", "-type", "host"},
	} {
		r := run(t, "", args...)
		must.Eq(t, 1, r.code, must.Sprint(args))
		must.StrContains(t, r.stderr, `-type "host": volplane has CSI volumes and plugins only (-type csi)`, must.Sprint(args))
	}
	must.Len(t, n, f.requests())
}

// -t runs a Go template over the object as the API gives it (JSON names),
// on lists and on single objects; -json and -t do not go together.
func TestTemplateOutput(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volumes", 200, stubs())
	f.json("GET /v1/volume/csi/database", 200, &structs.CSIVolume{ID: "database", PluginID: "dev",
		Capacity: 10 << 30, Secrets: map[string]string{"password": "hunter2"}})
	f.json("GET /v1/plugins", 200, []*structs.CSIPluginListStub{{ID: "dev", ControllersHealthy: 1}})

	r := run(t, "", "volume", "status", "-t", `{{range .}}{{.ID}}/{{.CurrentReaders}} {{end}}`)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "database/0 reference-data/3 \n", r.out)

	// Flags after the ID, a number printed as the integer it is, and no
	// way to reach what the CLI never shows.
	r = run(t, "", "volume", "status", "database", "-t", `{{.ID}} {{.PluginID}} {{.Capacity}} {{.Secrets}}`)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "database dev 10737418240 <no value>\n", r.out)

	r = run(t, "", "plugin", "status", "-t", `{{range .}}{{sprig_upper .ID}}={{.ControllersHealthy}}{{end}}`)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "DEV=1\n", r.out)

	n := len(f.requests())
	r = run(t, "", "volume", "status", "-json", "-t", "{{.ID}}")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Both json and template formatting are not allowed")
	r = run(t, "", "volume", "status", "-t", "{{.ID")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Error parsing the template given with -t")
	must.Len(t, n, f.requests())

	r = run(t, "", "volume", "status", "database", "-t", "{{.ID.Nope}}")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Error formatting the data: ")
}

// volume init writes an example that parses, in HCL or JSON, and never
// overwrites a file.
func TestVolumeInit(t *testing.T) {
	t.Chdir(t.TempDir())

	r := run(t, "", "volume", "init")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Example volume specification written to volume.hcl\n", r.out)
	src, err := os.ReadFile("volume.hcl")
	must.NoError(t, err)
	vol, err := spec.ParseVolume("volume.hcl", src)
	must.NoError(t, err)
	must.Eq(t, "example", vol.ID)
	must.Eq(t, "dev", vol.PluginID)
	must.Len(t, 2, vol.RequestedCapabilities)

	r = run(t, "", "volume", "init", "-json")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Example volume specification written to volume.json\n", r.out)
	src, err = os.ReadFile("volume.json")
	must.NoError(t, err)
	fromJSON, err := spec.ParseVolume("volume.json", src)
	must.NoError(t, err)
	// The two examples are the same volume.
	must.Eq(t, vol, fromJSON)

	// An existing file is left as it is.
	must.NoError(t, os.WriteFile("volume.hcl", []byte("mine"), 0o644))
	r = run(t, "", "volume", "init")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Volume specification \"volume.hcl\" already exists\n", r.stderr)
	got, err := os.ReadFile("volume.hcl")
	must.NoError(t, err)
	must.Eq(t, "mine", string(got))

	r = run(t, "", "volume", "init", "other.hcl", "-type", "csi")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Example volume specification written to other.hcl\n", r.out)

	r = run(t, "", "volume", "init", "a", "b")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes no arguments or one: <filename>")
}

// An unknown command is named as such, with the nearest command and the
// commands of its level.
func TestUnknownCommand(t *testing.T) {
	r := run(t, "", "volum", "status")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Unknown command: volplane volum\nDid you mean \"volume\"?\n\nCommands:\n")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^\s+volume\s+Interact with CSI volumes$`), r.stderr)
	must.Eq(t, "", r.out)

	r = run(t, "", "volume", "stauts", "-json")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Unknown command: volplane volume stauts\nDid you mean \"volume status\"?\n")
	must.StrContains(t, r.stderr, "Subcommands of \"volume\":\n")
	must.RegexMatch(t, regexp.MustCompile(`(?m)^\s+init\s+Create an example volume specification file$`), r.stderr)

	// Nothing near: no guess.
	r = run(t, "", "operator", "raft", "zzzzzz")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "Unknown command: volplane operator raft zzzzzz\n\nSubcommands of \"operator raft\":\n")
	must.StrNotContains(t, r.stderr, "Did you mean")

	// Arguments of a command are not commands.
	must.Eq(t, 3, editDistance("kitten", "sitting"))
	_, unknown := unknownCommand([]string{"volume", "status", "anything"}, Commands(nil))
	must.False(t, unknown)

	// A group made only by deeper commands is known, and listed.
	cmds := map[string]cli.CommandFactory{
		"grp":          parent("grp", "A group", "A group."),
		"grp sub deep": func() (cli.Command, error) { return &VersionCommand{}, nil },
	}
	_, unknown = unknownCommand([]string{"grp", "sub"}, cmds)
	must.False(t, unknown)
	msg, unknown := unknownCommand([]string{"grp", "su"}, cmds)
	must.True(t, unknown)
	must.Eq(t, "Unknown command: volplane grp su\nDid you mean \"grp sub\"?\n\nSubcommands of \"grp\":\n    sub  ", msg)
}

// When no agent answers, the error says how to start one or point at one.
func TestNoAgentHint(t *testing.T) {
	addr := "http://" + closedAddress(t)
	r := run(t, "", "volume", "status", "-address", addr)
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error querying volumes: could not reach a volplane agent at "+addr+": connection refused\n"+
		"Is an agent running? Start one with `volplane agent -dev`, or point -address (or VOLPLANE_ADDR) at one.\n", r.stderr)

	// An agent that answers with an error gets no hint.
	f := newFakeAgent(t)
	f.text("GET /v1/volumes", 500, "boom")
	r = run(t, "", "volume", "status")
	must.Eq(t, 1, r.code)
	must.StrNotContains(t, r.stderr, "Is an agent running?")
}
