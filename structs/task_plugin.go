package structs

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Defaults of a task's csi_plugin block, as Nomad's.
const (
	DefaultCSIPluginMountDir            = "/csi"
	DefaultCSIPluginStagePublishBaseDir = "/local/csi"
	DefaultCSIPluginHealthTimeout       = 30 * time.Second
	// MaxCSIPluginHealthTimeout bounds how long a client waits for a
	// plugin task's socket.
	MaxCSIPluginHealthTimeout = time.Hour
)

// TaskCSIPluginConfig makes a task a CSI plugin (the job's csi_plugin
// block): the client gives the task a socket directory, waits for the
// plugin's socket in it, fingerprints the plugin and registers it on the
// node for as long as the task runs. Field names are Nomad's.
type TaskCSIPluginConfig struct {
	// ID is the plugin ID volumes name (plugin_id).
	ID string
	// Type is which services the task runs: node, controller or monolith.
	Type CSIPluginType
	// MountDir is where the task expects its socket directory (the plugin
	// creates csi.sock in it).
	MountDir string
	// StagePublishBaseDir is where the task expects staging and target
	// paths; it must not be under MountDir.
	StagePublishBaseDir string
	// HealthTimeout is how long the client waits for the plugin to create
	// its socket and answer healthy before it fails the task.
	HealthTimeout time.Duration
}

// Copy returns a copy.
func (c *TaskCSIPluginConfig) Copy() *TaskCSIPluginConfig {
	if c == nil {
		return nil
	}
	cc := *c
	return &cc
}

// Canonicalize fills in Nomad's defaults.
func (c *TaskCSIPluginConfig) Canonicalize() {
	if c.MountDir == "" {
		c.MountDir = DefaultCSIPluginMountDir
	}
	if c.StagePublishBaseDir == "" {
		c.StagePublishBaseDir = DefaultCSIPluginStagePublishBaseDir
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = DefaultCSIPluginHealthTimeout
	}
}

// validate adds the problems of a task's csi_plugin block; the first
// three messages are Nomad's.
func (c *TaskCSIPluginConfig) validate(m *MultiError, where string) {
	if c.ID == "" {
		m.Add("%s: CSIPluginConfig must have a non-empty PluginID", where)
	} else if err := ValidateID("plugin id", c.ID); err != nil {
		m.Add("%s: CSIPluginConfig: %s", where, MessageOf(err))
	}
	if !c.Type.Valid() {
		m.Add(`%s: CSIPluginConfig PluginType must be one of 'node', 'controller', or 'monolith', got: "%s"`, where, c.Type)
	}
	if c.StagePublishBaseDir != "" && c.MountDir != "" && isSubdirectory(c.MountDir, c.StagePublishBaseDir) {
		m.Add(`%s: CSIPluginConfig StagePublishBaseDir must not be a subdirectory of MountDir, got: StagePublishBaseDir="%s" MountDir="%s"`,
			where, c.StagePublishBaseDir, c.MountDir)
	}
	for _, d := range []struct{ name, path string }{{"MountDir", c.MountDir}, {"StagePublishBaseDir", c.StagePublishBaseDir}} {
		if d.path != "" && !filepath.IsAbs(d.path) {
			m.Add("%s: CSIPluginConfig %s must be an absolute path, got: %q", where, d.name, d.path)
		}
	}
	switch {
	case c.HealthTimeout < 0:
		m.Add("%s: CSIPluginConfig HealthTimeout must not be negative, got: %s", where, c.HealthTimeout)
	case c.HealthTimeout > MaxCSIPluginHealthTimeout:
		m.Add("%s: CSIPluginConfig HealthTimeout %s is over the limit of %s", where, c.HealthTimeout, MaxCSIPluginHealthTimeout)
	}
}

// isSubdirectory reports whether sub is base or under it.
func isSubdirectory(base, sub string) bool {
	rel, err := filepath.Rel(filepath.Clean(base), filepath.Clean(sub))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// IsPlugin reports whether a task of the job runs a CSI plugin.
func (j *Job) IsPlugin() bool {
	for _, tg := range j.TaskGroups {
		if tg == nil {
			continue
		}
		for _, t := range tg.Tasks {
			if t != nil && t.CSIPluginConfig != nil {
				return true
			}
		}
	}
	return false
}

// Warnings returns advice about a valid job that may not do what its
// author wants, one line each; nil when there is none.
func (j *Job) Warnings() []string {
	var w []string
	if j.Type == JobTypeSystem {
		return nil
	}
	for _, tg := range j.TaskGroups {
		if tg == nil {
			continue
		}
		for _, t := range tg.Tasks {
			if t == nil || t.CSIPluginConfig == nil {
				continue
			}
			switch t.CSIPluginConfig.Type {
			case CSIPluginTypeNode, CSIPluginTypeMonolith:
				// A node plugin must run on every node that mounts the
				// plugin's volumes; a system job places it on each.
				w = append(w, fmt.Sprintf("group %q task %q: %s plugin %q runs only where the scheduler places it; node and monolith plugins belong in system jobs",
					tg.Name, t.Name, t.CSIPluginConfig.Type, t.CSIPluginConfig.ID))
			}
		}
	}
	return w
}
