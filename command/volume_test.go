package command

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const specHCL = `
id        = "database"
name      = "db"
type      = "csi"
plugin_id = "dev"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime"]
}

secrets {
  password = "hunter2"
}
`

func writeFile(t *testing.T, name, content string) string {
	path := filepath.Join(t.TempDir(), name)
	must.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestVolumeRegister(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/volume/csi/database", 200, map[string]any{"Warnings": "plugin \"dev\" has no healthy nodes\n", "Index": 11})
	path := writeFile(t, "vol.hcl", specHCL)

	r := run(t, "", "volume", "register", "-token=s3cret", "-namespace=prod", path)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Volume \"database\" registered\n", r.out)
	must.Eq(t, "Warning: plugin \"dev\" has no healthy nodes\n", r.stderr)

	reqs := f.requests()
	must.Len(t, 1, reqs)
	must.Eq(t, "PUT", reqs[0].Method)
	must.Eq(t, "/v1/volume/csi/database", reqs[0].Path)
	must.Eq(t, "namespace=prod", reqs[0].Query)
	must.Eq(t, "s3cret", reqs[0].Token)
	var body struct{ Volumes []*structs.CSIVolume }
	must.NoError(t, json.Unmarshal([]byte(reqs[0].Body), &body))
	must.Len(t, 1, body.Volumes)
	v := body.Volumes[0]
	must.Eq(t, "database", v.ID)
	must.Eq(t, "db", v.Name)
	must.Eq(t, "dev", v.PluginID)
	must.Eq(t, []*structs.CSIVolumeCapability{{AccessMode: "single-node-writer", AttachmentMode: "file-system"}}, v.RequestedCapabilities)
	// The spec's secrets and mount flags go to the server, which needs them.
	must.Eq(t, structs.CSISecrets{"password": "hunter2"}, v.Secrets)
	must.Eq(t, &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime"}}, v.MountOptions)
}

func TestVolumeRegister_Stdin(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/volume/csi/scratch", 200, map[string]any{})

	r := run(t, `{"ID": "scratch", "PluginID": "dev"}`, "volume", "register", "-")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Volume \"scratch\" registered\n", r.out)
	must.Eq(t, "", r.stderr)
	must.Eq(t, `{"Volumes":[{"ID":"scratch"`, r0(f).Body[:len(`{"Volumes":[{"ID":"scratch"`)])
}

func r0(f *fakeAgent) request {
	reqs := f.requests()
	must.Len(f.t, 1, reqs)
	return reqs[0]
}

func TestVolumeRegister_Errors(t *testing.T) {
	f := newFakeAgent(t)
	f.text("PUT /v1/volume/csi/database", 400, `volume "database" validation failed: missing plugin id`)
	good := writeFile(t, "vol.hcl", specHCL)
	bad := writeFile(t, "bad.hcl", "id = \"v\"\ntype = \"nfs\"\n")

	cases := []struct {
		name   string
		stdin  string
		args   []string
		stderr []string
	}{
		{name: "server refuses", args: []string{good},
			stderr: []string{`Error registering volume: volume "database" validation failed: missing plugin id` + "\n"}},
		{name: "bad spec", args: []string{bad},
			stderr: []string{"Error parsing volume specification: " + bad + ":2:8: Unsupported volume type"}},
		{name: "bad stdin", stdin: "foo = 1\n", args: []string{"-"},
			stderr: []string{"Error parsing volume specification: <stdin>:1:1: ", "<stdin>:1:1: Unsupported argument: An argument named \"foo\""}},
		{name: "missing file", args: []string{filepath.Join(t.TempDir(), "nope.hcl")},
			stderr: []string{"Error reading volume specification: open ", "no such file or directory"}},
		{name: "no file", args: nil, stderr: []string{"This command takes one argument: <file>", "Usage: volplane volume register"}},
		{name: "bad flag", args: []string{"-nope", good}, stderr: []string{"Error parsing arguments: flag provided but not defined: -nope", "Usage: volplane volume register"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.stdin, append([]string{"volume", "register"}, tc.args...)...)
			must.Eq(t, 1, r.code)
			must.Eq(t, "", r.out)
			for _, s := range tc.stderr {
				must.StrContains(t, r.stderr, s)
			}
		})
	}
	// Only the "server refuses" case reached the server.
	must.Len(t, 1, f.requests())
}

func TestVolumeDeregister(t *testing.T) {
	f := newFakeAgent(t)
	f.json("DELETE /v1/volume/csi/database", 200, map[string]any{"Warnings": "claims of terminal allocations were dropped"})
	f.text("DELETE /v1/volume/csi/busy", 409, `volume "busy" is in use by allocation "a1"`)

	r := run(t, "", "volume", "deregister", "-force", "database")
	must.Eq(t, 0, r.code)
	// The volume is read first, for its claims; unknown here.
	must.Eq(t, "==> T: Deregistering volume \"database\" with -force\n"+
		"    T: Removing the volume and its claims from the servers' state; no node or controller is asked to unpublish it\n"+
		"Successfully deregistered volume \"database\"\n", stamped(r.out))
	must.Eq(t, "Warning: claims of terminal allocations were dropped\n", r.stderr)
	must.Eq(t, request{Method: "DELETE", Path: "/v1/volume/csi/database", Query: "force=true"}, f.requests()[1])

	r = run(t, "", "volume", "deregister", "busy")
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error deregistering volume: volume \"busy\" is in use by allocation \"a1\"\n", r.stderr)
	must.Eq(t, "", f.requests()[2].Query)

	r = run(t, "", "volume", "deregister")
	must.Eq(t, 1, r.code)
	must.StrContains(t, r.stderr, "This command takes one argument: <id>")
	must.StrContains(t, r.stderr, "-force")
}

func stubs() []*structs.CSIVolListStub {
	return []*structs.CSIVolListStub{
		{ID: "database", Name: "db", PluginID: "dev", Schedulable: true, AccessMode: "single-node-writer", CurrentWriters: 1},
		{ID: "reference-data", Name: "reference data", PluginID: "dev", CurrentReaders: 3, PastClaims: 1},
	}
}

func TestVolumeStatus_List(t *testing.T) {
	f := newFakeAgent(t)
	f.json("GET /v1/volumes", 200, stubs())

	r := run(t, "", "volume", "status")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, `ID              Name            Plugin ID  Schedulable  Access Mode         Readers  Writers  Past Claims
database        db              dev        true         single-node-writer  0        1        0
reference-data  reference data  dev        false        <none>              3        0        1
`, r.out)
	must.Eq(t, request{Method: "GET", Path: "/v1/volumes", Query: "type=csi"}, r0(f))

	r = run(t, "", "volume", "status", "-json")
	must.Eq(t, 0, r.code)
	var got []*structs.CSIVolListStub
	must.NoError(t, json.Unmarshal([]byte(r.out), &got))
	must.Eq(t, stubs(), got)
	must.StrContains(t, r.out, "\n    {\n        \"ID\": \"database\",")
}

func TestVolumeStatus_ListEmptyAndPaged(t *testing.T) {
	f := newFakeAgent(t)
	f.routes["GET /v1/volumes"] = func(w http.ResponseWriter, r *http.Request) {
		// Two pages: the first names the second with X-Nomad-NextToken.
		if r.URL.Query().Get("next_token") == "" {
			w.Header().Set("X-Nomad-NextToken", "reference-data")
			_ = json.NewEncoder(w).Encode(stubs()[:1])
			return
		}
		_ = json.NewEncoder(w).Encode(stubs()[1:])
	}
	r := run(t, "", "volume", "status", "-namespace=prod")
	must.Eq(t, 0, r.code)
	must.StrContains(t, r.out, "database")
	must.StrContains(t, r.out, "reference-data")
	reqs := f.requests()
	must.Len(t, 2, reqs)
	must.Eq(t, "namespace=prod&type=csi", reqs[0].Query)
	must.Eq(t, "namespace=prod&next_token=reference-data&type=csi", reqs[1].Query)

	f.json("GET /v1/volumes", 200, []any{})
	r = run(t, "", "volume", "status")
	must.Eq(t, 0, r.code)
	must.Eq(t, "No CSI volumes\n", r.out)
}
