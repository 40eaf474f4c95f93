package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/volplane/volplane/structs"
)

// registerBody is the body of PUT /v1/volume/csi/:id. It accepts exactly
// the fields of Nomad's api.CSIVolumeRegisterRequest (whose volumes may also
// be volplane's structs.CSIVolume), so any other field is a mistake worth a
// 400. In particular the RPC request's own fields (Timestamp, AuthToken,
// Forwarded) are refused: they are the servers' to set.
type registerBody struct {
	Volumes []*wireVolume

	// Region and Namespace stand in for ?region and ?namespace when those
	// are absent.
	Region    string
	Namespace string

	// Sent by Nomad's client and ignored: volplane has no Sentinel, and the
	// token travels in the X-Nomad-Token header.
	PolicyOverride bool
	SecretID       string
}

// wireVolume is one volume as Nomad's api.CSIVolume encodes it, plus the
// claim maps of structs.CSIVolume. Fields the servers derive or assign are
// accepted and dropped (see toStructs).
type wireVolume struct {
	ID         string
	Name       string
	ExternalID string
	Namespace  string

	PluginID        string
	Provider        string
	ProviderVersion string

	RequestedCapabilities []*structs.CSIVolumeCapability
	// AccessMode and AttachmentMode are the modes of the current claims in a
	// response. In a request they are Nomad's legacy way to give a single
	// capability.
	AccessMode     structs.CSIVolumeAccessMode
	AttachmentMode structs.CSIVolumeAttachmentMode

	MountOptions *structs.CSIMountOptions
	Secrets      structs.CSISecrets
	Parameters   map[string]string
	Context      map[string]string

	Capacity             int64
	RequestedCapacityMin int64
	RequestedCapacityMax int64
	CloneID              string
	SnapshotID           string

	RequestedTopologies *structs.CSITopologyRequest
	Topologies          []*structs.CSITopology

	// volplane's claim maps. Registration may not set claims; they are
	// passed on so that the server's validation says so.
	ReadClaims  map[string]*structs.CSIVolumeClaim
	WriteClaims map[string]*structs.CSIVolumeClaim
	PastClaims  map[string]*structs.CSIVolumeClaim

	// Nomad-only or server-derived: accepted and dropped. A Nomad volume read
	// back with Info and registered again carries all of these.
	ReadAllocs          map[string]json.RawMessage
	WriteAllocs         map[string]json.RawMessage
	Allocations         []json.RawMessage
	ResourceExhausted   time.Time
	Schedulable         bool
	ControllerRequired  bool
	ControllersHealthy  int
	ControllersExpected int
	NodesHealthy        int
	NodesExpected       int
	CreateIndex         uint64
	ModifyIndex         uint64
	CreateTime          int64
	ModifyTime          int64
}

// toStructs keeps what an operator may register. The current access and
// attachment modes belong to the claims, so they are never taken from a
// request; when no capability is given they stand for the one capability,
// as in Nomad's older volume specifications.
func (wv *wireVolume) toStructs() *structs.CSIVolume {
	v := &structs.CSIVolume{
		ID:                    wv.ID,
		Namespace:             wv.Namespace,
		Name:                  wv.Name,
		ExternalID:            wv.ExternalID,
		PluginID:              wv.PluginID,
		Provider:              wv.Provider,
		ProviderVersion:       wv.ProviderVersion,
		RequestedCapabilities: wv.RequestedCapabilities,
		MountOptions:          wv.MountOptions,
		Secrets:               wv.Secrets,
		Parameters:            wv.Parameters,
		Context:               wv.Context,
		Capacity:              wv.Capacity,
		RequestedCapacityMin:  wv.RequestedCapacityMin,
		RequestedCapacityMax:  wv.RequestedCapacityMax,
		CloneID:               wv.CloneID,
		SnapshotID:            wv.SnapshotID,
		RequestedTopologies:   wv.RequestedTopologies,
		Topologies:            wv.Topologies,
		ReadClaims:            wv.ReadClaims,
		WriteClaims:           wv.WriteClaims,
		PastClaims:            wv.PastClaims,
	}
	if len(v.RequestedCapabilities) == 0 && (wv.AccessMode != "" || wv.AttachmentMode != "") {
		v.RequestedCapabilities = []*structs.CSIVolumeCapability{
			{AccessMode: wv.AccessMode, AttachmentMode: wv.AttachmentMode},
		}
	}
	return v
}

// VolumeRegisterResponse is the body of a successful volume registration.
// Warnings is one string, one warning per line, because that is the type
// Nomad's client decodes it into (api.CSIVolumeRegisterResponse); it is left
// out when there are none.
type VolumeRegisterResponse struct {
	Warnings string `json:",omitempty"`
	// Index is the Raft index of the write, also sent as X-Nomad-Index.
	Index uint64
}

// VolumeDeregisterResponse is the body of a successful deregistration.
// Nomad's client reads nothing from it, so Warnings keeps volplane's type,
// that of structs.CSIVolumeDeregisterResponse.
type VolumeDeregisterResponse struct {
	Warnings []string `json:",omitempty"`
	// Index is the Raft index of the write, also sent as X-Nomad-Index.
	Index uint64
}

// decodeBody reads one JSON object of at most h.maxBody bytes into out,
// refusing unknown fields and anything after the object.
func (h *handler) decodeBody(w http.ResponseWriter, r *http.Request, out any) (err error) {
	if r.ContentLength > h.maxBody {
		return tooLarge(h.maxBody)
	}
	// The whole body must arrive within the bound. The deadline is lifted
	// once the body is read, so a long answer (a blocking write) is not cut
	// off. After a failure the body is closed under an expired deadline:
	// net/http then answers at once and closes the connection, instead of
	// reading the rest of a body that trickles in before it answers. A body
	// of unknown length found too large is first read on a little
	// (overflowDrain): the caller of one just over the limit is still
	// sending its last bytes, and closing with them unread would reset the
	// connection under it before it reads the answer. A ResponseWriter that
	// cannot set deadlines (a test recorder) reads without one.
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(h.bodyTTL)) == nil {
		defer func() {
			if err != nil {
				if structs.CodeOf(err) == structs.ErrCodeTooLarge {
					_ = rc.SetReadDeadline(time.Now().Add(overflowDrainTime))
					_, _ = io.CopyN(io.Discard, r.Body, overflowDrainBytes)
				}
				_ = rc.SetReadDeadline(time.Now())
				_ = r.Body.Close()
				return
			}
			_ = rc.SetReadDeadline(time.Time{})
		}()
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, h.maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return h.bodyError(err)
	}
	// A second value, or garbage, after the object means the caller sent
	// something other than what was decoded.
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		if err == nil {
			return structs.ErrInvalid("invalid JSON body: more than one JSON value")
		}
		return h.bodyError(err)
	}
	return nil
}

// overflowDrainBytes and overflowDrainTime bound what is read of a body
// after it was found too large: its end, for one just over the limit.
const (
	overflowDrainBytes = 64 << 10
	overflowDrainTime  = time.Second
)

func tooLarge(limit int64) error {
	return structs.NewError(structs.ErrCodeTooLarge, "request body is larger than %d bytes", limit)
}

// bodyError explains a decoding failure in the caller's terms (JSON field
// names and JSON types), not the Go types it was decoded into.
func (h *handler) bodyError(err error) error {
	var (
		tooBig  *http.MaxBytesError
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	var (
		reason  string
		timeout net.Error
	)
	switch {
	case errors.As(err, &tooBig):
		return tooLarge(h.maxBody)
	case errors.As(err, &timeout) && timeout.Timeout():
		return structs.ErrInvalid("request body not received within %s", h.bodyTTL)
	case errors.Is(err, io.EOF):
		reason = "the body is empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		reason = "unexpected end of JSON input"
	case errors.As(err, &syntax):
		reason = fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(syntax.Error(), "json: "), syntax.Offset)
	case errors.As(err, &typeErr) && typeErr.Field == "":
		reason = fmt.Sprintf("expected a JSON %s, got a JSON %s", jsonKind(typeErr.Type), typeErr.Value)
	case errors.As(err, &typeErr):
		reason = fmt.Sprintf("field %q: expected a JSON %s, got a JSON %s", jsonPath(typeErr.Field), jsonKind(typeErr.Type), typeErr.Value)
	default:
		// Unknown fields read `json: unknown field "X"`.
		reason = strings.TrimPrefix(err.Error(), "json: ")
	}
	return structs.ErrInvalid("invalid JSON body: %s", reason)
}

// embeddedNames are the Go types the job's wire types embed
// (job_wire.go): encoding/json names them in a field's path, where the
// caller's JSON has no such level.
var embeddedNames = map[string]bool{"TaskGroup": true, "Task": true, "VolumeRequest": true, "VolumeMount": true}

// jsonPath is a decoding error's field path as the caller's JSON spells
// it: without the levels of embedded wire types ("Job.Job.ID" is "Job.ID").
func jsonPath(field string) string {
	parts := strings.Split(field, ".")
	out := parts[:0:0]
	for i, p := range parts {
		if i > 0 && (embeddedNames[p] || (p == "Job" && parts[i-1] == "Job")) {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

// jsonKind names the JSON type a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Time]() {
		return "string (RFC 3339 time)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return "value"
}
