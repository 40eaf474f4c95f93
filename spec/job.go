package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/volplane/volplane/structs"
)

// ParseJob parses one job specification, the file an operator passes to
// `volplane job run`: the subset of Nomad's job HCL that volumes need, or
// JSON with the field names of structs.Job, either bare or as the body of
// the register endpoint ({"Job": {...}}). filename is used in error
// messages only. The job is canonicalized (defaults filled in) but not
// validated: that is the server's call (structs.Job.Validate).
func ParseJob(filename string, src []byte) (*structs.Job, error) {
	if filename == "" {
		filename = "<input>"
	}
	trimmed := bytes.TrimSpace(bytes.TrimPrefix(src, []byte("\xef\xbb\xbf")))
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s: job specification is empty", filename)
	}
	var (
		job *structs.Job
		err error
	)
	if trimmed[0] == '{' {
		job, err = parseJobJSON(filename, src)
	} else {
		job, err = parseJobHCL(filename, src)
	}
	if err != nil {
		return nil, err
	}
	job.Canonicalize()
	return job, nil
}

// The HCL schema of a job specification.
type hclJobFile struct {
	Jobs []*hclJob `hcl:"job,block"`
}

type hclJob struct {
	ID        string      `hcl:"id,label"`
	IDRange   hcl.Range   `hcl:"id,label_range"`
	Name      string      `hcl:"name,optional"`
	Type      string      `hcl:"type,optional"`
	Namespace string      `hcl:"namespace,optional"`
	Update    *hclUpdate  `hcl:"update,block"`
	Groups    []*hclGroup `hcl:"group,block"`
}

// hclUpdate is an update block, Nomad's. volplane honours max_parallel
// (Nomad's default, 1, when left out); the other attributes are accepted,
// for job files written for Nomad, and ignored.
type hclUpdate struct {
	MaxParallel      *int      `hcl:"max_parallel,optional"`
	MaxParallelRange hcl.Range `hcl:"max_parallel,attr_value_range"`
	Stagger          string    `hcl:"stagger,optional"`
	HealthCheck      string    `hcl:"health_check,optional"`
	MinHealthyTime   string    `hcl:"min_healthy_time,optional"`
	HealthyDeadline  string    `hcl:"healthy_deadline,optional"`
	ProgressDeadline string    `hcl:"progress_deadline,optional"`
	AutoRevert       bool      `hcl:"auto_revert,optional"`
	AutoPromote      bool      `hcl:"auto_promote,optional"`
	Canary           int       `hcl:"canary,optional"`
}

// toStructs returns the update strategy; nil for no block.
func (u *hclUpdate) toStructs() (*structs.UpdateStrategy, hcl.Diagnostics) {
	if u == nil {
		return nil, nil
	}
	out := &structs.UpdateStrategy{MaxParallel: structs.DefaultUpdateMaxParallel}
	if u.MaxParallel != nil {
		out.MaxParallel = *u.MaxParallel
	}
	if out.MaxParallel < 0 {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid max_parallel",
			Detail:   "max_parallel must be 0 (replace every allocation at once) or more.",
			Subject:  u.MaxParallelRange.Ptr(),
		}}
	}
	return out, nil
}

type hclGroup struct {
	Name string `hcl:"name,label"`
	// Count is a pointer so that an absent count (1) and count = 0 (refused)
	// can be told apart.
	Count      *int            `hcl:"count,optional"`
	CountRange hcl.Range       `hcl:"count,attr_value_range"`
	Volumes    []*hclVolumeReq `hcl:"volume,block"`
	Tasks      []*hclTask      `hcl:"task,block"`
	Update     *hclUpdate      `hcl:"update,block"`
	NameRange  hcl.Range       `hcl:"name,label_range"`
}

// hclVolumeReq is a group's volume block; its mount_options block is the
// volume specification's.
type hclVolumeReq struct {
	Name           string           `hcl:"name,label"`
	Type           string           `hcl:"type"`
	Source         string           `hcl:"source"`
	ReadOnly       bool             `hcl:"read_only,optional"`
	AccessMode     string           `hcl:"access_mode,optional"`
	AttachmentMode string           `hcl:"attachment_mode,optional"`
	PerAlloc       bool             `hcl:"per_alloc,optional"`
	MountOptions   *hclMountOptions `hcl:"mount_options,block"`
	NameRange      hcl.Range        `hcl:"name,label_range"`
}

type hclTask struct {
	Name         string            `hcl:"name,label"`
	Driver       string            `hcl:"driver"`
	Config       *hclTaskConfig    `hcl:"config,block"`
	VolumeMounts []*hclVolumeMount `hcl:"volume_mount,block"`
	// CSIPlugin is a pointer, so gohcl refuses a second csi_plugin block
	// in a task ("Duplicate csi_plugin block").
	CSIPlugin *hclCSIPlugin `hcl:"csi_plugin,block"`
	NameRange hcl.Range     `hcl:"name,label_range"`
}

// hclCSIPlugin is a task's csi_plugin block, as Nomad's.
type hclCSIPlugin struct {
	ID                  string    `hcl:"id,optional"`
	Type                string    `hcl:"type,optional"`
	MountDir            string    `hcl:"mount_dir,optional"`
	StagePublishBaseDir string    `hcl:"stage_publish_base_dir,optional"`
	HealthTimeout       string    `hcl:"health_timeout,optional"`
	HealthTimeoutRange  hcl.Range `hcl:"health_timeout,attr_value_range"`
}

type hclTaskConfig struct {
	Command string   `hcl:"command"`
	Args    []string `hcl:"args,optional"`
}

type hclVolumeMount struct {
	Volume          string `hcl:"volume"`
	Destination     string `hcl:"destination,optional"`
	ReadOnly        bool   `hcl:"read_only,optional"`
	PropagationMode string `hcl:"propagation_mode,optional"`
}

// parseJobHCL parses and decodes an HCL job specification. Every problem
// is reported, each with its file, line and column.
func parseJobHCL(filename string, src []byte) (*structs.Job, error) {
	file, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	if body, ok := file.Body.(*hclsyntax.Body); ok && len(body.Attributes) == 0 && len(body.Blocks) == 0 {
		return nil, fmt.Errorf("%s: job specification is empty", filename)
	}
	var spec hclJobFile
	if diags := gohcl.DecodeBody(file.Body, nil, &spec); diags.HasErrors() {
		return nil, diagError(nameValueErrors(file.Body, diags))
	}
	switch len(spec.Jobs) {
	case 0:
		return nil, diagError(hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Missing job block",
			Detail:   `The file must hold one job block: job "name" { ... }.`,
			Subject:  file.Body.MissingItemRange().Ptr(),
		}})
	case 1:
	default:
		return nil, diagError(hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Duplicate job block",
			Detail:   "A job specification holds exactly one job block.",
			Subject:  jobBlockRange(file.Body, 1),
		}})
	}

	hj := spec.Jobs[0]
	if hj.ID == "" {
		// As in JSON: a job without an ID is not a job specification.
		return nil, diagError(hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Missing job ID",
			Detail:   `The job block's label is the job's ID: job "name" { ... }.`,
			Subject:  hj.IDRange.Ptr(),
		}})
	}
	job := &structs.Job{ID: hj.ID, Name: hj.Name, Type: hj.Type, Namespace: hj.Namespace}
	job.Update, diags = hj.Update.toStructs()
	groups := map[string]bool{}
	for _, hg := range hj.Groups {
		if groups[hg.Name] {
			diags = append(diags, duplicate("group", hg.Name, hg.NameRange))
			continue
		}
		groups[hg.Name] = true
		tg, d := hg.toStructs(job.Type)
		diags = append(diags, d...)
		job.TaskGroups = append(job.TaskGroups, tg)
	}
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	return job, nil
}

func (hg *hclGroup) toStructs(jobType string) (*structs.TaskGroup, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	tg := &structs.TaskGroup{Name: hg.Name, Count: 1}
	tg.Update, diags = hg.Update.toStructs()
	if hg.Count != nil {
		tg.Count = *hg.Count
		// Canonicalize reads 0 as "not given", so an explicit 0 would run
		// one allocation: refuse it rather than surprise the operator.
		if tg.Count == 0 && jobType != structs.JobTypeSystem && jobType != structs.JobTypeSysBatch {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid count",
				Detail:   `A group's count must be at least 1; to stop a job's allocations, use "volplane job stop".`,
				Subject:  hg.CountRange.Ptr(),
			})
		}
	}
	for _, hv := range hg.Volumes {
		if _, dup := tg.Volumes[hv.Name]; dup {
			diags = append(diags, duplicate("volume", hv.Name, hv.NameRange))
			continue
		}
		if tg.Volumes == nil {
			tg.Volumes = map[string]*structs.VolumeRequest{}
		}
		req := &structs.VolumeRequest{
			Name:           hv.Name,
			Type:           hv.Type,
			Source:         hv.Source,
			ReadOnly:       hv.ReadOnly,
			AccessMode:     structs.CSIVolumeAccessMode(hv.AccessMode),
			AttachmentMode: structs.CSIVolumeAttachmentMode(hv.AttachmentMode),
			PerAlloc:       hv.PerAlloc,
		}
		if m := hv.MountOptions; m != nil {
			req.MountOptions = &structs.CSIMountOptions{FSType: m.FSType, MountFlags: m.MountFlags}
		}
		tg.Volumes[hv.Name] = req
	}
	tasks := map[string]bool{}
	for _, ht := range hg.Tasks {
		if tasks[ht.Name] {
			diags = append(diags, duplicate("task", ht.Name, ht.NameRange))
			continue
		}
		tasks[ht.Name] = true
		task := &structs.Task{Name: ht.Name, Driver: ht.Driver}
		if ht.Config != nil {
			task.Config = structs.TaskConfig{Command: ht.Config.Command, Args: ht.Config.Args}
		}
		for _, hm := range ht.VolumeMounts {
			task.VolumeMounts = append(task.VolumeMounts, &structs.VolumeMount{
				Volume:          hm.Volume,
				Destination:     hm.Destination,
				ReadOnly:        hm.ReadOnly,
				PropagationMode: hm.PropagationMode,
			})
		}
		if hp := ht.CSIPlugin; hp != nil {
			cfg := &structs.TaskCSIPluginConfig{
				ID: hp.ID, Type: structs.CSIPluginType(hp.Type),
				MountDir: hp.MountDir, StagePublishBaseDir: hp.StagePublishBaseDir,
			}
			if hp.HealthTimeout != "" {
				d, err := time.ParseDuration(hp.HealthTimeout)
				if err != nil {
					diags = append(diags, &hcl.Diagnostic{
						Severity: hcl.DiagError,
						Summary:  "Invalid health_timeout",
						Detail:   fmt.Sprintf("health_timeout %q is not a duration (e.g. \"30s\", \"2m\").", hp.HealthTimeout),
						Subject:  hp.HealthTimeoutRange.Ptr(),
					})
				}
				cfg.HealthTimeout = d
			}
			task.CSIPluginConfig = cfg
		}
		tg.Tasks = append(tg.Tasks, task)
	}
	return tg, diags
}

func duplicate(kind, name string, at hcl.Range) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  fmt.Sprintf("Duplicate %s block", kind),
		Detail:   fmt.Sprintf("A %s named %q is already defined in this scope.", kind, name),
		Subject:  at.Ptr(),
	}
}

// jobBlockRange is the range of the n-th (from 0) job block of body.
func jobBlockRange(body hcl.Body, n int) *hcl.Range {
	if syn, ok := body.(*hclsyntax.Body); ok {
		for _, b := range syn.Blocks {
			if b.Type != "job" {
				continue
			}
			if n == 0 {
				r := b.DefRange()
				return &r
			}
			n--
		}
	}
	return body.MissingItemRange().Ptr()
}

// parseJobJSON decodes a bare job object, or {"Job": {...}}, the body of
// the register endpoint. Unknown fields are errors, so that a misspelt
// field is not silently dropped. The fields the servers own (status,
// placement, version, indexes, the stop mark) are accepted, so that a job
// printed by `volplane job status -json` can be run again, and cleared.
func parseJobJSON(filename string, src []byte) (*structs.Job, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(src, &probe); err != nil {
		return nil, jsonError(filename, src, err)
	}
	if len(probe) == 0 {
		return nil, fmt.Errorf("%s: job specification is empty", filename)
	}
	obj, offset := src, 0
	if raw, ok := probe["Job"]; ok && len(probe) == 1 {
		if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil, fmt.Errorf("%s: Job is null", filename)
		}
		// Offsets in errors are relative to the inner object from here on;
		// shift them so that line numbers still match the file.
		obj, offset = raw, max(bytes.Index(src, raw), 0)
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
			return nil, fmt.Errorf("%s:%s: Job must be a job object", filename, position(src, offset))
		}
	}

	var job structs.Job
	if err := decodeStrict(filename, obj, src, offset, "job", &job); err != nil {
		return nil, err
	}
	if job.ID == "" {
		return nil, fmt.Errorf("%s: missing job ID", filename)
	}
	if err := explicitZeroCount(filename, &job, obj); err != nil {
		return nil, err
	}
	job.ClearServerFields()
	return &job, nil
}

// explicitZeroCount refuses "Count": 0 in a group of a service or batch job,
// for the reason given in hclGroup.toStructs.
func explicitZeroCount(filename string, job *structs.Job, obj []byte) error {
	if job.IsSystem() {
		return nil
	}
	var counts struct {
		TaskGroups []*struct{ Count *int }
	}
	if json.Unmarshal(obj, &counts) != nil {
		return nil
	}
	for i, g := range counts.TaskGroups {
		if g != nil && g.Count != nil && *g.Count == 0 && i < len(job.TaskGroups) && job.TaskGroups[i] != nil {
			return fmt.Errorf(`%s: group %q: Count must be at least 1; to stop a job's allocations, use "volplane job stop"`,
				filename, job.TaskGroups[i].Name)
		}
	}
	return nil
}
