package httpapi

import (
	"net/http"
	"strings"

	"github.com/volplane/volplane/structs"
)

// Snapshots, the storage provider's own volume list and the garbage
// collection, on Nomad's paths and in Nomad's JSON shapes.

// snapshotCreateBody is the body of PUT /v1/volumes/snapshot, as Nomad's
// api.CSISnapshotCreateRequest encodes it.
type snapshotCreateBody struct {
	Snapshots []*structs.CSISnapshot
	Region    string
	Namespace string
	// Sent by Nomad's client and ignored: the token travels in the
	// X-Nomad-Token header.
	SecretID string
}

// SnapshotsResponse is the body of a snapshot create or list: the
// snapshots (never their secrets) and, for a list, the plugin's token of
// the next page.
type SnapshotsResponse struct {
	Snapshots []*structs.CSISnapshot
	NextToken string `json:",omitempty"`
}

// ExternalVolumesResponse is the body of GET /v1/volumes/external.
type ExternalVolumesResponse struct {
	Volumes   []*structs.CSIVolumeExternalStub
	NextToken string `json:",omitempty"`
}

// snapshotCreate serves PUT and POST /v1/volumes/snapshot. Each snapshot's
// secrets come in the body; the X-Nomad-CSI-Secrets header, which Nomad's
// client also sets, fills in keys the body lacks.
func (h *handler) snapshotCreate(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSISnapshotCreateRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	header, err := csiSecretsHeader(r)
	if err != nil {
		return nil, err
	}
	var body snapshotCreateBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if len(body.Snapshots) == 0 {
		return nil, structs.ErrInvalid("the body has no snapshots: send {\"Snapshots\":[{\"SourceVolumeID\":...}]}")
	}
	if args.Namespace == "" {
		args.Namespace = body.Namespace
	}
	if args.Region == "" {
		args.Region = body.Region
	}
	for i, s := range body.Snapshots {
		if s == nil {
			return nil, structs.ErrInvalid("snapshot %d in the body is null", i+1)
		}
		// Only what a creation takes: the rest is the plugin's to say.
		in := &structs.CSISnapshot{SourceVolumeID: s.SourceVolumeID, PluginID: s.PluginID, Name: s.Name,
			Parameters: s.Parameters, Secrets: overlay(header, s.Secrets)}
		args.Snapshots = append(args.Snapshots, in)
	}
	var reply structs.CSISnapshotCreateResponse
	if err := h.backend.RPC("CSIVolume.CreateSnapshot", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return &SnapshotsResponse{Snapshots: sanitizeSnapshots(reply.Snapshots)}, nil
}

// snapshotDelete serves DELETE /v1/volumes/snapshot?plugin_id=&snapshot_id=
// with the plugin's secrets in the X-Nomad-CSI-Secrets header.
func (h *handler) snapshotDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSISnapshotDeleteRequest
	v, err := parseWriteRequest(r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	snap := &structs.CSISnapshot{PluginID: v.Get("plugin_id"), ID: v.Get("snapshot_id")}
	if snap.PluginID == "" || snap.ID == "" {
		return nil, structs.ErrInvalid("missing ?plugin_id= or ?snapshot_id= of the snapshot to delete")
	}
	if snap.Secrets, err = csiSecretsHeader(r); err != nil {
		return nil, err
	}
	args.Snapshots = []*structs.CSISnapshot{snap}
	var reply structs.CSISnapshotDeleteResponse
	if err := h.backend.RPC("CSIVolume.DeleteSnapshot", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return nil, nil
}

// snapshotList serves GET /v1/volumes/snapshot?plugin_id=[&per_page=&next_token=]
// with the plugin's secrets in the X-Nomad-CSI-Secrets header.
func (h *handler) snapshotList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSISnapshotListRequest
	v, err := parseQueryOptions(r, &args.QueryOptions)
	if err != nil {
		return nil, err
	}
	args.PluginID = v.Get("plugin_id")
	if args.Secrets, err = csiSecretsHeader(r); err != nil {
		return nil, err
	}
	var reply structs.CSISnapshotListResponse
	if err := h.backend.RPC("CSIVolume.ListSnapshots", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return &SnapshotsResponse{Snapshots: sanitizeSnapshots(reply.Snapshots), NextToken: reply.NextToken}, nil
}

// volumeListExternal serves GET /v1/volumes/external?plugin_id=[&per_page=&next_token=].
func (h *handler) volumeListExternal(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.CSIVolumeExternalListRequest
	v, err := parseQueryOptions(r, &args.QueryOptions)
	if err != nil {
		return nil, err
	}
	args.PluginID = v.Get("plugin_id")
	var reply structs.CSIVolumeExternalListResponse
	if err := h.backend.RPC("CSIVolume.ListExternal", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return &ExternalVolumesResponse{Volumes: orEmpty(reply.Volumes), NextToken: reply.NextToken}, nil
}

// systemGC serves PUT /v1/system/gc: the garbage collection, now. Nomad's
// client sends an empty object, which is not read.
func (h *handler) systemGC(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.GCRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var reply structs.GCResponse
	if err := h.backend.RPC("System.GarbageCollect", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &GCResponse{Nodes: orEmpty(reply.Nodes), Plugins: orEmpty(reply.Plugins), Waiting: orEmpty(reply.Waiting), Index: reply.Index}, nil
}

// GCResponse is the body of PUT /v1/system/gc: the nodes and plugins
// removed, and the down nodes kept because claims on them are still being
// released.
type GCResponse struct {
	Nodes   []string
	Plugins []string
	Waiting []string
	Index   uint64
}

// csiSecretsHeader reads the X-Nomad-CSI-Secrets header, "key=value"
// pairs separated by commas, as Nomad's client sends a plugin call's
// secrets; nil when there is none.
func csiSecretsHeader(r *http.Request) (structs.CSISecrets, error) {
	raw := r.Header.Get("X-Nomad-CSI-Secrets")
	if raw == "" {
		return nil, nil
	}
	out := structs.CSISecrets{}
	for _, kv := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, structs.ErrInvalid("X-Nomad-CSI-Secrets must be key=value pairs separated by commas")
		}
		out[k] = v
	}
	return out, nil
}

// overlay returns base with extra's keys written over it, nil when both
// are empty.
func overlay(base, extra structs.CSISecrets) structs.CSISecrets {
	if len(base)+len(extra) == 0 {
		return nil
	}
	out := structs.CSISecrets{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// sanitizeSnapshots returns the snapshots without the fields only a
// creation takes, whatever the server sent: no secret leaves this way.
func sanitizeSnapshots(in []*structs.CSISnapshot) []*structs.CSISnapshot {
	out := make([]*structs.CSISnapshot, 0, len(in))
	for _, s := range in {
		if s == nil {
			continue
		}
		c := *s
		c.Secrets, c.Parameters, c.Name = nil, nil, ""
		out = append(out, &c)
	}
	return out
}
