package serverconn

import "github.com/volplane/volplane/structs"

// The calls the client makes on the servers, typed: the method names are
// the wire's, spelled here once, so that callers in the client get their
// arguments checked by the compiler and go-to-definition leads here.

// NodeRegister registers the node (Node.Register).
func (c *Conn) NodeRegister(args *structs.NodeRegisterRequest, reply *structs.NodeUpdateResponse) error {
	return c.RPC("Node.Register", args, reply)
}

// NodeUpdateStatus is the node's heartbeat (Node.UpdateStatus).
func (c *Conn) NodeUpdateStatus(args *structs.NodeUpdateStatusRequest, reply *structs.NodeUpdateResponse) error {
	return c.RPC("Node.UpdateStatus", args, reply)
}

// NodeGetClientAllocs is the blocking query for the node's allocations
// (Node.GetClientAllocs).
func (c *Conn) NodeGetClientAllocs(args *structs.NodeClientAllocsRequest, reply *structs.NodeClientAllocsResponse) error {
	return c.RPC("Node.GetClientAllocs", args, reply)
}

// NodeUpdateAlloc reports the client's view of allocations (Node.UpdateAlloc).
func (c *Conn) NodeUpdateAlloc(args *structs.NodeUpdateAllocRequest, reply *structs.GenericResponse) error {
	return c.RPC("Node.UpdateAlloc", args, reply)
}

// CSIVolumeClaim takes or changes an allocation's claim on a volume
// (CSIVolume.Claim).
func (c *Conn) CSIVolumeClaim(args *structs.CSIVolumeClaimRequest, reply *structs.CSIVolumeClaimResponse) error {
	return c.RPC("CSIVolume.Claim", args, reply)
}

// CSIVolumeGet reads a volume (CSIVolume.Get).
func (c *Conn) CSIVolumeGet(args *structs.CSIVolumeGetRequest, reply *structs.CSIVolumeGetResponse) error {
	return c.RPC("CSIVolume.Get", args, reply)
}
