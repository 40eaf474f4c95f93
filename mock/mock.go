// Package mock builds the objects tests and benchmarks need: nodes with
// plugin fingerprints and volumes, each with fresh IDs. It ships (volplane
// bench uses it), so it imports no test package.
package mock

import (
	"fmt"
	"sync/atomic"

	"github.com/volplane/volplane/structs"
)

var seq atomic.Uint64

// UniqueID returns a new ID with a readable prefix.
func UniqueID(prefix string) string {
	return fmt.Sprintf("%s-%06d", prefix, seq.Add(1))
}

// Node returns a node running a healthy node-only instance of each plugin:
// no controller, so registering a volume of the plugin needs no agent to
// answer ControllerValidateVolume.
func Node(plugins ...string) *structs.Node {
	n := bareNode()
	for _, p := range plugins {
		info := NodeInfo(p, n.ID, true)
		info.RequiresControllerPlugin = false
		n.CSINodePlugins[p] = info
	}
	return n
}

// NodeWithController returns a node running a healthy monolith instance
// (controller and node) of each plugin. Volumes of such a plugin are
// validated by a controller at registration, so the node's agent must be
// connected to answer.
func NodeWithController(plugins ...string) *structs.Node {
	n := bareNode()
	for _, p := range plugins {
		n.CSIControllerPlugins[p] = ControllerInfo(p, true)
		n.CSINodePlugins[p] = NodeInfo(p, n.ID, true)
	}
	return n
}

func bareNode() *structs.Node {
	id := UniqueID("node")
	return &structs.Node{
		ID:                   id,
		Name:                 id,
		SecretID:             UniqueID("secret"),
		Datacenter:           "dc1",
		Status:               structs.NodeStatusReady,
		CSIControllerPlugins: map[string]*structs.CSIInfo{},
		CSINodePlugins:       map[string]*structs.CSIInfo{},
	}
}

// ControllerInfo is a controller fingerprint that supports attach/detach.
func ControllerInfo(plugin string, healthy bool) *structs.CSIInfo {
	return &structs.CSIInfo{
		PluginID:                 plugin,
		Healthy:                  healthy,
		HealthDescription:        healthText(healthy),
		Provider:                 "dev.csi.volplane.io",
		ProviderVersion:          "1.0.0",
		RequiresControllerPlugin: true,
		ControllerInfo: &structs.CSIControllerInfo{
			SupportsAttachDetach: true,
			SupportsCreateDelete: true,
		},
	}
}

// NodeInfo is a node fingerprint whose provider node ID is derived from the
// node's ID.
func NodeInfo(plugin, nodeID string, healthy bool) *structs.CSIInfo {
	return &structs.CSIInfo{
		PluginID:                 plugin,
		Healthy:                  healthy,
		HealthDescription:        healthText(healthy),
		Provider:                 "dev.csi.volplane.io",
		ProviderVersion:          "1.0.0",
		RequiresControllerPlugin: true,
		NodeInfo: &structs.CSINodeInfo{
			ID:                      "ext-" + nodeID,
			MaxVolumes:              100,
			RequiresNodeStageVolume: true,
		},
	}
}

func healthText(h bool) string {
	if h {
		return "healthy"
	}
	return "probe failed"
}

// CSIVolume returns a file-system volume of plugin that allows every access
// mode.
func CSIVolume(plugin string) *structs.CSIVolume {
	id := UniqueID("vol")
	return &structs.CSIVolume{
		ID:         id,
		Namespace:  structs.DefaultNamespace,
		Name:       id,
		ExternalID: "ext-" + id,
		PluginID:   plugin,
		RequestedCapabilities: []*structs.CSIVolumeCapability{
			{AccessMode: structs.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
			{AccessMode: structs.CSIVolumeAccessModeMultiNodeReader, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
			{AccessMode: structs.CSIVolumeAccessModeMultiNodeSingleWriter, AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem},
		},
		MountOptions: &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime", "password=hunter2"}},
		Secrets:      structs.CSISecrets{"token": "s3cr3t-token"},
		Parameters:   map[string]string{"class": "fast"},
	}
}
