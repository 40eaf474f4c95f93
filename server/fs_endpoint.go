package server

import (
	"github.com/volplane/volplane/structs"
)

// FileSystem serves the logs of allocations' tasks (Nomad's name for the
// endpoint). The logs stay on the node that ran the task: the server that
// is asked finds the allocation's node and reads the log from its agent,
// over the agent's session with whichever server holds it. Another server
// forwards its call here, marked forwarded and with the node chosen, for
// this server to make over its own session.
type FileSystem struct {
	srv *Server
}

// Logs returns a chunk of a task's stdout or stderr (see
// structs.FSLogsRequest). Any server answers from its own state: where an
// allocation runs never changes, so it need not ask the leader.
func (e *FileSystem) Logs(args *structs.FSLogsRequest, reply *structs.FSLogsResponse) error {
	ctx, cancel := e.srv.calls.Context(args)
	defer cancel()
	if !args.IsForwarded() {
		// Answered here, not forwarded: the token is checked here.
		if err := e.srv.authorize("FileSystem.Logs", args, args); err != nil {
			return err
		}
		if args.AllocID == "" {
			return structs.ErrInvalid("logs: missing allocation ID")
		}
		alloc, err := e.srv.State().AllocByID(nil, args.AllocID)
		if err != nil {
			return err
		}
		if alloc == nil || alloc.Namespace != args.RequestNamespace() {
			return structs.ErrNotFound("allocation %q not found", args.AllocID)
		}
		args.NodeID = alloc.NodeID
	}
	resp, err := e.srv.clientRPC.Logs(ctx, args)
	if err != nil {
		return err
	}
	*reply = *resp
	return nil
}
