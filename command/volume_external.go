package command

import (
	"fmt"
	"strings"

	"github.com/volplane/volplane/api"
	"github.com/volplane/volplane/structs"
)

// externalPageSize is how many of a provider's volumes `volume status
// -verbose` asks for at a time.
const externalPageSize = 30

// listExternal prints, for -plugin_id or for every plugin with a healthy
// controller, the volumes its storage provider holds, page by page, with
// the volplane volume each is registered as. A plugin whose controller
// cannot list volumes is reported and skipped; the exit code is 1 when any
// listing failed.
func (c *VolumeStatusCommand) listExternal(client *api.Client) int {
	var plugins []string
	if c.pluginID != "" {
		plugins = []string{c.pluginID}
	} else {
		stubs, _, err := client.Plugins().List(nil)
		if err != nil {
			return c.Fail("querying plugins", err)
		}
		for _, p := range stubs {
			// Only controllers list volumes.
			if p.ControllerRequired && p.ControllersHealthy > 0 {
				plugins = append(plugins, p.ID)
			}
		}
	}
	code := 0
	for _, id := range plugins {
		var rows [][]string
		failed := false
		q := c.QueryOptions()
		q.PerPage = externalPageSize
		for {
			vols, qm, err := client.Volumes().ListExternal(id, q)
			if err != nil {
				c.Ui.Error(fmt.Sprintf("Error querying the volumes of plugin %q's storage provider: %s", id, err))
				code, failed = 1, true
				break
			}
			for _, v := range vols {
				rows = append(rows, externalRow(v))
			}
			// A token that does not move would loop forever.
			if qm.NextToken == "" || qm.NextToken == q.NextToken {
				break
			}
			q.NextToken = qm.NextToken
		}
		if failed {
			continue
		}
		c.Ui.Output(fmt.Sprintf("\nExternal Volumes of plugin %s", id))
		if len(rows) == 0 {
			c.Ui.Output("No volumes")
			continue
		}
		c.Ui.Output(table([]string{"External ID", "Registered As", "Capacity", "Source", "Nodes"}, rows))
	}
	return code
}

func externalRow(v *structs.CSIVolumeExternalStub) []string {
	registered := ""
	if v.VolumeID != "" {
		registered = v.Namespace + "/" + v.VolumeID
	}
	source := ""
	switch {
	case v.SnapshotID != "":
		source = "snapshot " + v.SnapshotID
	case v.CloneID != "":
		source = "clone of " + v.CloneID
	}
	return []string{v.ExternalID, registered, bytesOf(v.CapacityBytes), source, strings.Join(v.PublishedExternalNodeIDs, ",")}
}
