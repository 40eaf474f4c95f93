package devplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// capability is a volume capability as the state file keeps it.
type capability struct {
	AccessMode string `json:"access_mode"`
	AccessType string `json:"access_type"`
	FSType     string `json:"fs_type,omitempty"`
	// MountFlagsHash tells calls with different mount flags apart without
	// storing the flags, which may carry credentials.
	MountFlagsHash string `json:"mount_flags_hash,omitempty"`
}

const accessTypeMount = "mount"

var (
	// errCapabilityInvalid: a required part of the capability is missing.
	errCapabilityInvalid = errors.New("invalid volume capability")
	// errCapabilityUnsupported: well formed, but not something this plugin
	// can provide (block volumes).
	errCapabilityUnsupported = errors.New("unsupported volume capability")
)

// toCapability checks a capability from a request and converts it.
func toCapability(c *csi.VolumeCapability) (capability, error) {
	if c == nil {
		return capability{}, errCapabilityInvalid
	}
	mode := c.GetAccessMode().GetMode()
	if _, known := csi.VolumeCapability_AccessMode_Mode_name[int32(mode)]; !known ||
		mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return capability{}, errCapabilityInvalid
	}
	switch {
	case c.GetMount() != nil:
		m := c.GetMount()
		out := capability{AccessMode: mode.String(), AccessType: accessTypeMount, FSType: m.GetFsType()}
		if len(m.GetMountFlags()) > 0 {
			sum := sha256.Sum256([]byte(strings.Join(m.GetMountFlags(), "\x00")))
			out.MountFlagsHash = hex.EncodeToString(sum[:8])
		}
		return out, nil
	case c.GetBlock() != nil:
		// A directory cannot be handed out as a block device.
		return capability{}, errCapabilityUnsupported
	default:
		return capability{}, errCapabilityInvalid
	}
}

func (c capability) mode() csi.VolumeCapability_AccessMode_Mode {
	return csi.VolumeCapability_AccessMode_Mode(csi.VolumeCapability_AccessMode_Mode_value[c.AccessMode])
}

// singleNode reports whether the mode allows the volume on one node at a
// time.
func singleNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// multiTarget reports whether the mode allows several NodePublishVolume
// targets for the volume on one node (the spec's second NodePublishVolume
// table).
func multiTarget(m csi.VolumeCapability_AccessMode_Mode) bool {
	return !singleNode(m) || m == csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
}

// controllerRPCs are the controller capabilities; every one of them is
// implemented.
var controllerRPCs = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
}

var nodeRPCs = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.NodeServiceCapability_RPC_GET_STORAGE_HEALTH,
}

// mutableParameters are the keys ControllerModifyVolume (and CreateVolume's
// mutable_parameters) accept, with their allowed values. They are recorded
// only: a directory has no performance tier.
var mutableParameters = map[string][]string{
	"tier": {"standard", "fast"},
}

func validMutableParameters(p map[string]string) bool {
	for k, v := range p {
		if !slices.Contains(mutableParameters[k], v) {
			return false
		}
	}
	return true
}

// sameMap compares maps treating nil and empty alike.
func sameMap(a, b map[string]string) bool {
	return len(a) == len(b) && maps.Equal(a, b)
}

// topologyMatches reports whether a node with topology nodeTopo can reach a
// volume restricted to volTopo: every segment of the volume must be the
// node's.
func topologyMatches(volTopo, nodeTopo map[string]string) bool {
	for k, v := range volTopo {
		if nodeTopo[k] != v {
			return false
		}
	}
	return true
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
