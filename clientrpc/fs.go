package clientrpc

import (
	"context"

	"github.com/volplane/volplane/structs"
)

// MethodFSLogs is the wire name of the call for a chunk of a task's log.
// Client agents serve it; servers serve it too, to make a call forwarded by
// another server over their own session with the agent.
const MethodFSLogs = "FileSystem.Logs"

// Logs reads a chunk of a task's log on the allocation's node, req.NodeID.
func (c *Client) Logs(ctx context.Context, req *structs.FSLogsRequest) (*structs.FSLogsResponse, error) {
	if req.NodeID == "" || req.AllocID == "" {
		return nil, structs.ErrInvalid("logs: missing node ID or allocation ID")
	}
	var resp structs.FSLogsResponse
	if err := c.fwd.CallNode(ctx, req.NodeID, MethodFSLogs, req, &resp, req.IsForwarded()); err != nil {
		return nil, err
	}
	return &resp, nil
}
