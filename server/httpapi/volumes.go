package httpapi

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/volplane/volplane/structs"
)

// checkType refuses a ?type other than csi (empty means csi), so that a
// request for Nomad's host volumes is not answered with CSI ones.
func checkType(kind, t string) error {
	if t != "" && t != structs.VolumeTypeCSI {
		return structs.ErrInvalid("unsupported %s type %q", kind, t)
	}
	return nil
}

// volumeList serves GET /v1/volumes: a bare array of stubs, as Nomad's.
func (h *handler) volumeList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSIVolumeListRequest
	v, err := parseQueryOptions(r, &args.QueryOptions)
	if err != nil {
		return nil, err
	}
	if v.Get("type") == volumeTypeHost {
		return hostVolumeList(w)
	}
	if err := checkType("volume", v.Get("type")); err != nil {
		return nil, err
	}
	args.PluginID = v.Get("plugin_id")
	args.NodeID = v.Get("node_id")
	var reply structs.CSIVolumeListResponse
	if err := h.backend.RPC("CSIVolume.List", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	scope := listScope{
		complete:  args.Prefix == "" && args.PluginID == "" && args.NodeID == "" && args.PerPage == 0 && args.NextToken == "",
		namespace: args.RequestNamespace(),
	}
	body, pooled, err := h.stubs.encode(reply.Volumes, scope)
	if err != nil {
		return nil, structs.NewError(structs.ErrCodeInternal, "encoding response: %v", err)
	}
	if !pooled {
		return sharedJSON(body), nil
	}
	return rawJSON(body), nil
}

// volumeGet serves GET /v1/volume/csi/:id.
func (h *handler) volumeGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.CSIVolumeGetRequest{ID: r.PathValue("id")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.CSIVolumeGetResponse
	if err := h.backend.RPC("CSIVolume.Get", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Volume == nil {
		return nil, structs.ErrNotFound("volume %q not found", args.ID)
	}
	// The server sanitizes too; this layer does not rely on it.
	return h.volumeView(args.QueryOptions, reply.Volume.Sanitize()), nil
}

// volumeTypeHost is Nomad's dynamic host volumes' type. volplane has none;
// Nomad's CLI asks for them before CSI volumes.
const volumeTypeHost = "host"

// VolumeView is a volume as GET /v1/volume/csi/:id answers it: every field
// of structs.CSIVolume, with Nomad's ReadAllocs and WriteAllocs (the
// claiming allocations' IDs as keys, their allocations as values, null
// where the caller may not read one) and Allocations (stubs of those
// allocations), which Nomad's CLI shows.
type VolumeView struct {
	*structs.CSIVolume
	ReadAllocs  map[string]*AllocListStub
	WriteAllocs map[string]*AllocListStub
	Allocations []*AllocListStub
}

// volumeView reads the allocations of a volume's claims, each as the
// caller may (one it may not read, or gone, stays a key with a null).
func (h *handler) volumeView(q structs.QueryOptions, v *structs.CSIVolume) *VolumeView {
	out := &VolumeView{CSIVolume: v, ReadAllocs: map[string]*AllocListStub{}, WriteAllocs: map[string]*AllocListStub{},
		Allocations: []*AllocListStub{}}
	fill := func(claims map[string]*structs.CSIVolumeClaim, into map[string]*AllocListStub) {
		for _, id := range slices.Sorted(maps.Keys(claims)) {
			stub := h.allocStubByID(q, id)
			into[id] = stub
			if stub != nil {
				out.Allocations = append(out.Allocations, stub)
			}
		}
	}
	fill(v.ReadClaims, out.ReadAllocs)
	fill(v.WriteClaims, out.WriteAllocs)
	return out
}

// allocStubByID reads one allocation as a stub; nil when it is gone or
// the caller may not read it.
func (h *handler) allocStubByID(q structs.QueryOptions, id string) *AllocListStub {
	args := structs.AllocSpecificRequest{AllocID: id, QueryOptions: structs.QueryOptions{Region: q.Region,
		AuthToken: q.AuthToken, AllowStale: true}}
	var reply structs.SingleAllocResponse
	if err := h.backend.RPC("Alloc.GetAlloc", &args, &reply); err != nil || reply.Alloc == nil {
		return nil
	}
	return allocStub(reply.Alloc)
}

// volumeRegister serves PUT and POST /v1/volume/csi/:id with the body
// {"Volumes":[...]} that Nomad's client sends.
func (h *handler) volumeRegister(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSIVolumeRegisterRequest
	vols, err := h.volumesFromBody(w, r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	args.Volumes = vols
	var reply structs.CSIVolumeRegisterResponse
	if err := h.backend.RPC("CSIVolume.Register", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &VolumeRegisterResponse{Warnings: strings.Join(reply.Warnings, "\n"), Index: reply.Index}, nil
}

// volumeCreate serves PUT and POST /v1/volume/csi/:id/create: the plugin
// creates the volumes, then they are registered.
func (h *handler) volumeCreate(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSIVolumeCreateRequest
	vols, err := h.volumesFromBody(w, r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	args.Volumes = vols
	var reply structs.CSIVolumeCreateResponse
	if err := h.backend.RPC("CSIVolume.Create", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	out := &VolumeCreateResponse{Volumes: []*structs.CSIVolume{}, Warnings: strings.Join(reply.Warnings, "\n"), Index: reply.Index}
	for _, v := range reply.Volumes {
		out.Volumes = append(out.Volumes, v.Sanitize())
	}
	return out, nil
}

// VolumeCreateResponse is the body of a create: the created volumes, as
// Nomad's client expects.
type VolumeCreateResponse struct {
	Volumes  []*structs.CSIVolume
	Warnings string `json:",omitempty"`
	Index    uint64
}

// volumesFromBody reads the {"Volumes":[...]} body of a register or create
// and checks each volume's ID against the path.
func (h *handler) volumesFromBody(w http.ResponseWriter, r *http.Request, wr *structs.WriteRequest) ([]*structs.CSIVolume, error) {
	pathID := r.PathValue("id")
	if _, err := parseWriteRequest(r, wr); err != nil {
		return nil, err
	}
	var body registerBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if len(body.Volumes) == 0 {
		return nil, structs.ErrInvalid("the body has no volumes: send {\"Volumes\":[{...}]}")
	}
	if wr.Namespace == "" {
		wr.Namespace = body.Namespace
	}
	if wr.Region == "" {
		wr.Region = body.Region
	}
	var out []*structs.CSIVolume
	for i, wv := range body.Volumes {
		if wv == nil {
			return nil, structs.ErrInvalid("volume %d in the body is null", i+1)
		}
		vol := wv.toStructs()
		switch {
		case vol.ID == "" && len(body.Volumes) == 1:
			vol.ID = pathID
		case vol.ID == "":
			return nil, structs.ErrInvalid("volume %d in the body has no ID", i+1)
		case vol.ID != pathID:
			// A mismatch is most likely a body meant for another volume;
			// registering it under either ID would surprise someone.
			return nil, structs.ErrInvalid("volume ID %q in the body does not match %q in the path", vol.ID, pathID)
		}
		if vol.Namespace == "" {
			vol.Namespace = wr.RequestNamespace()
		}
		out = append(out, vol)
	}
	return out, nil
}

// volumeDelete serves DELETE /v1/volume/csi/:id/delete: the plugin deletes
// the volume, then it is deregistered. Secrets for the plugin come in the
// X-Nomad-CSI-Secrets header as "key=value,key=value", as Nomad's client
// sends them.
func (h *handler) volumeDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.CSIVolumeDeleteRequest{VolumeIDs: []string{r.PathValue("id")}}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var err error
	if args.Secrets, err = csiSecretsHeader(r); err != nil {
		return nil, err
	}
	var reply structs.CSIVolumeDeleteResponse
	if err := h.backend.RPC("CSIVolume.Delete", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}

// volumeDeregister serves DELETE /v1/volume/csi/:id[?force=true].
func (h *handler) volumeDeregister(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.CSIVolumeDeregisterRequest{VolumeIDs: []string{r.PathValue("id")}}
	v, err := parseWriteRequest(r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	if args.Force, err = optionalBool(v, "force", false); err != nil {
		return nil, err
	}
	var reply structs.CSIVolumeDeregisterResponse
	if err := h.backend.RPC("CSIVolume.Deregister", &args, &reply); err != nil {
		return nil, err
	}
	h.stubs.drop(args.RequestNamespace(), args.VolumeIDs[0])
	setIndex(w, reply.Index)
	return &VolumeDeregisterResponse{Warnings: reply.Warnings, Index: reply.Index}, nil
}

// volumeDetach serves DELETE /v1/volume/csi/:id/detach?node=ID: the release
// of the volume's claims on that node, run now; the answer lists each step.
func (h *handler) volumeDetach(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.CSIVolumeDetachRequest{VolumeID: r.PathValue("id")}
	v, err := parseWriteRequest(r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	args.NodeID = v.Get("node")
	if args.NodeID == "" {
		return nil, structs.ErrInvalid("missing ?node= the volume is to be detached from")
	}
	var reply structs.CSIVolumeDetachResponse
	if err := h.backend.RPC("CSIVolume.Detach", &args, &reply); err != nil {
		return nil, err
	}
	return &VolumeDetachResponse{Steps: reply.Steps}, nil
}

// VolumeDetachResponse is the body of a detach: the steps the release took.
type VolumeDetachResponse struct {
	Steps []string
}
