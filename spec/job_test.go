package spec

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

const fullJobHCL = `
job "web" {
  type      = "service"
  namespace = "prod"
  name      = "Web"

  group "app" {
    count = 3

    volume "data" {
      type            = "csi"
      source          = "vol"
      read_only       = false
      per_alloc       = true
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"

      mount_options {
        fs_type     = "xfs"
        mount_flags = ["noatime"]
      }
    }

    volume "ref" {
      type            = "csi"
      source          = "reference"
      read_only       = true
      access_mode     = "multi-node-reader-only"
      attachment_mode = "block-device"
    }

    task "t" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo hi > $VOLPLANE_VOLUME_DATA/hello", 3]
      }

      volume_mount {
        volume           = "data"
        destination      = "/data"
        propagation_mode = "bidirectional"
      }

      volume_mount {
        volume      = "ref"
        destination = "/ref"
        read_only   = true
      }
    }

    task "u" {
      driver = "exec"
      config {
        command = "true"
      }
    }
  }

  group "other" {
    task "t" {
      driver = "exec"
      config {
        command = "sleep"
      }
    }
  }
}
`

func fullJob() *structs.Job {
	return &structs.Job{
		ID: "web", Name: "Web", Namespace: "prod", Type: structs.JobTypeService,
		TaskGroups: []*structs.TaskGroup{
			{
				Name: "app", Count: 3,
				Volumes: map[string]*structs.VolumeRequest{
					"data": {
						Name: "data", Type: "csi", Source: "vol", PerAlloc: true,
						AccessMode: "single-node-writer", AttachmentMode: "file-system",
						MountOptions: &structs.CSIMountOptions{FSType: "xfs", MountFlags: []string{"noatime"}},
					},
					"ref": {
						Name: "ref", Type: "csi", Source: "reference", ReadOnly: true,
						AccessMode: "multi-node-reader-only", AttachmentMode: "block-device",
					},
				},
				Tasks: []*structs.Task{
					{
						Name: "t", Driver: "exec",
						Config: structs.TaskConfig{Command: "/bin/sh", Args: []string{"-c", "echo hi > $VOLPLANE_VOLUME_DATA/hello", "3"}},
						VolumeMounts: []*structs.VolumeMount{
							{Volume: "data", Destination: "/data", PropagationMode: "bidirectional"},
							{Volume: "ref", Destination: "/ref", ReadOnly: true, PropagationMode: "private"},
						},
					},
					{Name: "u", Driver: "exec", Config: structs.TaskConfig{Command: "true"}},
				},
			},
			{
				Name: "other", Count: 1,
				Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "sleep"}}},
			},
		},
	}
}

const minimalTask = `task "t" {
  driver = "exec"
  config {
    command = "true"
  }
}`

func TestParseJob_Good(t *testing.T) {
	minimal := &structs.Job{
		ID: "j", Name: "j", Namespace: "default", Type: "service",
		TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "true"}}}}},
	}
	system := &structs.Job{
		ID: "j", Name: "j", Namespace: "default", Type: structs.JobTypeSystem,
		TaskGroups: []*structs.TaskGroup{{Name: "g",
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "true"}}}}},
	}

	cases := []struct {
		name string
		src  string
		want *structs.Job
	}{
		{name: "every field", src: fullJobHCL, want: fullJob()},
		{name: "minimal, defaults filled in", src: "job \"j\" {\n group \"g\" {\n" + minimalTask + "\n}\n}\n", want: minimal},
		{name: "system job keeps count 0", src: "job \"j\" {\n type = \"system\"\n group \"g\" {\n count = 0\n" + minimalTask + "\n}\n}\n",
			want: system},
		{
			name: "json bare job",
			src: `{"ID": "j", "TaskGroups": [{"Name": "g",
			       "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"Command": "true"}}]}]}`,
			want: minimal,
		},
		{
			name: "json register body with server-owned fields",
			src: `  {"Job": {"ID": "j", "Name": "j", "Namespace": "default", "Type": "service", "Stop": true, "Status": "dead",
			       "Version": 4, "SubmitTime": 9, "CreateIndex": 1, "ModifyIndex": 2, "JobModifyIndex": 2,
			       "Placement": {"g": {"Desired": 1, "Placed": 0, "Blocked": ["no nodes"]}},
			       "TaskGroups": [{"Name": "g", "Count": 1,
			       "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"Command": "true"}}]}]}}`,
			want: minimal,
		},
		{
			name: "json volumes",
			src: `{"ID": "j", "TaskGroups": [{"Name": "g", "Count": 2,
			       "Volumes": {"d": {"Type": "csi", "Source": "v", "PerAlloc": true, "AccessMode": "single-node-writer",
			                         "AttachmentMode": "file-system"}},
			       "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"Command": "true"},
			                  "VolumeMounts": [{"Volume": "d", "Destination": "/d"}]}]}]}`,
			want: &structs.Job{
				ID: "j", Name: "j", Namespace: "default", Type: "service",
				TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 2,
					Volumes: map[string]*structs.VolumeRequest{"d": {Name: "d", Type: "csi", Source: "v", PerAlloc: true,
						AccessMode: "single-node-writer", AttachmentMode: "file-system"}},
					Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "true"},
						VolumeMounts: []*structs.VolumeMount{{Volume: "d", Destination: "/d", PropagationMode: "private"}}}}}},
			},
		},
	}
	// Update blocks: a group without one takes the job's; a block without
	// max_parallel means Nomad's default, 1; Nomad's other attributes are
	// accepted.
	group := func(name string, maxParallel int) *structs.TaskGroup {
		return &structs.TaskGroup{Name: name, Count: 1, Update: &structs.UpdateStrategy{MaxParallel: maxParallel},
			Tasks: []*structs.Task{{Name: "t", Driver: "exec", Config: structs.TaskConfig{Command: "true"}}}}
	}
	updates := &structs.Job{ID: "j", Name: "j", Namespace: "default", Type: "service",
		Update: &structs.UpdateStrategy{MaxParallel: 2}, TaskGroups: []*structs.TaskGroup{group("g", 1), group("h", 2)}}
	cases = append(cases, struct {
		name string
		src  string
		want *structs.Job
	}{name: "update blocks", want: updates,
		src: "job \"j\" {\n update {\n max_parallel = 2\n stagger = \"30s\"\n health_check = \"task_states\"\n canary = 0\n }\n" +
			" group \"g\" {\n update {}\n" + minimalTask + "\n}\n group \"h\" {\n" + minimalTask + "\n}\n}\n"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseJob("job.hcl", []byte(tc.src))
			must.NoError(t, err)
			must.Eq(t, tc.want, got)
		})
	}
}

func TestParseJob_Bad(t *testing.T) {
	group := func(body string) string {
		return "job \"j\" {\n  group \"g\" {\n" + body + "\n  }\n}\n"
	}
	cases := []struct {
		name string
		src  string
		want []string // substrings of the error
	}{
		{name: "empty", src: " \n", want: []string{"job.hcl: job specification is empty"}},
		{name: "comments only", src: "# nothing\n", want: []string{"job.hcl: job specification is empty"}},
		{name: "no job block", src: "type = \"service\"\n", want: []string{"job.hcl:1:1: Unsupported argument"}},
		{name: "job block missing", src: "group \"g\" {\n}\n", want: []string{"job.hcl:1:1: Unsupported block type"}},
		{name: "two jobs", src: "job \"a\" {\n}\njob \"b\" {\n}\n", want: []string{"job.hcl:3:1: Duplicate job block"}},
		{name: "job without a name", src: "job {\n}\n", want: []string{"job.hcl:1:", "Missing id for job"}},
		{name: "empty job name", src: " job \"\"{} ", want: []string{"job.hcl:1:6: Missing job ID"}},
		{name: "unknown job attribute", src: "job \"j\" {\n  datacenters = [\"dc1\"]\n}\n",
			want: []string{"job.hcl:2:3: Unsupported argument", `"datacenters"`}},
		{name: "wrong attribute type", src: "job \"j\" {\n  type = [\"service\"]\n}\n",
			want: []string{`job.hcl:2:10: Incorrect value type for "type"`}},
		{name: "count not a number", src: group(`count = "three"`),
			want: []string{`job.hcl:3:10: Incorrect value type for "count"`}},
		{name: "count not whole", src: group(`count = 1.5`), want: []string{"job.hcl:3:", "count"}},
		{name: "negative max_parallel", src: group("update {\n max_parallel = -1\n}\n" + minimalTask),
			want: []string{"job.hcl:4:", "Invalid max_parallel"}},
		{name: "explicit count 0", src: group("count = 0\n" + minimalTask),
			want: []string{"job.hcl:3:9: Invalid count", `use "volplane job stop"`}},
		{name: "duplicate group", src: "job \"j\" {\n  group \"g\" {\n  }\n  group \"g\" {\n  }\n}\n",
			want: []string{`job.hcl:4:9: Duplicate group block: A group named "g"`}},
		{name: "duplicate volume", src: group("volume \"v\" {\n type = \"csi\"\n source = \"a\"\n}\nvolume \"v\" {\n type = \"csi\"\n source = \"b\"\n}"),
			want: []string{`job.hcl:7:8: Duplicate volume block: A volume named "v"`}},
		{name: "duplicate task", src: group(minimalTask + "\n" + minimalTask),
			want: []string{`job.hcl:9:6: Duplicate task block: A task named "t"`}},
		{name: "volume without type", src: group("volume \"v\" {\n source = \"a\"\n}"),
			want: []string{"job.hcl:3:", `The argument "type" is required`}},
		{name: "volume without source", src: group("volume \"v\" {\n type = \"csi\"\n}"),
			want: []string{"job.hcl:3:", `The argument "source" is required`}},
		{name: "unknown volume attribute", src: group("volume \"v\" {\n type = \"csi\"\n source = \"a\"\n sticky = true\n}"),
			want: []string{"job.hcl:6:2: Unsupported argument", `"sticky"`}},
		{name: "per_alloc not a bool", src: group("volume \"v\" {\n type = \"csi\"\n source = \"a\"\n per_alloc = \"maybe\"\n}"),
			want: []string{`job.hcl:6:15: Incorrect value type for "per_alloc"`}},
		{name: "task without driver", src: group("task \"t\" {\n}"),
			want: []string{"job.hcl:3:", `The argument "driver" is required`}},
		{name: "config without command", src: group("task \"t\" {\n driver = \"exec\"\n config {\n }\n}"),
			want: []string{"job.hcl:5:", `The argument "command" is required`}},
		{name: "args not a list", src: group("task \"t\" {\n driver = \"exec\"\n config {\n command = \"x\"\n args = \"-c\"\n }\n}"),
			want: []string{`job.hcl:7:10: Incorrect value type for "args"`}},
		{name: "volume_mount without volume", src: group("task \"t\" {\n driver = \"exec\"\n volume_mount {\n }\n}"),
			want: []string{"job.hcl:5:", `The argument "volume" is required`}},
		{name: "interpolation", src: group("task \"t\" {\n driver = \"exec\"\n config {\n command = \"${env.X}\"\n }\n}"),
			want: []string{"job.hcl:6:", "Variables not allowed"}},
		{name: "syntax error", src: "job \"j\" {\n", want: []string{"job.hcl:1:"}},
		{name: "two csi_plugin blocks", src: group("task \"t\" {\n driver = \"exec\"\n csi_plugin {\n id = \"a\"\n }\n csi_plugin {\n id = \"b\"\n }\n}"),
			want: []string{"job.hcl:8:2: Duplicate csi_plugin block", "Only one csi_plugin block is allowed"}},
		{name: "csi_plugin bad health_timeout", src: group("task \"t\" {\n driver = \"exec\"\n csi_plugin {\n id = \"a\"\n health_timeout = \"soon\"\n }\n}"),
			want: []string{"job.hcl:7:19: Invalid health_timeout", `"soon" is not a duration`}},
		{name: "csi_plugin unknown attribute", src: group("task \"t\" {\n driver = \"exec\"\n csi_plugin {\n id = \"a\"\n socket = \"/x\"\n }\n}"),
			want: []string{"job.hcl:7:2: Unsupported argument", `"socket"`}},
		{name: "several problems at once", src: group("foo = 1\nbar = 2"),
			want: []string{`job.hcl:3:1: Unsupported argument: An argument named "foo"`, `job.hcl:4:1: Unsupported argument: An argument named "bar"`}},
		{name: "json unknown field", src: "{\"ID\": \"j\",\n \"Datacenters\": []}", want: []string{`job.hcl:2:2: unknown field "Datacenters"`}},
		{name: "json unknown nested field", src: "{\"Job\": {\"ID\": \"j\",\n \"TaskGroups\": [{\"Name\": \"g\", \"Sticky\": true}]}}",
			want: []string{`job.hcl:2:31: unknown field "Sticky"`}},
		{name: "json wrong type", src: "{\"ID\": \"j\",\n \"TaskGroups\": [{\"Count\": \"3\"}]}",
			want: []string{"job.hcl:2:", "TaskGroups.Count: expected a number, got a JSON string"}},
		{name: "json syntax", src: "{\"ID\": \"j\",\n}", want: []string{"job.hcl:2:1: invalid JSON"}},
		{name: "json missing id", src: `{"Name": "j"}`, want: []string{"job.hcl: missing job ID"}},
		{name: "json empty object", src: `{}`, want: []string{"job specification is empty"}},
		{name: "json null job", src: `{"Job": null}`, want: []string{"job.hcl: Job is null"}},
		{name: "json job not an object", src: "{\n\"Job\": [1]}", want: []string{"job.hcl:2:8: Job must be a job object"}},
		{name: "json explicit count 0", src: `{"ID": "j", "TaskGroups": [{"Name": "g", "Count": 0}]}`,
			want: []string{`job.hcl: group "g": Count must be at least 1`}},
		{name: "json trailing content", src: `{"ID": "a"} {"ID": "b"}`, want: []string{"job.hcl:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job, err := ParseJob("job.hcl", []byte(tc.src))
			must.Nil(t, job)
			must.Error(t, err)
			for _, w := range tc.want {
				must.StrContains(t, err.Error(), w)
			}
		})
	}
}

// TestParseJob_LeavesValidationToTheServer shows that a job the server
// would refuse still parses: the parser checks shape, not sense.
func TestParseJob_LeavesValidationToTheServer(t *testing.T) {
	src := "job \"j\" {\n  group \"g\" {\n    count = 2\n" +
		"    volume \"v\" {\n      type = \"nfs\"\n      source = \"a\"\n      access_mode = \"single-node-writer\"\n    }\n  }\n}\n"
	job, err := ParseJob("job.hcl", []byte(src))
	must.NoError(t, err)
	err = job.Validate()
	must.ErrorContains(t, err, `group "g" volume "v": volume has unrecognized type "nfs"`)
	must.ErrorContains(t, err, `group "g" volume "v": CSI volumes must have an attachment mode`)
	must.ErrorContains(t, err, `group "g" volume "v": volume with single-node-writer access mode allows only one reader or writer`)
	must.ErrorContains(t, err, `group "g": group has no tasks`)
}

// TestJobExamples parses and validates every job specification shipped in
// examples/, so that an example cannot rot unnoticed.
func TestJobExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/job-*.hcl")
	must.NoError(t, err)
	plugins, err := filepath.Glob("../examples/plugin-*.hcl")
	must.NoError(t, err)
	files = append(files, plugins...)
	must.SliceNotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			src, err := os.ReadFile(f)
			must.NoError(t, err)
			job, err := ParseJob(f, src)
			must.NoError(t, err)
			must.NoError(t, job.Validate())
			must.SliceNotEmpty(t, job.TaskGroups)
		})
	}
}

// TestJobExamples_PerAlloc pins down the example the tests run: a
// per_alloc service job of count 3 with a single-node-writer volume "vol"
// whose task writes into it.
func TestJobExamples_PerAlloc(t *testing.T) {
	src, err := os.ReadFile("../examples/job-per-alloc.hcl")
	must.NoError(t, err)
	job, err := ParseJob("job-per-alloc.hcl", src)
	must.NoError(t, err)
	must.Eq(t, structs.JobTypeService, job.Type)
	tg := job.TaskGroups[0]
	must.Eq(t, 3, tg.Count)
	vol := tg.Volumes["data"]
	must.Eq(t, "vol", vol.Source)
	must.True(t, vol.PerAlloc)
	must.Eq(t, structs.CSIVolumeAccessModeSingleNodeWriter, vol.AccessMode)
	for i, want := range []string{"vol[0]", "vol[1]", "vol[2]"} {
		must.Eq(t, want, vol.VolumeID(structs.AllocName(job.ID, tg.Name, i)))
	}
	must.StrContains(t, tg.Tasks[0].Config.Args[1], "$VOLPLANE_VOLUME_DATA/hello")

	src, err = os.ReadFile("../examples/job-multi-reader.hcl")
	must.NoError(t, err)
	job, err = ParseJob("job-multi-reader.hcl", src)
	must.NoError(t, err)
	ref := job.TaskGroups[0].Volumes["reference"]
	must.Eq(t, structs.CSIVolumeAccessModeMultiNodeReader, ref.AccessMode)
	must.True(t, ref.ReadOnly)
	must.Greater(t, 1, job.TaskGroups[0].Count)
}

// TestParseJob_CSIPlugin parses a task's csi_plugin block, in HCL and in
// JSON (Nomad's field names, HealthTimeout in nanoseconds), with Nomad's
// defaults filled in.
func TestParseJob_CSIPlugin(t *testing.T) {
	hclSrc := `job "plugin" {
  type = "system"
  group "nodes" {
    task "plugin" {
      driver = "exec"
      config { command = "volplane" }
      csi_plugin {
        id             = "dev"
        type           = "node"
        health_timeout = "45s"
      }
    }
  }
}
`
	jsonSrc := `{"ID": "plugin", "Type": "system", "TaskGroups": [{"Name": "nodes", "Tasks": [{"Name": "plugin", "Driver": "exec",
  "Config": {"Command": "volplane"},
  "CSIPluginConfig": {"ID": "dev", "Type": "node", "HealthTimeout": 45000000000}}]}]}`
	for name, src := range map[string]string{"hcl": hclSrc, "json": jsonSrc} {
		t.Run(name, func(t *testing.T) {
			job, err := ParseJob("job", []byte(src))
			must.NoError(t, err)
			must.NoError(t, job.Validate())
			must.True(t, job.IsPlugin())
			must.Eq(t, &structs.TaskCSIPluginConfig{
				ID: "dev", Type: structs.CSIPluginTypeNode, MountDir: "/csi",
				StagePublishBaseDir: "/local/csi", HealthTimeout: 45 * time.Second,
			}, job.TaskGroups[0].Tasks[0].CSIPluginConfig)
		})
	}
}
