package httpapi

import (
	"net/http"

	"github.com/volplane/volplane/structs"
)

// nodeDrainBody is Nomad's NodeUpdateDrainRequest: a nil DrainSpec ends
// the drain. The node is the one of the path; a NodeID in the body, which
// Nomad's client sends too, must name the same node.
type nodeDrainBody struct {
	NodeID       string
	DrainSpec    *structs.DrainSpec
	MarkEligible bool
	Meta         map[string]string
}

// nodeDrain serves PUT /v1/node/:id/drain, answering Nomad's
// NodeDrainUpdateResponse.
func (h *handler) nodeDrain(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NodeUpdateDrainRequest{NodeID: r.PathValue("id")}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var body nodeDrainBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if body.NodeID != "" && body.NodeID != args.NodeID {
		return nil, structs.ErrInvalid("node drain: the body names node %q, the path node %q", body.NodeID, args.NodeID)
	}
	if body.DrainSpec != nil {
		args.DrainStrategy = &structs.DrainStrategy{DrainSpec: *body.DrainSpec}
	}
	args.MarkEligible, args.Meta = body.MarkEligible, body.Meta
	var reply structs.NodeDrainUpdateResponse
	if err := h.backend.RPC("Node.UpdateDrain", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &reply, nil
}

// nodeEligibilityBody is Nomad's NodeUpdateEligibilityRequest.
type nodeEligibilityBody struct {
	NodeID      string
	Eligibility string
}

// nodeEligibility serves PUT /v1/node/:id/eligibility, answering Nomad's
// NodeEligibilityUpdateResponse.
func (h *handler) nodeEligibility(w http.ResponseWriter, r *http.Request) (any, error) {
	args := structs.NodeUpdateEligibilityRequest{NodeID: r.PathValue("id")}
	if _, err := parseWriteRequest(r, &args.WriteRequest); err != nil {
		return nil, err
	}
	var body nodeEligibilityBody
	if err := h.decodeBody(w, r, &body); err != nil {
		return nil, err
	}
	if body.NodeID != "" && body.NodeID != args.NodeID {
		return nil, structs.ErrInvalid("node eligibility: the body names node %q, the path node %q", body.NodeID, args.NodeID)
	}
	args.Eligibility = body.Eligibility
	var reply structs.NodeEligibilityUpdateResponse
	if err := h.backend.RPC("Node.UpdateEligibility", &args, &reply); err != nil {
		return nil, err
	}
	setIndex(w, reply.Index)
	return &reply, nil
}
