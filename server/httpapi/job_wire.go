package httpapi

import (
	"bytes"
	"encoding/json"
	"slices"

	"github.com/volplane/volplane/structs"
)

// wireJob is a job as a caller sends it: volplane's structs.Job, or Nomad's
// api.Job as the nomad CLI and Nomad's Go client send it, after its
// Canonicalize filled in every default of Nomad's jobspec. Decoding stays
// strict: a field that neither has is a 400 naming it. Nomad's fields fall
// in two kinds (see nomadJobFields and friends):
//
//   - honoured: an update block's MaxParallel (see wireUpdate);
//   - accepted and ignored: what only tunes behaviour volplane does not have
//     (the update block's other fields, migrate strategies, restart and reschedule policies, task
//     resources, log rotation, kill timeouts, metadata, priorities), so the
//     defaults of every jobspec pass;
//   - refused when set: what would change where or how the job runs and
//     volplane cannot honour (constraints, affinities, spreads, networks,
//     services, periodic and parameterized jobs, environment, templates,
//     artifacts, ...); a 400 names the field, so a job never runs other
//     than its author meant.
type wireJob struct {
	structs.Job
	// TaskGroups shadows structs.Job's (a field of the outer struct wins
	// in encoding/json), so groups take Nomad's fields too.
	TaskGroups []*wireTaskGroup
	// Update shadows structs.Job's, to take Nomad's update block.
	Update *wireUpdate

	Datacenters json.RawMessage
	nomadJobFields
}

// wireUpdate is Nomad's update block (api.UpdateStrategy). MaxParallel is
// honoured, Nomad's default (1) when null; the rest tunes Nomad's
// deployments, which volplane does not have, and is ignored.
type wireUpdate struct {
	MaxParallel *int

	// Ignored.
	Stagger          json.RawMessage
	HealthCheck      json.RawMessage
	MinHealthyTime   json.RawMessage
	HealthyDeadline  json.RawMessage
	ProgressDeadline json.RawMessage
	Canary           json.RawMessage
	AutoRevert       json.RawMessage
	AutoPromote      json.RawMessage
}

// toStructs returns the update strategy volplane runs; nil for none.
func (u *wireUpdate) toStructs() *structs.UpdateStrategy {
	if u == nil {
		return nil
	}
	out := &structs.UpdateStrategy{MaxParallel: structs.DefaultUpdateMaxParallel}
	if u.MaxParallel != nil {
		// A negative value is left for structs.Job.Validate to report.
		out.MaxParallel = *u.MaxParallel
	}
	return out
}

// nomadJobFields are Nomad's job-level fields.
type nomadJobFields struct {
	// Ignored.
	Region                   json.RawMessage
	Priority                 json.RawMessage
	AllAtOnce                json.RawMessage
	NodePool                 json.RawMessage
	Reschedule               json.RawMessage
	Migrate                  json.RawMessage
	Meta                     json.RawMessage
	UI                       json.RawMessage
	ParentID                 json.RawMessage
	Dispatched               json.RawMessage
	DispatchIdempotencyToken json.RawMessage
	ConsulNamespace          json.RawMessage
	VaultNamespace           json.RawMessage
	NomadTokenID             json.RawMessage
	StatusDescription        json.RawMessage
	Stable                   json.RawMessage
	VersionTag               json.RawMessage

	// Refused when set.
	Constraints      json.RawMessage
	Affinities       json.RawMessage
	Spreads          json.RawMessage
	Multiregion      json.RawMessage
	Periodic         json.RawMessage
	ParameterizedJob json.RawMessage
	Payload          json.RawMessage
}

// wireTaskGroup is a task group with Nomad's fields.
type wireTaskGroup struct {
	structs.TaskGroup
	Volumes map[string]*wireVolumeRequest
	Tasks   []*wireTask
	Update  *wireUpdate

	// Ignored.
	RestartPolicy             json.RawMessage
	ReschedulePolicy          json.RawMessage
	EphemeralDisk             json.RawMessage
	Migrate                   json.RawMessage
	Meta                      json.RawMessage
	ShutdownDelay             json.RawMessage
	MaxRunDuration            json.RawMessage
	StopAfterClientDisconnect json.RawMessage
	MaxClientDisconnect       json.RawMessage
	Disconnect                json.RawMessage
	PreventRescheduleOnLost   json.RawMessage
	Scaling                   json.RawMessage
	Consul                    json.RawMessage

	// Refused when set.
	Constraints json.RawMessage
	Affinities  json.RawMessage
	Spreads     json.RawMessage
	Networks    json.RawMessage
	Services    json.RawMessage
}

// wireVolumeRequest is a group's volume request with Nomad's fields.
type wireVolumeRequest struct {
	structs.VolumeRequest
	// Sticky (host volumes) is refused when true.
	Sticky json.RawMessage
}

// wireTask is a task with Nomad's fields.
type wireTask struct {
	structs.Task
	VolumeMounts []*wireVolumeMount

	// Ignored.
	Resources       json.RawMessage
	RestartPolicy   json.RawMessage
	Meta            json.RawMessage
	KillTimeout     json.RawMessage
	LogConfig       json.RawMessage
	Leader          json.RawMessage
	ShutdownDelay   json.RawMessage
	KillSignal      json.RawMessage
	Kind            json.RawMessage
	ScalingPolicies json.RawMessage
	Identity        json.RawMessage
	Identities      json.RawMessage
	Actions         json.RawMessage

	// Refused when set.
	User            json.RawMessage
	Lifecycle       json.RawMessage
	Constraints     json.RawMessage
	Affinities      json.RawMessage
	Env             json.RawMessage
	Services        json.RawMessage
	Artifacts       json.RawMessage
	Vault           json.RawMessage
	Consul          json.RawMessage
	Templates       json.RawMessage
	DispatchPayload json.RawMessage
	Secrets         json.RawMessage
	Schedule        json.RawMessage
}

// wireVolumeMount is a task's volume mount with Nomad's fields.
type wireVolumeMount struct {
	structs.VolumeMount
	// SELinuxLabel is ignored: the exec driver does not relabel.
	SELinuxLabel json.RawMessage
}

// unset reports whether a raw JSON value leaves its field at the default:
// absent, null, false, 0, "" or an empty array or object.
func unset(raw json.RawMessage) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch x := v.(type) {
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// refuseSet returns the error for the first of fields that is set.
func refuseSet(where string, fields ...namedRaw) error {
	for _, f := range fields {
		if !unset(f.raw) {
			return structs.ErrInvalid("%s: %s is not supported by volplane; remove it from the job", where, f.name)
		}
	}
	return nil
}

type namedRaw struct {
	name string
	raw  json.RawMessage
}

// toStructs checks what must be refused and returns the job volplane
// runs. Null groups, tasks and mounts stay nil for structs.Job.Validate to
// report, as a volplane job's do.
func (wj *wireJob) toStructs() (*structs.Job, error) {
	job := wj.Job
	where := "job"
	if job.ID != "" {
		where = "job " + quote(job.ID)
	}
	if err := refuseSet(where,
		namedRaw{"Constraints", wj.Constraints}, namedRaw{"Affinities", wj.Affinities},
		namedRaw{"Spreads", wj.Spreads}, namedRaw{"Multiregion", wj.Multiregion},
		namedRaw{"Periodic", wj.Periodic}, namedRaw{"ParameterizedJob", wj.ParameterizedJob},
		namedRaw{"Payload", wj.Payload}); err != nil {
		return nil, err
	}
	if !unset(wj.Datacenters) {
		var dcs []string
		if err := json.Unmarshal(wj.Datacenters, &dcs); err != nil {
			return nil, structs.ErrInvalid("%s: Datacenters: expected a JSON array of strings", where)
		}
		// Nomad's default, "*", is every datacenter, which is what
		// volplane places on; naming datacenters would restrict placement,
		// which volplane cannot do.
		if slices.ContainsFunc(dcs, func(dc string) bool { return dc != "*" }) {
			return nil, structs.ErrInvalid(`%s: Datacenters %q is not supported by volplane, which places on every datacenter: use ["*"] or leave it out`, where, dcs)
		}
	}
	job.Update = wj.Update.toStructs()
	job.TaskGroups = nil
	if wj.TaskGroups != nil {
		job.TaskGroups = make([]*structs.TaskGroup, len(wj.TaskGroups))
	}
	for i, wg := range wj.TaskGroups {
		if wg == nil {
			continue
		}
		tg, err := wg.toStructs(where)
		if err != nil {
			return nil, err
		}
		job.TaskGroups[i] = tg
	}
	return &job, nil
}

func (wg *wireTaskGroup) toStructs(jobWhere string) (*structs.TaskGroup, error) {
	tg := wg.TaskGroup
	tg.Update = wg.Update.toStructs()
	where := jobWhere + " group " + quote(tg.Name)
	if err := refuseSet(where,
		namedRaw{"Constraints", wg.Constraints}, namedRaw{"Affinities", wg.Affinities},
		namedRaw{"Spreads", wg.Spreads}, namedRaw{"Networks", wg.Networks},
		namedRaw{"Services", wg.Services}); err != nil {
		return nil, err
	}
	tg.Volumes = nil
	if wg.Volumes != nil {
		tg.Volumes = make(map[string]*structs.VolumeRequest, len(wg.Volumes))
	}
	for alias, wv := range wg.Volumes {
		if wv == nil {
			tg.Volumes[alias] = nil
			continue
		}
		if err := refuseSet(where+" volume "+quote(alias), namedRaw{"Sticky", wv.Sticky}); err != nil {
			return nil, err
		}
		v := wv.VolumeRequest
		tg.Volumes[alias] = &v
	}
	tg.Tasks = nil
	if wg.Tasks != nil {
		tg.Tasks = make([]*structs.Task, len(wg.Tasks))
	}
	for i, wt := range wg.Tasks {
		if wt == nil {
			continue
		}
		t := wt.Task
		twhere := where + " task " + quote(t.Name)
		if err := refuseSet(twhere,
			namedRaw{"User", wt.User}, namedRaw{"Lifecycle", wt.Lifecycle},
			namedRaw{"Constraints", wt.Constraints}, namedRaw{"Affinities", wt.Affinities},
			namedRaw{"Env", wt.Env}, namedRaw{"Services", wt.Services},
			namedRaw{"Artifacts", wt.Artifacts}, namedRaw{"Vault", wt.Vault},
			namedRaw{"Consul", wt.Consul}, namedRaw{"Templates", wt.Templates},
			namedRaw{"DispatchPayload", wt.DispatchPayload}, namedRaw{"Secrets", wt.Secrets},
			namedRaw{"Schedule", wt.Schedule}); err != nil {
			return nil, err
		}
		t.VolumeMounts = nil
		if wt.VolumeMounts != nil {
			t.VolumeMounts = make([]*structs.VolumeMount, len(wt.VolumeMounts))
		}
		for k, wm := range wt.VolumeMounts {
			if wm != nil {
				m := wm.VolumeMount
				t.VolumeMounts[k] = &m
			}
		}
		tg.Tasks[i] = &t
	}
	return &tg, nil
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
