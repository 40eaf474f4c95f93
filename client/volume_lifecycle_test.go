package client

import (
	"fmt"
	"slices"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/plugins/csi/devplugin"
	"github.com/volplane/volplane/structs"
)

// Registering a volume of a plugin with a controller asks a controller to
// validate it; creating and deleting go through the controller too. All of
// it over the client's real session, to the development plugin's real
// socket.
func TestClient_VolumeRegisterCreateDelete(t *testing.T) {
	t.Parallel()
	servers := testCluster(t, 1)
	stateDir := t.TempDir()
	p := startPlugin(t, pluginSocket(t, "dev"), stateDir, "storage-node-0")
	testClient(t, addrs(servers[0]), func(cfg *Config) {
		cfg.Plugins = []PluginConfig{{ID: "dev", Endpoint: p.Endpoint()}}
	})
	waitPlugin(t, servers[0], "dev", func(p *structs.CSIPlugin) error {
		if p == nil || p.ControllersHealthy != 1 {
			return fmt.Errorf("plugin is %+v", p)
		}
		return nil
	})
	srv := servers[0]

	// The plugin does not know this volume: registration is refused.
	unknown := mock.CSIVolume("dev")
	unknown.Parameters = nil
	err := srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{unknown}}, &structs.CSIVolumeRegisterResponse{})
	must.Error(t, err)
	must.StrContains(t, err.Error(), unknown.ID)
	must.StrContains(t, err.Error(), "NotFound")

	// Created through the controller, then updated: validated this time.
	vol := mock.CSIVolume("dev")
	vol.ExternalID, vol.Parameters = "", nil
	var created structs.CSIVolumeCreateResponse
	must.NoError(t, srv.RPC("CSIVolume.Create", &structs.CSIVolumeCreateRequest{Volumes: []*structs.CSIVolume{vol}}, &created))
	must.Len(t, 1, created.Volumes)
	ext := created.Volumes[0].ExternalID
	must.NotEq(t, "", ext)

	update := vol.Copy()
	update.ExternalID = ext
	update.Secrets = structs.CSISecrets{"token": "rotated"}
	must.NoError(t, srv.RPC("CSIVolume.Register", &structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{update}}, &structs.CSIVolumeRegisterResponse{}))

	must.NoError(t, srv.RPC("CSIVolume.Delete", &structs.CSIVolumeDeleteRequest{VolumeIDs: []string{vol.ID}}, &structs.CSIVolumeDeleteResponse{}))
	got, err := srv.State().CSIVolumeByID(nil, structs.DefaultNamespace, vol.ID)
	must.NoError(t, err)
	must.Nil(t, got)

	calls, err := devplugin.ReadCallLog(stateDir)
	must.NoError(t, err)
	var methods []string
	for _, c := range calls {
		switch c.Method {
		case "ValidateVolumeCapabilities", "CreateVolume", "DeleteVolume":
			methods = append(methods, fmt.Sprintf("%s:%v", c.Method, c.Code))
		}
	}
	must.Eq(t, []string{
		"ValidateVolumeCapabilities:NotFound",
		"CreateVolume:OK",
		"ValidateVolumeCapabilities:OK",
		"DeleteVolume:OK",
	}, slices.Compact(methods))
}
