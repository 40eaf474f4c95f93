package csimanager

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/volplane/volplane/structs"
)

// PluginConfig is one CSI plugin the client drives.
type PluginConfig struct {
	// ID is the plugin ID volumes name (plugin_id).
	ID string
	// Endpoint is the plugin's socket, "unix:///abs/path.sock".
	Endpoint string
	// Type says which services of the plugin this instance runs; "" means
	// what the plugin's capabilities say (monolith when it offers the
	// controller service, node otherwise).
	Type structs.CSIPluginType
	// AllocID is the allocation whose task runs the instance; "" for a
	// static plugin. The node reports it (CSIInfo.AllocID, as Nomad's), so
	// the servers can tell a new instance from the one it replaces.
	AllocID string
}

// Validate checks a plugin's settings; its errors do not repeat the ID.
func (p PluginConfig) Validate() error {
	if err := structs.ValidateID("plugin id", p.ID); err != nil {
		return errors.New(structs.MessageOf(err))
	}
	if _, err := EndpointPath(p.Endpoint); err != nil {
		return err
	}
	if p.Type != "" && !p.Type.Valid() {
		return fmt.Errorf("unknown type %q (want monolith, node or controller)", p.Type)
	}
	return nil
}

// EndpointPath returns the socket path of a "unix:///abs/path" endpoint
// (a bare absolute path is accepted too).
func EndpointPath(endpoint string) (string, error) {
	path := endpoint
	if rest, ok := strings.CutPrefix(endpoint, "unix://"); ok {
		path = rest
	} else if strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: only unix:// sockets are supported", endpoint)
	}
	switch {
	case endpoint == "":
		return "", errors.New("missing endpoint")
	case path == "" || !filepath.IsAbs(path):
		return "", fmt.Errorf("endpoint %q: want unix:///absolute/path.sock", endpoint)
	}
	return filepath.Clean(path), nil
}

// ParsePluginFlag parses a -csi-plugin flag:
// "ID=unix:///path/csi.sock[,type=monolith|node|controller]".
func ParsePluginFlag(s string) (PluginConfig, error) {
	id, rest, ok := strings.Cut(s, "=")
	if !ok {
		return PluginConfig{}, fmt.Errorf("csi plugin %q: want ID=unix:///path/csi.sock[,type=monolith|node|controller]", s)
	}
	parts := strings.Split(rest, ",")
	p := PluginConfig{ID: strings.TrimSpace(id), Endpoint: strings.TrimSpace(parts[0])}
	for _, opt := range parts[1:] {
		k, v, ok := strings.Cut(opt, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return PluginConfig{}, fmt.Errorf("csi plugin %q: option %q is not key=value", s, opt)
		case k != "type":
			return PluginConfig{}, fmt.Errorf("csi plugin %q: unknown option %q (only type is known)", s, k)
		case p.Type != "":
			return PluginConfig{}, fmt.Errorf("csi plugin %q: type is given twice", s)
		}
		p.Type = structs.CSIPluginType(v)
		if !p.Type.Valid() {
			return PluginConfig{}, fmt.Errorf("csi plugin %q: unknown type %q (want monolith, node or controller)", s, v)
		}
	}
	if err := p.Validate(); err != nil {
		return PluginConfig{}, fmt.Errorf("csi plugin %q: %v", s, err)
	}
	return p, nil
}
