package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/server/httpapi/httpapitest"
	"github.com/volplane/volplane/structs"
)

const plug = httpapitest.CompatPluginID

func TestVolumeList(t *testing.T) {
	be, h := newTestHandler(t)
	for _, q := range []string{"", "?type=csi"} {
		var stubs []*structs.CSIVolListStub
		mustJSON(t, do(t, h, http.MethodGet, "/v1/volumes"+q, ""), &stubs)
		must.Len(t, 1, stubs)
		must.Eq(t, "vol1", stubs[0].ID)
		must.Eq(t, 1, stubs[0].CurrentWriters)
		must.True(t, stubs[0].Schedulable)
	}
	// An empty list is an empty array, not null.
	be.volumes = map[string]*structs.CSIVolume{}
	rec := do(t, h, http.MethodGet, "/v1/volumes?type=csi", "")
	must.Eq(t, "[]\n", rec.Body.String())
}

func TestVolumeGet(t *testing.T) {
	_, h := newTestHandler(t)
	var v structs.CSIVolume
	mustJSON(t, do(t, h, http.MethodGet, "/v1/volume/csi/vol1", ""), &v)
	must.Eq(t, "vol1", v.ID)
	must.Eq(t, "xfs", v.MountOptions.FSType)
	// The fake hands the volume over unsanitized; the handler sanitizes.
	must.Eq(t, []string{structs.RedactedValue}, v.MountOptions.MountFlags)
	must.MapEmpty(t, v.Secrets)
	must.MapEmpty(t, v.WriteClaims["alloc1"].PublishContext)

	mustError(t, do(t, h, http.MethodGet, "/v1/volume/csi/nope", ""), http.StatusNotFound, `volume "nope" not found`)
	mustError(t, do(t, h, http.MethodGet, "/v1/volume/csi/vol1?namespace=other", ""), http.StatusNotFound, `volume "vol1" not found`)
}

// nomadBody is a register body exactly as Nomad's api client encodes
// api.CSIVolumeRegisterRequest, every field present, including those
// volplane drops.
const nomadBody = `{
  "Volumes": [{
    "ID": "vol9", "Name": "nine", "ExternalID": "ext-9", "Namespace": "",
    "RequestedTopologies": {"Required": [{"Segments": {"zone": "a"}}], "Preferred": null},
    "Topologies": null,
    "AccessMode": "single-node-writer", "AttachmentMode": "file-system",
    "MountOptions": {"FSType": "ext4", "MountFlags": ["noatime"]},
    "Secrets": {"password": "pw"}, "Parameters": {"p": "1"}, "Context": {"c": "2"},
    "Capacity": 0, "RequestedCapacityMin": 10, "RequestedCapacityMax": 20,
    "RequestedCapabilities": [{"AccessMode": "multi-node-reader-only", "AttachmentMode": "file-system"}],
    "CloneID": "", "SnapshotID": "",
    "ReadAllocs": {"a1": null}, "WriteAllocs": {}, "Allocations": [{"ID": "a1", "TaskGroup": "g"}],
    "Schedulable": true, "PluginID": "` + plug + `", "Provider": "", "ProviderVersion": "",
    "ControllerRequired": true, "ControllersHealthy": 1, "ControllersExpected": 1,
    "NodesHealthy": 1, "NodesExpected": 1, "ResourceExhausted": "0001-01-01T00:00:00Z",
    "CreateIndex": 99, "ModifyIndex": 99, "CreateTime": 5, "ModifyTime": 6
  }],
  "PolicyOverride": true, "Region": "", "Namespace": "", "SecretID": ""
}`

func TestVolumeRegister_NomadBody(t *testing.T) {
	be, h := newTestHandler(t)
	rec := do(t, h, http.MethodPut, "/v1/volume/csi/vol9?region=r1", nomadBody, "X-Nomad-Token", "tok")
	var out VolumeRegisterResponse
	mustJSON(t, rec, &out)
	must.Eq(t, "4", rec.Header().Get("X-Nomad-Index"))
	must.Eq(t, VolumeRegisterResponse{Index: 4}, out)
	must.Eq(t, `{"Index":4}`+"\n", rec.Body.String())

	args := be.call("CSIVolume.Register").(*structs.CSIVolumeRegisterRequest)
	must.Eq(t, structs.WriteRequest{Region: "r1", AuthToken: "tok"}, args.WriteRequest)
	must.Len(t, 1, args.Volumes)
	must.Eq(t, &structs.CSIVolume{
		ID: "vol9", Namespace: "default", Name: "nine", ExternalID: "ext-9", PluginID: plug,
		RequestedCapabilities: []*structs.CSIVolumeCapability{{
			AccessMode:     structs.CSIVolumeAccessModeMultiNodeReader,
			AttachmentMode: structs.CSIVolumeAttachmentModeFilesystem,
		}},
		MountOptions:         &structs.CSIMountOptions{FSType: "ext4", MountFlags: []string{"noatime"}},
		Secrets:              structs.CSISecrets{"password": "pw"},
		Parameters:           map[string]string{"p": "1"},
		Context:              map[string]string{"c": "2"},
		RequestedCapacityMin: 10,
		RequestedCapacityMax: 20,
		RequestedTopologies: &structs.CSITopologyRequest{
			Required: []*structs.CSITopology{{Segments: map[string]string{"zone": "a"}}},
		},
	}, args.Volumes[0], must.Sprint("derived, claim and index fields are dropped"))
}

// volplane's own client sends {"Volumes":[...]} of structs.CSIVolume, whose
// claim maps Nomad's volumes do not have.
func TestVolumeRegister_VolplaneBody(t *testing.T) {
	be, h := newTestHandler(t)
	vol := &structs.CSIVolume{
		ID: "vol8", PluginID: plug,
		RequestedCapabilities: []*structs.CSIVolumeCapability{{
			AccessMode:     structs.CSIVolumeAccessModeSingleNodeWriter,
			AttachmentMode: structs.CSIVolumeAttachmentModeBlockDevice,
		}},
	}
	body, err := json.Marshal(map[string]any{"Volumes": []*structs.CSIVolume{vol}})
	must.NoError(t, err)
	rec := do(t, h, http.MethodPost, "/v1/volume/csi/vol8?namespace=team", string(body))
	must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
	args := be.call("CSIVolume.Register").(*structs.CSIVolumeRegisterRequest)
	must.Eq(t, structs.WriteRequest{Namespace: "team"}, args.WriteRequest)
	must.Eq(t, "team", args.Volumes[0].Namespace)
	must.Eq(t, vol.RequestedCapabilities, args.Volumes[0].RequestedCapabilities)

	// The RPC request type itself carries fields only servers may set.
	body, err = json.Marshal(&structs.CSIVolumeRegisterRequest{Volumes: []*structs.CSIVolume{vol}})
	must.NoError(t, err)
	mustError(t, do(t, h, http.MethodPut, "/v1/volume/csi/vol8", string(body)), http.StatusBadRequest, `unknown field "Timestamp"`)
}

func TestVolumeRegister_IDsAndNamespaces(t *testing.T) {
	cap := `"RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}]`
	cases := []struct {
		name, path, body string
		wantIDs          []string
		wantNS           []string
	}{
		{"path ID fills the one volume", "/v1/volume/csi/pv", `{"Volumes":[{"PluginID":"` + plug + `",` + cap + `}]}`,
			[]string{"pv"}, []string{"default"}},
		{"volume namespace wins", "/v1/volume/csi/pv?namespace=q", `{"Volumes":[{"ID":"pv","Namespace":"v","PluginID":"` + plug + `",` + cap + `}],"Namespace":"b"}`,
			[]string{"pv"}, []string{"v"}},
		{"then the query", "/v1/volume/csi/pv?namespace=q", `{"Volumes":[{"ID":"pv","PluginID":"` + plug + `",` + cap + `}],"Namespace":"b"}`,
			[]string{"pv"}, []string{"q"}},
		{"then the body", "/v1/volume/csi/pv", `{"Volumes":[{"ID":"pv","PluginID":"` + plug + `",` + cap + `}],"Namespace":"b"}`,
			[]string{"pv"}, []string{"b"}},
		{"two volumes with the path ID", "/v1/volume/csi/pv", `{"Volumes":[{"ID":"pv","Namespace":"x","PluginID":"` + plug + `",` + cap + `},{"ID":"pv","Namespace":"y","PluginID":"` + plug + `",` + cap + `}]}`,
			[]string{"pv", "pv"}, []string{"x", "y"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			be, h := newTestHandler(t)
			rec := do(t, h, http.MethodPut, tc.path, tc.body)
			must.Eq(t, http.StatusOK, rec.Code, must.Sprint(rec.Body.String()))
			args := be.call("CSIVolume.Register").(*structs.CSIVolumeRegisterRequest)
			var ids, nss []string
			for _, v := range args.Volumes {
				ids, nss = append(ids, v.ID), append(nss, v.Namespace)
			}
			must.Eq(t, tc.wantIDs, ids)
			must.Eq(t, tc.wantNS, nss)
		})
	}
}

func TestVolumeRegister_LegacyTopLevelModes(t *testing.T) {
	be, h := newTestHandler(t)
	body := `{"Volumes":[{"ID":"old","PluginID":"` + plug + `","AccessMode":"single-node-reader-only","AttachmentMode":"block-device"}]}`
	must.Eq(t, http.StatusOK, do(t, h, http.MethodPut, "/v1/volume/csi/old", body).Code)
	v := be.call("CSIVolume.Register").(*structs.CSIVolumeRegisterRequest).Volumes[0]
	must.Eq(t, []*structs.CSIVolumeCapability{{
		AccessMode:     structs.CSIVolumeAccessModeSingleNodeReader,
		AttachmentMode: structs.CSIVolumeAttachmentModeBlockDevice,
	}}, v.RequestedCapabilities)
	must.Eq(t, structs.CSIVolumeAccessModeUnknown, v.AccessMode)
	must.Eq(t, structs.CSIVolumeAttachmentModeUnknown, v.AttachmentMode)
}

func TestVolumeRegister_BadBodies(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"unknown top-level field": {`{"Volumes":[{"ID":"v"}],"Volume":{}}`, `unknown field "Volume"`},
		"unknown volume field":    {`{"Volumes":[{"ID":"v","Size":3}]}`, `unknown field "Size"`},
		"unknown nested field":    {`{"Volumes":[{"ID":"v","MountOptions":{"FSType":"x","Flags":[]}}]}`, `unknown field "Flags"`},
		"unknown capability field": {`{"Volumes":[{"ID":"v","RequestedCapabilities":[{"AccessMode":"x","Mode":"y"}]}]}`,
			`unknown field "Mode"`},
		"wrong type":         {`{"Volumes":[{"ID":"v","RequestedCapacityMin":"10G"}]}`, `field "Volumes.RequestedCapacityMin": expected a JSON number, got a JSON string`},
		"wrong time":         {`{"Volumes":[{"ID":"v","ResourceExhausted":"yesterday"}]}`, "invalid JSON body"},
		"array body":         {`[{"ID":"v"}]`, "expected a JSON object, got a JSON array"},
		"malformed":          {`{"Volumes":[{"ID":"v",}]}`, "invalid character '}'"},
		"truncated":          {`{"Volumes":[{"ID":"v"`, "unexpected end of JSON input"},
		"trailing garbage":   {`{"Volumes":[{"ID":"v"}]} xyz`, "invalid character 'x'"},
		"two objects":        {`{"Volumes":[{"ID":"v"}]}{"Volumes":[]}`, "more than one JSON value"},
		"no volumes":         {`{"Volumes":[]}`, "the body has no volumes"},
		"null volume":        {`{"Volumes":[null]}`, "volume 1 in the body is null"},
		"ID mismatch":        {`{"Volumes":[{"ID":"other"}]}`, `volume ID "other" in the body does not match "v" in the path`},
		"second has no ID":   {`{"Volumes":[{"ID":"v"},{"Name":"x"}]}`, "volume 2 in the body has no ID"},
		"claims are refused": {`{"Volumes":[{"ID":"v","PluginID":"` + plug + `","RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}],"ReadClaims":{"a":{"AllocationID":"a"}}}]}`, "claims cannot be set by registration"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, h := newTestHandler(t)
			mustError(t, do(t, h, http.MethodPut, "/v1/volume/csi/v", tc.body), http.StatusBadRequest, tc.want)
		})
	}
	t.Run("empty body", func(t *testing.T) {
		be, h := newTestHandler(t)
		mustError(t, do(t, h, http.MethodPut, "/v1/volume/csi/v", ""), http.StatusBadRequest, "the body is empty")
		must.Nil(t, be.call("CSIVolume.Register"))
	})
}

func TestVolumeRegister_SizeLimit(t *testing.T) {
	be := newFakeBackend()
	h := NewHandler(Config{Backend: be, MaxBodyBytes: 256})
	big := `{"Volumes":[{"ID":"v","Name":"` + strings.Repeat("x", 300) + `"}]}`

	// Known length: refused before reading.
	mustError(t, do(t, h, http.MethodPut, "/v1/volume/csi/v", big), http.StatusRequestEntityTooLarge, "larger than 256 bytes")

	// Unknown length (chunked): refused while reading.
	req := httptest.NewRequest(http.MethodPut, "/v1/volume/csi/v", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	mustError(t, rec, http.StatusRequestEntityTooLarge, "larger than 256 bytes")

	// Garbage after a small object still counts against the limit.
	req = httptest.NewRequest(http.MethodPut, "/v1/volume/csi/v",
		io.MultiReader(strings.NewReader(`{"Volumes":[{"ID":"v"}]}`+strings.Repeat(" ", 300))))
	req.ContentLength = -1
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	mustError(t, rec, http.StatusRequestEntityTooLarge, "larger than 256 bytes")
	must.Nil(t, be.call("CSIVolume.Register"))
}

func TestVolumeRegister_DefaultSizeLimit(t *testing.T) {
	_, h := newTestHandler(t)
	big := `{"Volumes":[{"ID":"v","Name":"` + strings.Repeat("x", int(DefaultMaxBodyBytes)) + `"}]}`
	mustError(t, do(t, h, http.MethodPut, "/v1/volume/csi/v", big), http.StatusRequestEntityTooLarge, "larger than 4194304 bytes")
}

func TestVolumeRegister_WarningsAreOneString(t *testing.T) {
	be, h := newTestHandler(t)
	be.warnings = []string{"first", "second"}
	body := `{"Volumes":[{"PluginID":"` + plug + `","RequestedCapabilities":[{"AccessMode":"single-node-writer","AttachmentMode":"file-system"}]}]}`
	var out VolumeRegisterResponse
	mustJSON(t, do(t, h, http.MethodPut, "/v1/volume/csi/w", body), &out)
	must.Eq(t, "first\nsecond", out.Warnings)
}

func TestVolumeDeregister(t *testing.T) {
	be, h := newTestHandler(t)
	// vol1 is claimed: refused without force.
	mustError(t, do(t, h, http.MethodDelete, "/v1/volume/csi/vol1", ""), http.StatusConflict, `volume "vol1" is in use`)
	must.False(t, be.call("CSIVolume.Deregister").(*structs.CSIVolumeDeregisterRequest).Force)
	mustError(t, do(t, h, http.MethodDelete, "/v1/volume/csi/vol1?force=maybe", ""), http.StatusBadRequest, "invalid force")

	be.warnings = []string{"claims were dropped"}
	rec := do(t, h, http.MethodDelete, "/v1/volume/csi/vol1?force=true", "")
	var out VolumeDeregisterResponse
	mustJSON(t, rec, &out)
	must.Eq(t, VolumeDeregisterResponse{Warnings: []string{"claims were dropped"}, Index: 4}, out)
	must.Eq(t, "4", rec.Header().Get("X-Nomad-Index"))
	must.Eq(t, "", rec.Header().Get("X-Nomad-KnownLeader"))
	// It decodes into the RPC reply type too, which volplane's client uses.
	var reply structs.CSIVolumeDeregisterResponse
	must.NoError(t, json.Unmarshal(rec.Body.Bytes(), &reply))
	must.Eq(t, []string{"claims were dropped"}, reply.Warnings)

	mustError(t, do(t, h, http.MethodDelete, "/v1/volume/csi/vol1", ""), http.StatusNotFound, `volume "vol1" not found`)
}

// TestVolumeRegister_OversizedChunkedBodyReadToItsEnd: a body of unknown
// length found too large is read on to its end (up to a bound) before the
// answer, so a caller still sending its last bytes finishes and reads the 413
// whole, instead of a reset under its write.
func TestVolumeRegister_OversizedChunkedBodyReadToItsEnd(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Backend: newFakeBackend(), MaxBodyBytes: 256}))
	t.Cleanup(srv.Close)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	must.NoError(t, err)
	defer conn.Close()

	over := `{"Volumes":[{"ID":"v","Name":"` + strings.Repeat("x", 300)
	_, err = fmt.Fprintf(conn, "PUT /v1/volume/csi/v HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(over), over)
	must.NoError(t, err)
	// The server has what passes the limit, and waits for the rest rather
	// than answering and closing under the rest of the body.
	must.NoError(t, conn.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	var first [1]byte
	_, err = conn.Read(first[:])
	var ne net.Error
	must.True(t, errors.As(err, &ne) && ne.Timeout(), must.Sprintf("answered before the end of the body: %v", err))

	rest := `"}]}`
	_, err = fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(rest), rest)
	must.NoError(t, err)
	must.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	must.NoError(t, err, must.Sprint("the answer arrives whole, not cut by a reset"))
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	must.NoError(t, err)
	must.Eq(t, http.StatusRequestEntityTooLarge, res.StatusCode)
	must.StrContains(t, string(body), "larger than 256 bytes")
}
