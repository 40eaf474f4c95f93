package command

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/structs"
)

func TestVolumeCreate(t *testing.T) {
	f := newFakeAgent(t)
	f.json("PUT /v1/volume/csi/database/create", 200, map[string]any{
		"Volumes": []map[string]any{{"ID": "database", "ExternalID": "plugin-database"}}, "Index": 12,
	})
	path := writeFile(t, "vol.hcl", specHCL)

	r := run(t, "", "volume", "create", path)
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Created volume \"database\" with external ID \"plugin-database\"\n", r.out)
	reqs := f.requests()
	must.Len(t, 1, reqs)
	var body struct{ Volumes []*structs.CSIVolume }
	must.NoError(t, json.Unmarshal([]byte(reqs[0].Body), &body))
	must.Eq(t, "database", body.Volumes[0].ID)

	f.text("PUT /v1/volume/csi/database/create", 404, `volume "database": no CSI plugin named "dev" could be found`)
	r = run(t, "", "volume", "create", path)
	must.Eq(t, 1, r.code)
	must.Eq(t, "Error creating volume: volume \"database\": no CSI plugin named \"dev\" could be found\n", r.stderr)
}

func TestVolumeDelete(t *testing.T) {
	f := newFakeAgent(t)
	var secretsHeader string
	f.routes["DELETE /v1/volume/csi/database/delete"] = func(w http.ResponseWriter, r *http.Request) {
		secretsHeader = r.Header.Get("X-Nomad-CSI-Secrets")
		w.Header().Set("X-Nomad-Index", "13")
	}
	r := run(t, "", "volume", "delete", "-secret", "token=abc", "-secret", "region=eu", "database")
	must.Eq(t, 0, r.code, must.Sprint(r.stderr))
	must.Eq(t, "Successfully deleted volume \"database\"\n", r.out)
	must.Eq(t, "region=eu,token=abc", secretsHeader)

	r = run(t, "", "volume", "delete", "-secret", "nokey", "database")
	must.Eq(t, 1, r.code)
	must.StrNotContains(t, r.stderr, "nokey", must.Sprint("a malformed secret is not echoed"))
}
