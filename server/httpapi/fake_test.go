package httpapi

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/volplane/volplane/structs"
)

// fakeBackend is an in-memory stand-in for the server's RPC endpoints: maps
// of volumes, plugins and nodes behind one Raft-like index. It records the
// last arguments of each method, so tests can check what the HTTP layer
// passed through, and can be told to fail a method with a given error.
type fakeBackend struct {
	mu sync.Mutex

	index   uint64
	volumes map[string]*structs.CSIVolume // by namespace + "/" + ID
	plugins map[string]*structs.CSIPlugin
	nodes   map[string]*structs.Node
	// snapshots are the plugins' snapshots, in creation order.
	snapshots []*structs.CSISnapshot

	leader   string
	peers    []string
	servers  []*structs.RaftServer
	warnings []string
	// meta is copied into every read reply (KnownLeader, LastContact).
	meta structs.QueryMeta

	fail  map[string]error
	calls map[string]any
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{
		index:   1,
		volumes: map[string]*structs.CSIVolume{},
		plugins: map[string]*structs.CSIPlugin{},
		nodes:   map[string]*structs.Node{},
		leader:  "10.0.0.1:4647",
		peers:   []string{"10.0.0.1:4647", "10.0.0.2:4647", "10.0.0.3:4647"},
		meta:    structs.QueryMeta{KnownLeader: true, LastContact: 1500 * time.Millisecond},
		fail:    map[string]error{},
		calls:   map[string]any{},
	}
}

// call returns the last arguments method was called with, or nil.
func (f *fakeBackend) call(method string) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *fakeBackend) failWith(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[method] = err
}

// upsertNode stores a node and derives its plugins, as the server does from
// fingerprints.
func (f *fakeBackend) upsertNode(n *structs.Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	n = n.Copy()
	n.CreateIndex, n.ModifyIndex = f.index, f.index
	f.nodes[n.ID] = n
	for _, id := range slices.Sorted(maps.Keys(n.CSINodePlugins)) {
		f.pluginFor(id).SetInstances(n.ID, n.CSIControllerPlugins[id], n.CSINodePlugins[id])
	}
	for id, info := range n.CSIControllerPlugins {
		if _, ok := n.CSINodePlugins[id]; !ok {
			f.pluginFor(id).SetInstances(n.ID, info, nil)
		}
	}
}

func (f *fakeBackend) pluginFor(id string) *structs.CSIPlugin {
	p, ok := f.plugins[id]
	if !ok {
		p = structs.NewCSIPlugin(id, f.index)
		f.plugins[id] = p
	}
	p.ModifyIndex = f.index
	return p
}

func (f *fakeBackend) readMeta() structs.QueryMeta {
	m := f.meta
	m.Index = f.index
	return m
}

// withHealth fills a volume's derived fields from its plugin, as reads do.
func (f *fakeBackend) withHealth(v *structs.CSIVolume) *structs.CSIVolume {
	v = v.Copy()
	if p := f.plugins[v.PluginID]; p != nil {
		v.ControllerRequired = p.ControllerRequired
		v.ControllersHealthy, v.ControllersExpected = p.ControllersHealthy, p.ControllersExpected
		v.NodesHealthy, v.NodesExpected = p.NodesHealthy, p.NodesExpected
		v.Provider = p.Provider
		v.Schedulable = p.NodesHealthy > 0 && (!p.ControllerRequired || p.ControllersHealthy > 0)
	}
	return v
}

func volKey(ns, id string) string { return ns + "/" + id }

func (f *fakeBackend) RPC(method string, args, reply any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method] = args
	if err := f.fail[method]; err != nil {
		return err
	}
	switch method {
	case "CSIVolume.Register":
		return f.volumeRegister(args.(*structs.CSIVolumeRegisterRequest), reply.(*structs.CSIVolumeRegisterResponse))
	case "CSIVolume.Deregister":
		return f.volumeDeregister(args.(*structs.CSIVolumeDeregisterRequest), reply.(*structs.CSIVolumeDeregisterResponse))
	case "CSIVolume.Get":
		a, r := args.(*structs.CSIVolumeGetRequest), reply.(*structs.CSIVolumeGetResponse)
		if v := f.volumes[volKey(a.RequestNamespace(), a.ID)]; v != nil {
			// Unsanitized on purpose: the handler must sanitize on its own.
			r.Volume = f.withHealth(v)
		}
		r.QueryMeta = f.readMeta()
	case "CSIVolume.List":
		return f.volumeList(args.(*structs.CSIVolumeListRequest), reply.(*structs.CSIVolumeListResponse))
	case "CSIPlugin.List":
		a, r := args.(*structs.CSIPluginListRequest), reply.(*structs.CSIPluginListResponse)
		for _, id := range slices.Sorted(maps.Keys(f.plugins)) {
			if strings.HasPrefix(id, a.Prefix) {
				r.Plugins = append(r.Plugins, f.plugins[id].Stub())
			}
		}
		r.QueryMeta = f.readMeta()
	case "CSIPlugin.Get":
		a, r := args.(*structs.CSIPluginGetRequest), reply.(*structs.CSIPluginGetResponse)
		r.Plugin = f.plugins[a.ID].Copy()
		r.QueryMeta = f.readMeta()
	case "Node.List":
		a, r := args.(*structs.NodeListRequest), reply.(*structs.NodeListResponse)
		for _, id := range slices.Sorted(maps.Keys(f.nodes)) {
			if strings.HasPrefix(id, a.Prefix) {
				r.Nodes = append(r.Nodes, f.nodes[id].Stub())
			}
		}
		r.QueryMeta = f.readMeta()
	case "Node.GetNode":
		a, r := args.(*structs.NodeSpecificRequest), reply.(*structs.SingleNodeResponse)
		// Copy keeps SecretID: the handler must not show it.
		r.Node = f.nodes[a.NodeID].Copy()
		r.QueryMeta = f.readMeta()
	case "Node.UpdateDrain":
		return f.nodeDrain(args.(*structs.NodeUpdateDrainRequest), reply.(*structs.NodeDrainUpdateResponse))
	case "Node.UpdateEligibility":
		return f.nodeEligibility(args.(*structs.NodeUpdateEligibilityRequest), reply.(*structs.NodeEligibilityUpdateResponse))
	case "Status.Leader":
		*reply.(*string) = f.leader
	case "Status.Peers":
		*reply.(*[]string) = slices.Clone(f.peers)
	case "Operator.RaftListPeers":
		r := reply.(*structs.RaftConfigurationResponse)
		for _, p := range f.peers {
			r.Servers = append(r.Servers, &structs.RaftServer{
				ID: "id-" + p, Node: "server-" + p, Address: p,
				Leader: p == f.leader, Voter: true, RaftProtocol: "3",
			})
		}
		r.Index = f.index
	case "Operator.RaftRemovePeer":
		a := args.(*structs.RaftPeerRequest)
		i := slices.IndexFunc(f.peers, func(p string) bool { return p == a.Address || "id-"+p == a.ID })
		if i < 0 {
			return structs.ErrNotFound("no raft peer %q%q", a.ID, a.Address)
		}
		f.peers = slices.Delete(f.peers, i, i+1)
		f.index++
		reply.(*structs.GenericResponse).Index = f.index
	default:
		return f.lifecycleRPC(method, args, reply)
	}
	return nil
}

func (f *fakeBackend) volumeRegister(a *structs.CSIVolumeRegisterRequest, r *structs.CSIVolumeRegisterResponse) error {
	for _, v := range a.Volumes {
		if err := v.Validate(); err != nil {
			return err
		}
		if f.plugins[v.PluginID] == nil {
			return structs.ErrNotFound("plugin %q not found", v.PluginID)
		}
	}
	f.index++
	for _, v := range a.Volumes {
		v = v.Copy()
		k := volKey(v.Namespace, v.ID)
		v.CreateIndex, v.ModifyIndex = f.index, f.index
		if old := f.volumes[k]; old != nil {
			v.CreateIndex = old.CreateIndex
		}
		f.volumes[k] = v
	}
	r.Warnings = slices.Clone(f.warnings)
	r.Index = f.index
	return nil
}

func (f *fakeBackend) volumeDeregister(a *structs.CSIVolumeDeregisterRequest, r *structs.CSIVolumeDeregisterResponse) error {
	for _, id := range a.VolumeIDs {
		v := f.volumes[volKey(a.RequestNamespace(), id)]
		if v == nil {
			return structs.ErrNotFound("volume %q not found", id)
		}
		if v.InUse() && !a.Force {
			return structs.ErrConflict("volume %q is in use", id)
		}
	}
	f.index++
	for _, id := range a.VolumeIDs {
		delete(f.volumes, volKey(a.RequestNamespace(), id))
	}
	r.Warnings = slices.Clone(f.warnings)
	r.Index = f.index
	return nil
}

// volumeList pages by ID: NextToken is the first ID of the next page.
func (f *fakeBackend) volumeList(a *structs.CSIVolumeListRequest, r *structs.CSIVolumeListResponse) error {
	var keys []string
	for k, v := range f.volumes {
		switch {
		case a.Namespace != "*" && v.Namespace != a.RequestNamespace():
		case !strings.HasPrefix(v.ID, a.Prefix):
		case a.PluginID != "" && v.PluginID != a.PluginID:
		case a.NextToken != "" && v.ID < a.NextToken:
		case a.NodeID != "" && !claimedOn(v, a.NodeID):
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for i, k := range keys {
		if a.PerPage > 0 && i == int(a.PerPage) {
			r.NextToken = f.volumes[k].ID
			break
		}
		r.Volumes = append(r.Volumes, f.withHealth(f.volumes[k]).Stub())
	}
	meta := f.readMeta()
	meta.NextToken = r.NextToken
	r.QueryMeta = meta
	return nil
}

func claimedOn(v *structs.CSIVolume, nodeID string) bool {
	for _, m := range []map[string]*structs.CSIVolumeClaim{v.ReadClaims, v.WriteClaims, v.PastClaims} {
		for _, c := range m {
			if c.NodeID == nodeID {
				return true
			}
		}
	}
	return false
}

// nodeDrain is Node.UpdateDrain as the servers apply it, without a
// drainer: the drain stays on until it is ended.
func (f *fakeBackend) nodeDrain(a *structs.NodeUpdateDrainRequest, r *structs.NodeDrainUpdateResponse) error {
	old := f.nodes[a.NodeID]
	if old == nil {
		return structs.ErrNotFound("node %q not found", a.NodeID)
	}
	n := old.Copy()
	now := time.Now().UTC()
	if a.DrainStrategy != nil {
		d := a.DrainStrategy.Copy()
		d.StartedAt = now
		if d.Deadline > 0 {
			d.ForceDeadline = now.Add(d.Deadline)
		}
		n.DrainStrategy = d
		n.SchedulingEligibility = structs.NodeSchedulingIneligible
		n.LastDrain = &structs.DrainMetadata{StartedAt: now, UpdatedAt: now, Status: structs.DrainStatusDraining, Meta: a.Meta}
	} else {
		n.DrainStrategy = nil
		n.SchedulingEligibility = structs.NodeSchedulingIneligible
		if a.MarkEligible {
			n.SchedulingEligibility = structs.NodeSchedulingEligible
		}
		if n.LastDrain != nil {
			n.LastDrain.Status, n.LastDrain.UpdatedAt = structs.DrainStatusCanceled, now
		}
	}
	f.index++
	n.ModifyIndex = f.index
	f.nodes[n.ID] = n
	r.NodeModifyIndex, r.Index = f.index, f.index
	return nil
}

// nodeEligibility is Node.UpdateEligibility as the servers apply it.
func (f *fakeBackend) nodeEligibility(a *structs.NodeUpdateEligibilityRequest, r *structs.NodeEligibilityUpdateResponse) error {
	if err := a.Validate(); err != nil {
		return err
	}
	old := f.nodes[a.NodeID]
	if old == nil {
		return structs.ErrNotFound("node %q not found", a.NodeID)
	}
	if old.DrainStrategy != nil && a.Eligibility == structs.NodeSchedulingEligible {
		return structs.ErrConflict("node %q: can not set node's scheduling eligibility to eligible while it is draining", a.NodeID)
	}
	n := old.Copy()
	n.SchedulingEligibility = a.Eligibility
	f.index++
	n.ModifyIndex = f.index
	f.nodes[n.ID] = n
	r.NodeModifyIndex, r.Index = f.index, f.index
	return nil
}
