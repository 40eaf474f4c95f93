package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/volplane/volplane/structs"
)

// namespaceBody is a namespace as Nomad's client sends it. Nomad's quota,
// capabilities, node pool, Vault, Consul and claim settings have nothing to
// act on in volplane: a namespace that sets one is refused, rather than
// stored and ignored.
type namespaceBody struct {
	Name        string
	Description string
	Meta        map[string]string
	CreateIndex uint64
	ModifyIndex uint64

	Quota                 string
	Capabilities          json.RawMessage
	NodePoolConfiguration json.RawMessage
	VaultConfiguration    json.RawMessage
	ConsulConfiguration   json.RawMessage
	RequiredExtraClaims   map[string]string
	OptionalExtraClaims   map[string]string
}

// unsupported names the first Nomad-only setting the body sets.
func (b *namespaceBody) unsupported() string {
	switch {
	case b.Quota != "":
		return "Quota"
	case set(b.Capabilities):
		return "Capabilities"
	case set(b.NodePoolConfiguration):
		return "NodePoolConfiguration"
	case set(b.VaultConfiguration):
		return "VaultConfiguration"
	case set(b.ConsulConfiguration):
		return "ConsulConfiguration"
	case len(b.RequiredExtraClaims) > 0:
		return "RequiredExtraClaims"
	case len(b.OptionalExtraClaims) > 0:
		return "OptionalExtraClaims"
	}
	return ""
}

// namespaceList serves GET /v1/namespaces[?prefix=].
func (h *handler) namespaceList(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.NamespaceListRequest
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.NamespaceListResponse
	if err := h.backend.RPC("Namespace.ListNamespaces", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	return orEmpty(reply.Namespaces), nil
}

// namespaceGet serves GET /v1/namespace/:name.
func (h *handler) namespaceGet(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NamespaceSpecificRequest{Name: r.PathValue("name")}
	if _, err := parseQueryOptions(r, &args.QueryOptions); err != nil {
		return nil, err
	}
	var reply structs.SingleNamespaceResponse
	if err := h.backend.RPC("Namespace.GetNamespace", &args, &reply); err != nil {
		return nil, err
	}
	setMeta(w, &reply.QueryMeta)
	if reply.Namespace == nil {
		return nil, structs.ErrNotFound("namespace %q not found", args.Name)
	}
	return reply.Namespace, nil
}

// namespaceUpsert serves PUT /v1/namespace (the name in the body, as
// Nomad's client sends it) and PUT /v1/namespace/:name.
func (h *handler) namespaceUpsert(w http.ResponseWriter, r *http.Request) (any, error) {
	var args structs.NamespaceUpsertRequest
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	// The request's own namespace is not the one written.
	args.Namespace = ""
	var body namespaceBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if name := r.PathValue("name"); name != "" {
		switch body.Name {
		case "":
			body.Name = name
		case name:
		default:
			return nil, structs.ErrInvalid("namespace name %q in the body does not match %q in the path", body.Name, name)
		}
	}
	if body.Name == "" {
		return nil, structs.ErrInvalid("the body has no namespace name: send {\"Name\":\"...\"}")
	}
	if field := body.unsupported(); field != "" {
		return nil, structs.ErrInvalid("namespace %q: %s is not supported by volplane", body.Name, field)
	}
	args.Namespaces = []*structs.Namespace{{Name: body.Name, Description: body.Description, Meta: body.Meta}}
	var reply structs.GenericResponse
	if err := h.backend.RPC("Namespace.UpsertNamespaces", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}

// namespaceDelete serves DELETE /v1/namespace/:name.
func (h *handler) namespaceDelete(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NamespaceDeleteRequest{Namespaces: []string{r.PathValue("name")}}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	args.Namespace = ""
	var reply structs.GenericResponse
	if err := h.backend.RPC("Namespace.DeleteNamespaces", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return nil, nil
}
