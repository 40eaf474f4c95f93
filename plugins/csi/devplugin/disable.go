package devplugin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// An instance can be told to lack capabilities (Config.Disable), so that a
// CO's tests cover the plugins that do not have them. A disabled capability
// is not advertised, and the calls it covers answer UNIMPLEMENTED (or, for
// what is part of another call, such as cloning in CreateVolume,
// INVALID_ARGUMENT). The names:
//
//	controller:<NAME>  a controller capability by its CSI name,
//	                   e.g. controller:CREATE_DELETE_SNAPSHOT
//	node:<NAME>        a node capability, e.g. node:STAGE_UNSTAGE_VOLUME
//	plugin:ONLINE      online expansion: the plugin advertises its
//	                   VolumeExpansion as OFFLINE and refuses to expand a
//	                   volume that is controller-published
//	plugin:CONTROLLER_SERVICE
//	                   a node-only plugin: it advertises neither the
//	                   controller nor the group controller service, and
//	                   every controller capability is off with it (a CO
//	                   then needs no controller to register its volumes)
//
// Without node:STAGE_UNSTAGE_VOLUME, NodePublishVolume takes no staging
// path; without controller:PUBLISH_UNPUBLISH_VOLUME, the node calls need
// no controller publication. With node:EXPAND_VOLUME (the default)
// ControllerExpandVolume answers that node expansion is required, and the
// node sees the new size only after NodeExpandVolume.
const (
	prefixController = "controller:"
	prefixNode       = "node:"
	// CapabilityOnlineExpansion is Config.Disable's name for online
	// expansion.
	CapabilityOnlineExpansion = "plugin:ONLINE"
	// CapabilityControllerService is Config.Disable's name for the
	// controller service as a whole.
	CapabilityControllerService = "plugin:CONTROLLER_SERVICE"
)

// Names of the capabilities Config.Disable takes most often.
const (
	CapabilityCreateDeleteSnapshot = prefixController + "CREATE_DELETE_SNAPSHOT"
	CapabilityListSnapshots        = prefixController + "LIST_SNAPSHOTS"
	CapabilityListVolumes          = prefixController + "LIST_VOLUMES"
	CapabilityCloneVolume          = prefixController + "CLONE_VOLUME"
	CapabilityControllerExpand     = prefixController + "EXPAND_VOLUME"
	CapabilityNodeExpand           = prefixNode + "EXPAND_VOLUME"
	CapabilityStageUnstage         = prefixNode + "STAGE_UNSTAGE_VOLUME"
)

// rpcCapability is the capability each call needs, for the calls that
// need one of their own.
var rpcCapability = map[string]string{
	"CreateVolume":               "controller:CREATE_DELETE_VOLUME",
	"DeleteVolume":               "controller:CREATE_DELETE_VOLUME",
	"ControllerPublishVolume":    "controller:PUBLISH_UNPUBLISH_VOLUME",
	"ControllerUnpublishVolume":  "controller:PUBLISH_UNPUBLISH_VOLUME",
	"ListVolumes":                CapabilityListVolumes,
	"GetCapacity":                "controller:GET_CAPACITY",
	"CreateSnapshot":             CapabilityCreateDeleteSnapshot,
	"DeleteSnapshot":             CapabilityCreateDeleteSnapshot,
	"ListSnapshots":              CapabilityListSnapshots,
	"ControllerExpandVolume":     CapabilityControllerExpand,
	"ControllerGetVolume":        "controller:GET_VOLUME",
	"ControllerModifyVolume":     "controller:MODIFY_VOLUME",
	"GetSnapshot":                "controller:GET_SNAPSHOT",
	"ControllerGetVolumeHealth":  "controller:GET_VOLUME_HEALTH",
	"ControllerListVolumeHealth": "controller:LIST_VOLUME_HEALTH",
	"NodeStageVolume":            CapabilityStageUnstage,
	"NodeUnstageVolume":          CapabilityStageUnstage,
	"NodeGetVolumeStats":         "node:GET_VOLUME_STATS",
	"NodeExpandVolume":           CapabilityNodeExpand,
	"NodeGetVolumeHealth":        "node:GET_VOLUME_HEALTH",
	"NodeGetStorageHealth":       "node:GET_STORAGE_HEALTH",
}

// checkDisable returns the set of valid names in names, or an error naming
// one that is not a capability of this plugin.
func checkDisable(names []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, n := range names {
		known := n == CapabilityOnlineExpansion || n == CapabilityControllerService
		if name, ok := strings.CutPrefix(n, prefixController); ok {
			known = slices.Contains(controllerRPCs, csi.ControllerServiceCapability_RPC_Type(csi.ControllerServiceCapability_RPC_Type_value[name])) &&
				csi.ControllerServiceCapability_RPC_Type_value[name] != 0
		}
		if name, ok := strings.CutPrefix(n, prefixNode); ok {
			known = slices.Contains(nodeRPCs, csi.NodeServiceCapability_RPC_Type(csi.NodeServiceCapability_RPC_Type_value[name])) &&
				csi.NodeServiceCapability_RPC_Type_value[name] != 0
		}
		if !known {
			return nil, fmt.Errorf("devplugin: cannot disable %q: not one of controller:<CAPABILITY>, node:<CAPABILITY> (the plugin's, by CSI name), %s or %s",
				n, CapabilityOnlineExpansion, CapabilityControllerService)
		}
		out[n] = true
	}
	return out, nil
}

// has reports whether this instance has the capability (not disabled):
// without the controller service, no controller capability.
func (p *Plugin) has(capability string) bool {
	if p.disabled[CapabilityControllerService] && strings.HasPrefix(capability, prefixController) {
		return false
	}
	return !p.disabled[capability]
}

// disabledCall answers a call whose capability is disabled on this
// instance, or returns nil.
func (p *Plugin) disabledCall(method string) error {
	if c, ok := rpcCapability[method]; ok && !p.has(c) {
		return errorf(codes.Unimplemented, "%s is not offered: this instance was started without %s", method, c)
	}
	return nil
}

func (p *Plugin) controllerCapabilities() []csi.ControllerServiceCapability_RPC_Type {
	return enabled(p, prefixController, controllerRPCs)
}

func (p *Plugin) nodeCapabilities() []csi.NodeServiceCapability_RPC_Type {
	return enabled(p, prefixNode, nodeRPCs)
}

// enabled are the capabilities of all (named prefix + their CSI name) that
// this instance has.
func enabled[T fmt.Stringer](p *Plugin, prefix string, all []T) []T {
	var out []T
	for _, t := range all {
		if p.has(prefix + t.String()) {
			out = append(out, t)
		}
	}
	return out
}
