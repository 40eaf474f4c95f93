package httpapi

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// keyringRotate serves PUT /v1/operator/keyring/rotate[?full=true], as
// Nomad's: a new active root key; with full, every volume's secrets and
// mount flags are sealed again with it.
func (h *handler) keyringRotate(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.KeyringRotateRequest
	v, err := parseWriteRequest(r, &args.WriteRequest)
	if err != nil {
		return nil, err
	}
	if args.Full, err = optionalBool(v, "full", false); err != nil {
		return nil, err
	}
	var reply structs.KeyringRotateResponse
	if err := h.backend.RPC("Keyring.Rotate", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &reply, nil
}

// keyringList serves GET /v1/operator/keyring/keys: the root keys, never
// their material.
func (h *handler) keyringList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.KeyringListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.KeyringListResponse
	if err := h.backend.RPC("Keyring.List", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Keys), nil
}
