package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const fullHCL = `
id          = "vol1"
name        = "Volume One"
type        = "csi"
namespace   = "prod"
external_id = "ext-1"
plugin_id   = "dev"
capacity_min = "10GiB"
capacity_max = 21474836480
clone_id    = "vol0"
snapshot_id = "snap-1"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

capability {
  access_mode     = "multi-node-reader-only"
  attachment_mode = "block-device"
}

mount_options {
  fs_type     = "ext4"
  mount_flags = ["noatime", "ro"]
}

secrets {
  password = "hunter2"
}

parameters {
  replicas = 3
  fast     = true
}

context {
  endpoint = "10.0.0.1"
}

topology_request {
  required {
    topology {
      segments {
        rack = "R1"
        zone = "us-east-1a"
      }
    }
  }
  preferred {
    topology {
      segments {
        rack = "R2"
      }
    }
  }
}
`

func fullVolume() *structs.CSIVolume {
	return &structs.CSIVolume{
		ID: "vol1", Name: "Volume One", Namespace: "prod", ExternalID: "ext-1", PluginID: "dev",
		RequestedCapacityMin: 10 << 30, RequestedCapacityMax: 20 << 30,
		CloneID: "vol0", SnapshotID: "snap-1",
		RequestedCapabilities: []*structs.CSIVolumeCapability{
			{AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
			{AccessMode: structs.CSIVolumeAccessModeMultiNodeReader, AttachmentMode: structs.CSIVolumeAttachmentModeBlockDevice},
		},
		MountOptions: &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime", "ro"}},
		Secrets:      structs.CSISecrets{"password": "hunter2"},
		Parameters:   map[string]string{"replicas": "3", "fast": "true"},
		Context:      map[string]string{"endpoint": "10.0.0.1"},
		RequestedTopologies: &structs.CSITopologyRequest{
			Required:  []*structs.CSITopology{{Segments: map[string]string{"rack": "R1", "zone": "us-east-1a"}}},
			Preferred: []*structs.CSITopology{{Segments: map[string]string{"rack": "R2"}}},
		},
	}
}

func TestParseVolume_Good(t *testing.T) {
	minimal := &structs.CSIVolume{ID: "v", PluginID: "dev"}
	cases := []struct {
		name string
		src  string
		want *structs.CSIVolume
	}{
		{name: "every field", src: fullHCL, want: fullVolume()},
		{name: "minimal", src: "id = \"v\"\ntype = \"csi\"\nplugin_id = \"dev\"\n", want: minimal},
		{
			name: "maps as attributes with dotted keys",
			src: `
id = "v"
type = "csi"
parameters = { "csi.storage.k8s.io/fstype" = "xfs", size = 5 }
secrets = {}
`,
			want: &structs.CSIVolume{ID: "v", Parameters: map[string]string{"csi.storage.k8s.io/fstype": "xfs", "size": "5"},
				Secrets: structs.CSISecrets{}},
		},
		{
			name: "empty blocks",
			src:  "id = \"v\"\ntype = \"csi\"\nmount_options {\n}\ncontext {\n}\n",
			want: &structs.CSIVolume{ID: "v", MountOptions: &structs.CSIMountOptions{}, Context: map[string]string{}},
		},
		{
			name: "decimal and fractional sizes",
			src:  "id = \"v\"\ntype = \"csi\"\ncapacity_min = \"500MB\"\ncapacity_max = \"1.5G\"\n",
			want: &structs.CSIVolume{ID: "v", RequestedCapacityMin: 500e6, RequestedCapacityMax: 1.5e9},
		},
		{
			name: "json bare object",
			src: `{"ID": "v", "PluginID": "dev", "Type": "csi",
			       "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}],
			       "MountOptions": {"FSType": "xfs"}, "Secrets": {"k": "v"}, "RequestedCapacityMin": 1024}`,
			want: &structs.CSIVolume{ID: "v", PluginID: "dev",
				RequestedCapabilities: []*structs.CSIVolumeCapability{{AccessMode: "single-node-writer", AttachmentMode: "file-system"}},
				MountOptions:          &structs.CSIMountOptions{FSType: "xfs"}, Secrets: structs.CSISecrets{"k": "v"},
				RequestedCapacityMin: 1024},
		},
		{
			name: "json register body",
			src:  `  {"Volumes": [{"ID": "v", "PluginID": "dev"}]}`,
			want: minimal,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseVolume("vol.hcl", []byte(tc.src))
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func TestParseVolume_Bad(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string // substrings of the error
	}{
		{name: "empty", src: "  \n", want: []string{"vol.hcl: volume specification is empty"}},
		{name: "comments only", src: "# nothing\n// here\n", want: []string{"volume specification is empty"}},
		{name: "missing id", src: "type = \"csi\"\nplugin_id = \"dev\"\n",
			want: []string{"vol.hcl:", `The argument "id" is required`}},
		{name: "empty id", src: "id = \"\"\ntype = \"csi\"\n", want: []string{"Missing volume ID"}},
		{name: "missing type", src: "id = \"v\"\n", want: []string{`The argument "type" is required`}},
		{name: "wrong type", src: "id = \"v\"\ntype = \"host\"\n",
			want: []string{"vol.hcl:2:8: Unsupported volume type", `must be "csi", not "host"`}},
		{name: "unknown attribute", src: "id = \"v\"\ntype = \"csi\"\nplugin_di = \"dev\"\n",
			want: []string{"vol.hcl:3:1: Unsupported argument", `"plugin_di" is not expected here`, `Did you mean "plugin_id"?`}},
		{name: "unknown block", src: "id = \"v\"\ntype = \"csi\"\ncapabilities {\n}\n",
			want: []string{"vol.hcl:3:1: Unsupported block type", `"capabilities"`}},
		{name: "wrong attribute type", src: "id = [\"v\"]\ntype = \"csi\"\n",
			want: []string{`vol.hcl:1:6: Incorrect value type for "id": string required`}},
		{name: "mount flags not a list", src: "id = \"v\"\ntype = \"csi\"\nmount_options {\n  mount_flags = \"noatime\"\n}\n",
			want: []string{`vol.hcl:4:`, `Incorrect value type for "mount_flags"`, "list of string required"}},
		{name: "capability missing attachment mode", src: "id = \"v\"\ntype = \"csi\"\ncapability {\n  access_mode = \"single-node-writer\"\n}\n",
			want: []string{"vol.hcl:", `"attachment_mode" is required`}},
		{name: "two mount_options", src: "id = \"v\"\ntype = \"csi\"\nmount_options {\n}\nmount_options {\n}\n",
			want: []string{"vol.hcl:5:1: Duplicate mount_options block"}},
		{name: "secrets twice", src: "id = \"v\"\ntype = \"csi\"\nsecrets {\n}\nsecrets = {}\n",
			want: []string{"Duplicate secrets block"}},
		{name: "nested block in secrets", src: "id = \"v\"\ntype = \"csi\"\nsecrets {\n  inner {\n  }\n}\n",
			want: []string{"vol.hcl:4:", "Blocks are not allowed here"}},
		{name: "secret value is a list", src: "id = \"v\"\ntype = \"csi\"\nsecrets {\n  k = [1]\n}\n",
			want: []string{"vol.hcl:4:7: Incorrect value type", "secrets.k must be a string, not a list"}},
		{name: "bad size unit", src: "id = \"v\"\ntype = \"csi\"\ncapacity_min = \"10XB\"\n",
			want: []string{"vol.hcl:3:16: Invalid capacity_min", `unknown unit "XB"`}},
		{name: "negative capacity", src: "id = \"v\"\ntype = \"csi\"\ncapacity_max = -1\n",
			want: []string{"Invalid capacity_max", "non-negative"}},
		{name: "capacity is a bool", src: "id = \"v\"\ntype = \"csi\"\ncapacity_max = true\n",
			want: []string{"Invalid capacity_max", "not a bool"}},
		{name: "variables", src: "id = var.x\ntype = \"csi\"\n", want: []string{"vol.hcl:1:6: Variables not allowed"}},
		{name: "unknown topology field", src: "id = \"v\"\ntype = \"csi\"\ntopology_request {\n  required {\n    topology {\n      segment {\n      }\n    }\n  }\n}\n",
			want: []string{"vol.hcl:6:7: Unsupported block type", `"segment"`}},
		{name: "syntax error", src: "id = \"v\"\ntype = \"csi\n", want: []string{"vol.hcl:2:"}},
		{name: "several problems at once", src: "id = \"v\"\ntype = \"csi\"\nfoo = 1\nbar = 2\n",
			want: []string{`vol.hcl:3:1: Unsupported argument: An argument named "foo"`, `vol.hcl:4:1: Unsupported argument: An argument named "bar"`}},
		{name: "json unknown field", src: "{\"ID\": \"v\",\n \"PlugID\": \"dev\"}", want: []string{`vol.hcl:2:2: unknown field "PlugID"`}},
		{name: "json wrong type", src: "{\"ID\": \"v\",\n \"RequestedCapacityMin\": \"10GiB\"}",
			want: []string{"vol.hcl:2:", "RequestedCapacityMin: expected a number, got a JSON string"}},
		{name: "json syntax", src: "{\"ID\": \"v\",\n}", want: []string{"vol.hcl:2:1: invalid JSON"}},
		{name: "json missing id", src: `{"PluginID": "dev"}`, want: []string{"missing volume ID"}},
		{name: "json empty object", src: `{}`, want: []string{"volume specification is empty"}},
		{name: "json wrong type field", src: `{"ID": "v", "Type": "host"}`, want: []string{`unsupported volume type "host"`}},
		{name: "json two volumes", src: `{"Volumes": [{"ID": "a"}, {"ID": "b"}]}`, want: []string{"exactly one volume, not 2"}},
		{name: "json unknown field in register body", src: "{\"Volumes\": [\n{\"ID\": \"a\", \"Nope\": 1}]}",
			want: []string{`vol.hcl:2:13: unknown field "Nope"`}},
		{name: "json trailing content", src: `{"ID": "a"} {"ID": "b"}`, want: []string{"vol.hcl:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vol, err := ParseVolume("vol.hcl", []byte(tc.src))
			must.Nil(t, vol)
			must.Error(t, err)
			for _, w := range tc.want {
				must.StrContains(t, err.Error(), w)
			}
			must.StrNotContains(t, err.Error(), "panic")
		})
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "1024": 1024, "10GiB": 10 << 30, "10gib": 10 << 30, "500MB": 500e6, "1G": 1e9, "1Gi": 1 << 30,
		"1.5GiB": 3 << 29, "2 TiB": 2 << 40, "7B": 7, "3k": 3000, "1PiB": 1 << 50,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		must.NoError(t, err, must.Sprint(in))
		must.Eq(t, want, got, must.Sprint(in))
	}
	bad := map[string]string{
		"":         "must start with a number",
		"GiB":      "must start with a number",
		"10XB":     "unknown unit",
		"1.2.3GB":  "is not a number",
		"-1GiB":    "must start with a number",
		"9000PiB":  "too large",
		"10 Gi B ": "unknown unit",
	}
	for in, want := range bad {
		_, err := ParseSize(in)
		must.ErrorContains(t, err, want, must.Sprint(in))
	}
}

// TestExamples parses every specification shipped in examples/, so that an
// example cannot rot unnoticed.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*")
	must.NoError(t, err)
	var specs int
	for _, f := range files {
		if !strings.HasSuffix(f, ".hcl") && !strings.HasSuffix(f, ".json") {
			continue
		}
		// Job specifications (plugin jobs too) have a test of their own
		// (TestJobExamples).
		if strings.HasPrefix(filepath.Base(f), "job-") || strings.HasPrefix(filepath.Base(f), "plugin-") {
			continue
		}
		specs++
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			must.NoError(t, err)
			vol, err := ParseVolume(f, src)
			must.NoError(t, err)
			must.NotEq(t, "", vol.ID)
			must.NotEq(t, "", vol.PluginID)
			must.SliceNotEmpty(t, vol.RequestedCapabilities)
			// Registration fills the namespace in when a spec has none.
			if vol.Namespace == "" {
				vol.Namespace = structs.DefaultNamespace
			}
			must.NoError(t, vol.Validate())
		})
	}
	must.Positive(t, specs)
}
