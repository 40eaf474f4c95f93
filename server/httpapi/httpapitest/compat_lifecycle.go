package httpapitest

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	nomad "github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"
)

// registerCompat registers a volume of the fixture's plugin for one step,
// deregistered when it ends.
func (c *compat) registerCompat(t *testing.T, id, externalID string) *nomad.CSIVolume {
	t.Helper()
	vol := &nomad.CSIVolume{
		ID: id, ExternalID: externalID, PluginID: c.fx.PluginID,
		RequestedCapabilities: []*nomad.CSIVolumeCapability{
			{AccessMode: nomad.CSIVolumeAccessModeSingleNodeWriter, AttachmentMode: nomad.CSIVolumeAttachmentModeFilesystem},
		},
		Secrets: nomad.CSISecrets{"password": compatVolSecret},
	}
	_, err := c.client.CSIVolumes().Register(vol, nil)
	must.NoError(t, err)
	t.Cleanup(func() { _ = c.client.CSIVolumes().Deregister(vol.ID, true, nil) })
	return vol
}

// snapshots creates two snapshots of a volume with Nomad's client, lists
// them a page at a time, and deletes one; the secrets of the call are
// never answered; an unknown volume or plugin is a 404 and a garbage page
// token a 400.
func (c *compat) snapshots(t *testing.T) {
	vol := c.registerCompat(t, "nomad-compat-vol-snap", "ext-compat-snap")
	var made []*nomad.CSISnapshot
	for _, name := range []string{"compat-snap-1", "compat-snap-2"} {
		resp, _, err := c.client.CSIVolumes().CreateSnapshot(&nomad.CSISnapshot{
			SourceVolumeID: vol.ID, Name: name,
			Secrets:    nomad.CSISecrets{"token": compatSnapSecret},
			Parameters: map[string]string{"kind": "full"},
		}, nil)
		must.NoError(t, err)
		must.Len(t, 1, resp.Snapshots)
		s := resp.Snapshots[0]
		must.NotEq(t, "", s.ID)
		must.Eq(t, vol.ID, s.SourceVolumeID)
		must.Eq(t, "ext-compat-snap", s.ExternalSourceVolumeID)
		must.Eq(t, c.fx.PluginID, s.PluginID)
		must.MapEmpty(t, s.Secrets)
		made = append(made, s)
	}

	list := func(token string, perPage int32) (*nomad.CSISnapshotListResponse, *nomad.QueryMeta, error) {
		return c.client.CSIVolumes().ListSnapshotsOpts(&nomad.CSISnapshotListRequest{
			PluginID: c.fx.PluginID, Secrets: nomad.CSISecrets{"token": compatSnapSecret},
			QueryOptions: nomad.QueryOptions{PerPage: perPage, NextToken: token},
		})
	}
	var ids []string
	page, qm, err := list("", 1)
	must.NoError(t, err)
	must.Len(t, 1, page.Snapshots)
	must.NotEq(t, "", page.NextToken)
	must.Eq(t, page.NextToken, qm.NextToken, must.Sprint("the token is in the body and in X-Nomad-NextToken"))
	ids = append(ids, page.Snapshots[0].ID)
	for page.NextToken != "" {
		page, _, err = list(page.NextToken, 1)
		must.NoError(t, err)
		for _, s := range page.Snapshots {
			ids = append(ids, s.ID)
			if s.ID == made[0].ID {
				must.Eq(t, vol.ID, s.SourceVolumeID)
			}
		}
		must.Less(t, 10, len(ids), must.Sprint("the pages end"))
	}
	for _, s := range made {
		must.SliceContains(t, ids, s.ID)
	}
	c.noSecrets(t, "/v1/volumes/snapshot?plugin_id="+c.fx.PluginID)

	_, _, err = list("garbage-token", 0)
	mustStatus(t, http.StatusBadRequest, err)

	must.NoError(t, c.client.CSIVolumes().DeleteSnapshot(&nomad.CSISnapshot{ID: made[0].ID, PluginID: c.fx.PluginID,
		Secrets: nomad.CSISecrets{"token": compatSnapSecret}}, nil))
	page, _, err = list("", 0)
	must.NoError(t, err)
	must.False(t, slices.ContainsFunc(page.Snapshots, func(s *nomad.CSISnapshot) bool { return s.ID == made[0].ID }))
	must.NoError(t, c.client.CSIVolumes().DeleteSnapshot(&nomad.CSISnapshot{ID: made[1].ID, PluginID: c.fx.PluginID}, nil))

	_, _, err = c.client.CSIVolumes().CreateSnapshot(&nomad.CSISnapshot{SourceVolumeID: "nomad-compat-vol-missing", Name: "x"}, nil)
	mustStatus(t, http.StatusNotFound, err)
	_, _, err = c.client.CSIVolumes().ListSnapshotsOpts(&nomad.CSISnapshotListRequest{PluginID: "nomad-compat-plugin-missing"})
	mustStatus(t, http.StatusNotFound, err)
}

// externalVolumes lists the plugin's volumes with Nomad's client, a page at
// a time, and finds the registered ones, named by volplane's ID in the raw
// answer.
func (c *compat) externalVolumes(t *testing.T) {
	c.registerCompat(t, "nomad-compat-vol-ext1", "ext-compat-ext1")
	c.registerCompat(t, "nomad-compat-vol-ext2", "ext-compat-ext2")
	var exts []string
	q := &nomad.QueryOptions{PerPage: 1}
	for range 20 {
		resp, _, err := c.client.CSIVolumes().ListExternal(c.fx.PluginID, q)
		must.NoError(t, err)
		must.LessEq(t, 1, len(resp.Volumes))
		for _, v := range resp.Volumes {
			exts = append(exts, v.ExternalID)
		}
		if q.NextToken = resp.NextToken; q.NextToken == "" {
			break
		}
	}
	must.SliceContains(t, exts, "ext-compat-ext1")
	must.SliceContains(t, exts, "ext-compat-ext2")

	var raw struct {
		Volumes []struct {
			ExternalID string
			VolumeID   string
		}
	}
	must.NoError(t, c.getJSON(t, "/v1/volumes/external?plugin_id="+c.fx.PluginID, &raw))
	i := slices.IndexFunc(raw.Volumes, func(v struct{ ExternalID, VolumeID string }) bool { return v.ExternalID == "ext-compat-ext1" })
	must.NonNegative(t, i)
	must.Eq(t, "nomad-compat-vol-ext1", raw.Volumes[i].VolumeID)

	_, _, err := c.client.CSIVolumes().ListExternal(c.fx.PluginID, &nomad.QueryOptions{NextToken: "garbage-token"})
	mustStatus(t, http.StatusBadRequest, err)
	_, _, err = c.client.CSIVolumes().ListExternal("nomad-compat-plugin-missing", &nomad.QueryOptions{})
	mustStatus(t, http.StatusNotFound, err)
}

// systemGC runs the garbage collection with Nomad's client.
func (c *compat) systemGC(t *testing.T) {
	must.NoError(t, c.client.System().GarbageCollect())
}

// getJSON fetches a path and decodes its JSON body.
func (c *compat) getJSON(t *testing.T, path string, out any) error {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(c.addr, "/")+path, nil)
	if err != nil {
		return err
	}
	if c.fx.Token != "" {
		req.Header.Set("X-Nomad-Token", c.fx.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	must.Eq(t, http.StatusOK, resp.StatusCode, must.Sprintf("GET %s", path))
	return json.NewDecoder(resp.Body).Decode(out)
}
