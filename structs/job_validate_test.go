package structs

import (
	"strings"
	"testing"

	"github.com/shoenig/test/must"
)

// validJob is a canonical service job that passes validation: one group of
// count 3 with a per_alloc single-node-writer volume mounted by its task.
func validJob() *Job {
	return &Job{
		ID: "web", Name: "web", Namespace: DefaultNamespace, Type: JobTypeService,
		TaskGroups: []*TaskGroup{{
			Name:  "g",
			Count: 3,
			Volumes: map[string]*VolumeRequest{"data": {
				Name: "data", Type: VolumeTypeCSI, Source: "vol", PerAlloc: true,
				AccessMode:     CSIVolumeAccessModeSingleNodeWriter,
				AttachmentMode: CSIVolumeAttachmentModeFilesystem,
			}},
			Tasks: []*Task{{
				Name: "t", Driver: TaskDriverExec,
				Config:       TaskConfig{Command: "/bin/sh", Args: []string{"-c", "true"}},
				VolumeMounts: []*VolumeMount{{Volume: "data", Destination: "/data", PropagationMode: VolumeMountPropagationPrivate}},
			}},
		}},
	}
}

func TestJob_Validate_Good(t *testing.T) {
	cases := map[string]func(j *Job){
		"as is": func(*Job) {},
		"count 1 single-node-writer without per_alloc": func(j *Job) {
			j.TaskGroups[0].Count = 1
			j.TaskGroups[0].Volumes["data"].PerAlloc = false
		},
		"single-node-reader-only read-only per_alloc": func(j *Job) {
			v := j.TaskGroups[0].Volumes["data"]
			v.AccessMode, v.ReadOnly = CSIVolumeAccessModeSingleNodeReader, true
		},
		"multi-node-reader-only read-only shared": func(j *Job) {
			v := j.TaskGroups[0].Volumes["data"]
			v.AccessMode, v.ReadOnly, v.PerAlloc = CSIVolumeAccessModeMultiNodeReader, true, false
		},
		"multi-node-single-writer read-only shared": func(j *Job) {
			v := j.TaskGroups[0].Volumes["data"]
			v.AccessMode, v.ReadOnly, v.PerAlloc = CSIVolumeAccessModeMultiNodeSingleWriter, true, false
		},
		"multi-node-multi-writer shared": func(j *Job) {
			v := j.TaskGroups[0].Volumes["data"]
			v.AccessMode, v.PerAlloc = CSIVolumeAccessModeMultiNodeMultiWriter, false
		},
		"system job ignores count": func(j *Job) {
			j.Type = JobTypeSystem
			j.TaskGroups[0].Count = -4
			j.TaskGroups[0].Volumes["data"].PerAlloc = false
		},
		"count 0": func(j *Job) { j.TaskGroups[0].Count = 0 },
		"block device without mount options": func(j *Job) {
			v := j.TaskGroups[0].Volumes["data"]
			v.AttachmentMode, v.MountOptions = CSIVolumeAttachmentModeBlockDevice, &CSIMountOptions{}
		},
		"file system with mount options": func(j *Job) {
			j.TaskGroups[0].Volumes["data"].MountOptions = &CSIMountOptions{FSType: "xfs", MountFlags: []string{"noatime"}}
		},
		"bidirectional on a read-write volume": func(j *Job) {
			j.TaskGroups[0].Tasks[0].VolumeMounts[0].PropagationMode = VolumeMountPropagationBidirectional
		},
		"no volumes": func(j *Job) {
			j.TaskGroups[0].Volumes = nil
			j.TaskGroups[0].Tasks[0].VolumeMounts = nil
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			j := validJob()
			mutate(j)
			must.NoError(t, j.Validate())
		})
	}
}

// TestJob_Validate_Messages has one row per validation message.
func TestJob_Validate_Messages(t *testing.T) {
	vol := func(j *Job) *VolumeRequest { return j.TaskGroups[0].Volumes["data"] }
	mount := func(j *Job) *VolumeMount { return j.TaskGroups[0].Tasks[0].VolumeMounts[0] }
	cases := []struct {
		name   string
		mutate func(j *Job)
		want   string
	}{
		{"missing id", func(j *Job) { j.ID = "" }, "missing job id"},
		{"bad id", func(j *Job) { j.ID = "a/b" }, `job id "a/b" must not contain any of / ? # % \`},
		{"missing namespace", func(j *Job) { j.Namespace = "" }, "missing namespace"},
		{"long name", func(j *Job) { j.Name = strings.Repeat("n", MaxNameLength+1) }, "name is longer than 256 characters"},
		{"missing type", func(j *Job) { j.Type = "" }, "missing job type"},
		{"unknown type", func(j *Job) { j.Type = "daemon" },
			`unknown job type "daemon": must be one of "service", "batch", "system" or "sysbatch"`},
		{"no groups", func(j *Job) { j.TaskGroups = nil }, "job has no task groups"},
		{"nil group", func(j *Job) { j.TaskGroups = append(j.TaskGroups, nil) }, "task group 2 is empty"},
		{"duplicate group", func(j *Job) { j.TaskGroups = append(j.TaskGroups, j.TaskGroups[0].Copy()) },
			`group "g" is defined more than once`},
		{"missing group name", func(j *Job) { j.TaskGroups[0].Name = "" }, "task group 1: missing group name"},
		{"bad group name", func(j *Job) { j.TaskGroups[0].Name = "a b" },
			`group "a b": group name "a b" must not contain spaces or control characters`},
		{"negative count", func(j *Job) { j.TaskGroups[0].Count = -1 }, `group "g": count must not be negative, not -1`},
		{"no tasks", func(j *Job) { j.TaskGroups[0].Tasks = nil }, `group "g": group has no tasks`},
		{"nil task", func(j *Job) { j.TaskGroups[0].Tasks = append(j.TaskGroups[0].Tasks, nil) }, `group "g": task 2 is empty`},
		{"missing task name", func(j *Job) { j.TaskGroups[0].Tasks[0].Name = "" }, `group "g" task 1: missing task name`},
		{"duplicate task", func(j *Job) {
			tg := j.TaskGroups[0]
			tg.Tasks = append(tg.Tasks, tg.Copy().Tasks[0])
		}, `group "g" task "t": task is defined more than once`},
		{"missing driver", func(j *Job) { j.TaskGroups[0].Tasks[0].Driver = "" }, `group "g" task "t": missing driver`},
		{"unknown driver", func(j *Job) { j.TaskGroups[0].Tasks[0].Driver = "docker" },
			`group "g" task "t": unknown driver "docker": the only driver is "exec"`},
		{"missing command", func(j *Job) { j.TaskGroups[0].Tasks[0].Config.Command = "" },
			`group "g" task "t": the exec driver needs a command in the task config`},
		{"nil volume", func(j *Job) { j.TaskGroups[0].Volumes["data"] = nil }, `group "g" volume "data": volume is empty`},
		{"name differs from alias", func(j *Job) { vol(j).Name = "other" },
			`group "g" volume "data": volume name "other" does not match its alias`},
		{"unrecognized type", func(j *Job) { vol(j).Type = "host" },
			`group "g" volume "data": volume has unrecognized type "host": the only type is "csi"`},
		{"empty type", func(j *Job) { vol(j).Type = "" }, `group "g" volume "data": volume has unrecognized type ""`},
		{"empty source", func(j *Job) { vol(j).Source = "" }, `group "g" volume "data": volume has an empty source`},
		{"bad source", func(j *Job) { vol(j).Source = "a?b" }, `group "g" volume "data": volume source "a?b" must not contain`},
		{"per_alloc on system", func(j *Job) { j.Type = JobTypeSystem },
			`group "g" volume "data": volume cannot be per_alloc for system or sysbatch jobs`},
		{"per_alloc on sysbatch", func(j *Job) { j.Type = JobTypeSysBatch },
			`group "g" volume "data": volume cannot be per_alloc for system or sysbatch jobs`},
		{"missing attachment mode", func(j *Job) { vol(j).AttachmentMode = "" },
			`group "g" volume "data": CSI volumes must have an attachment mode`},
		{"unknown attachment mode", func(j *Job) { vol(j).AttachmentMode = "raw" },
			`group "g" volume "data": unknown attachment mode "raw": must be "file-system" or "block-device"`},
		{"block device with mount options", func(j *Job) {
			vol(j).AttachmentMode = CSIVolumeAttachmentModeBlockDevice
			vol(j).MountOptions = &CSIMountOptions{FSType: "ext4"}
		}, `group "g" volume "data": block devices cannot have mount options`},
		{"missing access mode", func(j *Job) { vol(j).AccessMode = "" },
			`group "g" volume "data": CSI volumes must have an access mode`},
		{"unknown access mode", func(j *Job) { vol(j).AccessMode = "everyone" },
			`group "g" volume "data": unknown access mode "everyone"`},
		{"single-node-reader-only writable", func(j *Job) { vol(j).AccessMode = CSIVolumeAccessModeSingleNodeReader },
			`group "g" volume "data": single-node-reader-only volumes must be read-only`},
		{"multi-node-reader-only writable", func(j *Job) { vol(j).AccessMode = CSIVolumeAccessModeMultiNodeReader },
			`group "g" volume "data": multi-node-reader-only volumes must be read-only`},
		{"single-node-reader-only shared", func(j *Job) {
			vol(j).AccessMode, vol(j).ReadOnly, vol(j).PerAlloc = CSIVolumeAccessModeSingleNodeReader, true, false
		}, `group "g" volume "data": volume with single-node-reader-only access mode allows only one reader`},
		{"single-node-writer shared", func(j *Job) { vol(j).PerAlloc = false },
			`group "g" volume "data": volume with single-node-writer access mode allows only one reader or writer`},
		{"single-node-writer shared read-only", func(j *Job) { vol(j).PerAlloc, vol(j).ReadOnly = false, true },
			`group "g" volume "data": volume with single-node-writer access mode allows only one reader or writer`},
		{"multi-node-single-writer shared writer", func(j *Job) {
			vol(j).AccessMode, vol(j).PerAlloc = CSIVolumeAccessModeMultiNodeSingleWriter, false
		}, `group "g" volume "data": volume with multi-node-single-writer access mode allows only one writer`},
		{"nil mount", func(j *Job) { j.TaskGroups[0].Tasks[0].VolumeMounts[0] = nil },
			`group "g" task "t": Volume Mount (1) is empty`},
		{"undefined volume", func(j *Job) { mount(j).Volume = "logs" },
			`group "g" task "t": Volume Mount (1) references undefined volume logs`},
		{"unknown propagation mode", func(j *Job) { mount(j).PropagationMode = "shared" },
			`group "g" task "t": Volume Mount (1) is invalid: volume mount has an invalid propagation mode: "shared"`},
		{"bidirectional on a read-only mount", func(j *Job) {
			mount(j).PropagationMode, mount(j).ReadOnly = VolumeMountPropagationBidirectional, true
		}, `group "g" task "t": Volume Mount (1) is invalid: bidirectional propagation requires a read-write volume`},
		{"bidirectional on a read-only volume", func(j *Job) {
			mount(j).PropagationMode, vol(j).ReadOnly = VolumeMountPropagationBidirectional, true
		}, `group "g" task "t": Volume Mount (1) is invalid: bidirectional propagation requires a read-write volume`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := validJob()
			tc.mutate(j)
			err := j.Validate()
			must.Error(t, err)
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			must.StrContains(t, MessageOf(err), tc.want)
			must.StrHasPrefix(t, "job ", MessageOf(err))
		})
	}
}

// TestJob_Validate_CollectsEverything checks that one error lists every
// problem of every group, under the job's name.
func TestJob_Validate_CollectsEverything(t *testing.T) {
	j := validJob()
	web := j.TaskGroups[0]
	web.Volumes["data"].PerAlloc = false
	web.Tasks[0].VolumeMounts = append(web.Tasks[0].VolumeMounts, &VolumeMount{Volume: "nope"})
	db := web.Copy()
	db.Name = "db"
	db.Volumes["data"].AttachmentMode = ""
	j.TaskGroups = append(j.TaskGroups, db)

	err := j.Validate()
	must.Eq(t, `job "web" validation failed: `+
		`group "g" volume "data": volume with single-node-writer access mode allows only one reader or writer; `+
		`group "g" task "t": Volume Mount (2) references undefined volume nope; `+
		`group "db" volume "data": CSI volumes must have an attachment mode; `+
		`group "db" volume "data": volume with single-node-writer access mode allows only one reader or writer; `+
		`group "db" task "t": Volume Mount (2) references undefined volume nope`, MessageOf(err))
}

func TestJob_Canonicalize(t *testing.T) {
	j := &Job{
		ID: "web",
		TaskGroups: []*TaskGroup{
			{Name: "a", Volumes: map[string]*VolumeRequest{"data": {Type: VolumeTypeCSI}},
				Tasks: []*Task{{Name: "t", VolumeMounts: []*VolumeMount{{Volume: "data"}, {Volume: "data", PropagationMode: "host-to-task"}}}}},
			{Name: "b", Count: 2},
			nil,
		},
	}
	j.Canonicalize()
	must.Eq(t, DefaultNamespace, j.Namespace)
	must.Eq(t, JobTypeService, j.Type)
	must.Eq(t, "web", j.Name)
	must.Eq(t, 1, j.TaskGroups[0].Count)
	must.Eq(t, 2, j.TaskGroups[1].Count)
	must.Eq(t, "data", j.TaskGroups[0].Volumes["data"].Name)
	must.Eq(t, VolumeTypeCSI, j.TaskGroups[0].Volumes["data"].Type)
	must.Eq(t, VolumeMountPropagationPrivate, j.TaskGroups[0].Tasks[0].VolumeMounts[0].PropagationMode)
	must.Eq(t, VolumeMountPropagationHostToTask, j.TaskGroups[0].Tasks[0].VolumeMounts[1].PropagationMode)

	// What is given is kept, and a system job's count is left alone.
	s := &Job{ID: "s", Name: "S", Namespace: "prod", Type: JobTypeSysBatch, TaskGroups: []*TaskGroup{{Name: "g"}}}
	s.Canonicalize()
	must.Eq(t, &Job{ID: "s", Name: "S", Namespace: "prod", Type: JobTypeSysBatch, TaskGroups: []*TaskGroup{{Name: "g"}}}, s)

	var nilJob *Job
	nilJob.Canonicalize()
}

// Every size a caller controls is bounded, and the error names the field
// and the limit.
func TestJob_Validate_Limits(t *testing.T) {
	cases := map[string]struct {
		change func(j *Job)
		want   string
	}{
		"count": {func(j *Job) { j.TaskGroups[0].Count = 2_000_000_000 }, `group "g": count 2000000000 is over the limit of 100000`},
		"groups": {func(j *Job) {
			for i := range MaxGroupsPerJob {
				g := validJob().TaskGroups[0]
				g.Name = strings.Repeat("g", i+2)
				j.TaskGroups = append(j.TaskGroups, g)
			}
		}, "job has 101 task groups; the limit is 100"},
		"tasks": {func(j *Job) {
			for range MaxTasksPerGroup {
				j.TaskGroups[0].Tasks = append(j.TaskGroups[0].Tasks, j.TaskGroups[0].Tasks[0])
			}
		}, `group "g": 101 tasks; the limit is 100`},
		"volumes": {func(j *Job) {
			for i := range MaxVolumesPerGroup {
				name := strings.Repeat("v", i+1)
				j.TaskGroups[0].Volumes[name] = &VolumeRequest{Name: name}
			}
		}, `group "g": 101 volumes; the limit is 100`},
		"args": {func(j *Job) { j.TaskGroups[0].Tasks[0].Config.Args = make([]string, MaxArgsPerTask+1) },
			`task "t": 1001 arguments; the limit is 1000`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			j := validJob()
			tc.change(j)
			err := j.Validate()
			must.Eq(t, ErrCodeInvalid, CodeOf(err))
			must.StrContains(t, err.Error(), tc.want)
		})
	}
}

// A job as submitted may hold null elements; the endpoints copy a job
// before validating it, so Copy must keep them (as nil, for Validate to
// report) instead of dereferencing them. Found by FuzzParseJob: over the
// RPC port, the panic in Job.Register took the server down.
func TestJob_CopyKeepsNullElements(t *testing.T) {
	job := &Job{ID: "j", TaskGroups: []*TaskGroup{
		nil,
		{Name: "g", Volumes: map[string]*VolumeRequest{"data": nil},
			Tasks: []*Task{nil, {Name: "t", Driver: TaskDriverExec, VolumeMounts: []*VolumeMount{nil}}}},
	}, Placement: map[string]*GroupPlacement{"g": nil}}
	c := job.Copy()
	must.Eq(t, job, c)
	c.Canonicalize()
	err := c.Validate()
	must.Eq(t, ErrCodeInvalid, CodeOf(err))
	must.StrContains(t, err.Error(), "task group 1 is empty")
	must.StrContains(t, err.Error(), "task 1 is empty")
}
