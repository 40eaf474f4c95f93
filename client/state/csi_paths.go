// Package state holds the client's durable records that outlive an
// allocation runner and are read by the server-driven calls: the registry of
// which allocation has which volume published where (UsageRegistry), the
// layout of CSI staging and target paths under the data dir (CSIPaths), and
// the atomic file write both rely on.
package state

import (
	"path/filepath"
	"strings"

	"github.com/volplane/volplane/structs"
)

// The layout of the CSI paths under the client's data dir. It is defined
// here and nowhere else: the allocation runner stages and publishes at these
// paths, and NodeDetachVolume unpublishes and unstages at them.
//
//	<data dir>/csi/staging/<plugin>/<namespace>/<volume>/<mode>   NodeStageVolume's staging_target_path
//	<data dir>/csi/alloc/<alloc>/<volume>                        NodePublishVolume's target_path
//
// <mode> is the usage the volume is staged for (see UsageMode), so that one
// volume staged for two different uses gets two staging paths. The client
// creates the staging directory and the parent of a target path; the plugin
// creates the target path itself, as the CSI spec asks.
const (
	CSIDir     = "csi"
	stagingDir = "staging"
	allocDir   = "alloc"
)

// CSIPaths computes staging and target paths under a data dir.
type CSIPaths struct {
	root string
}

// NewCSIPaths returns the path scheme rooted at dataDir.
func NewCSIPaths(dataDir string) CSIPaths {
	return CSIPaths{root: filepath.Join(dataDir, CSIDir)}
}

// UsageMode is how a volume is used on the node, as it appears in its
// staging path: "rw-file-system-single-node-writer", say.
func UsageMode(access structs.CSIVolumeAccessMode, attachment structs.CSIVolumeAttachmentMode, readOnly bool) string {
	rw := "rw"
	if readOnly {
		rw = "ro"
	}
	return rw + "-" + orUnknown(string(attachment)) + "-" + orUnknown(string(access))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// StagingPath is where a node plugin stages a volume for a use.
func (p CSIPaths) StagingPath(pluginID, namespace, volumeID, mode string) string {
	if namespace == "" {
		namespace = structs.DefaultNamespace
	}
	return filepath.Join(p.root, stagingDir, Segment(pluginID), Segment(namespace), Segment(volumeID), Segment(mode))
}

// TargetPath is where a node plugin publishes a volume for an allocation.
// Its parent (AllocDir) is the client's to create; the path itself is the
// plugin's.
func (p CSIPaths) TargetPath(allocID, volumeID string) string {
	return filepath.Join(p.AllocDir(allocID), Segment(volumeID))
}

// AllocDir is the directory holding an allocation's target paths.
func (p CSIPaths) AllocDir(allocID string) string {
	return filepath.Join(p.root, allocDir, Segment(allocID))
}

// Segment makes an ID safe as one path element. IDs cannot contain "/" or
// "%" (structs.ValidateID), but "." and ".." are valid IDs; they are spelled
// with "%" so that no other ID can map to the same element.
func Segment(id string) string {
	switch id {
	case "":
		return "%empty"
	case ".", "..":
		return strings.Repeat("%2E", len(id))
	}
	return strings.ReplaceAll(id, "/", "%2F")
}
