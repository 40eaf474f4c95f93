package httpapi

import (
	"net/http"
	"time"

	"github.com/volplane/volplane/structs"
)

// nodeIntroCreateBody is the body of PUT /v1/operator/node-intro.
type nodeIntroCreateBody struct {
	Name string
	// TTL is a duration such as "24h"; empty means no expiry.
	TTL       string
	SingleUse bool
}

// nodeIntroCreate serves PUT /v1/operator/node-intro: it answers with the
// token and, this once, its SecretID.
func (h *handler) nodeIntroCreate(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.NodeIntroCreateRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var body nodeIntroCreateBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	args.Name, args.SingleUse = body.Name, body.SingleUse
	if body.TTL != "" {
		d, err := time.ParseDuration(body.TTL)
		if err != nil {
			return nil, structs.ErrInvalid("node introduction token: TTL %q is not a duration such as \"24h\"", body.TTL)
		}
		args.TTL = d
	}
	var reply structs.NodeIntroCreateResponse
	if err := h.backend.RPC("Operator.NodeIntroCreate", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &reply, nil
}

// nodeIntroList serves GET /v1/operator/node-intro.
func (h *handler) nodeIntroList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.NodeIntroListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.NodeIntroListResponse
	if err := h.backend.RPC("Operator.NodeIntroList", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Tokens), nil
}

// nodeIntroDelete serves DELETE /v1/operator/node-intro/:accessor.
func (h *handler) nodeIntroDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NodeIntroDeleteRequest{AccessorIDs: []string{r.PathValue("accessor")}}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var reply structs.GenericResponse
	if err := h.backend.RPC("Operator.NodeIntroDelete", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}

// security serves GET /v1/operator/security: how the answering server is
// protected, and what anything on the network could do where it is not.
func (h *handler) security(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.GenericRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SecurityStatus
	if err := h.backend.RPC("Operator.Security", &args, &reply); err != nil {
		return nil, err
	}
	reply.Warnings = orEmpty(reply.Warnings)
	return &reply, nil
}
