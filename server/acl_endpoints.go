package server

import (
	"errors"

	"github.com/hashicorp/raft"

	"github.com/volplane/volplane/acl"
	"github.com/volplane/volplane/metrics"
	"github.com/volplane/volplane/structs"
)

// ruleKind says how the caller of an endpoint is authorized.
type ruleKind int

const (
	// ruleOpen: anyone, with or without a token (status, the bootstrap,
	// metrics), as in Nomad.
	ruleOpen ruleKind = iota
	// ruleServer: servers only, between themselves or for themselves (a
	// controller call a server makes while registering a volume). No HTTP
	// route leads to it; on the network the certificate roles of the RPC
	// port (rpcAccess) guard it, as Nomad's server-only endpoints are.
	ruleServer
	// ruleNode: a client agent acting for its own node, authenticated by
	// the node secret in the request, which the endpoint checks.
	ruleNode
	// ruleToken: a token that resolves and has every need of the rule.
	ruleToken
)

func (k ruleKind) String() string {
	return [...]string{"open", "server", "node", "token"}[k]
}

// aclArea is what a need is about.
type aclArea int

const (
	areaNamespace aclArea = iota
	areaPlugin
	areaNode
	areaOperator
	areaAgent
	areaManagement
)

// aclNeed is one thing a caller must be allowed.
type aclNeed struct {
	area aclArea
	// level is the least policy level of a plugin, node, operator or
	// agent need: list, read or write.
	level string
	// caps is a namespace need: any one of these capabilities.
	caps []string
	// ns is the namespace of a namespace need: "" for the request's,
	// acl.AllNamespaces for any namespace (the endpoint then shows only
	// what each namespace allows).
	ns string
}

// aclRule is what calling one endpoint takes.
type aclRule struct {
	kind  ruleKind
	needs []aclNeed
	// extra are needs that depend on the request: the namespaces of the
	// volumes it registers, the CSI volumes of a job.
	extra func(args any) []aclNeed
	// check is a further condition on the caller and the request, for the
	// endpoints where a token reads what is its own.
	check func(id *identity, args any) bool
	// node lets a client node's secret, sent as the token, call the
	// endpoint; the endpoint then shows it only what concerns its node.
	node bool
}

func openRule() aclRule   { return aclRule{kind: ruleOpen} }
func serverRule() aclRule { return aclRule{kind: ruleServer} }
func nodeRule() aclRule   { return aclRule{kind: ruleNode} }

func tokenRule(needs ...aclNeed) aclRule { return aclRule{kind: ruleToken, needs: needs} }

func nsNeed(caps ...string) aclNeed { return aclNeed{area: areaNamespace, caps: caps} }
func anyNsNeed(caps ...string) aclNeed {
	return aclNeed{area: areaNamespace, caps: caps, ns: acl.AllNamespaces}
}
func pluginNeed(level string) aclNeed { return aclNeed{area: areaPlugin, level: level} }
func nodeNeed(level string) aclNeed   { return aclNeed{area: areaNode, level: level} }
func operatorNeed(l string) aclNeed   { return aclNeed{area: areaOperator, level: l} }
func managementNeed() aclNeed         { return aclNeed{area: areaManagement} }
func agentNeed(l string) aclNeed      { return aclNeed{area: areaAgent, level: l} }

const (
	levelList  = acl.PolicyList
	levelRead  = acl.PolicyRead
	levelWrite = acl.PolicyWrite
)

// Capability sets of the volume reads, as Nomad's.
var (
	volumeListCaps = []string{acl.NamespaceCapabilityCSIListVolume, acl.NamespaceCapabilityCSIReadVolume,
		acl.NamespaceCapabilityCSIMountVolume, acl.NamespaceCapabilityListJobs}
	volumeReadCaps = []string{acl.NamespaceCapabilityCSIReadVolume, acl.NamespaceCapabilityCSIMountVolume,
		acl.NamespaceCapabilityReadJob}
)

// aclRules is the one table of what each endpoint takes when ACLs are on:
// every RPC method, and the HTTP routes that make no RPC call (under a
// name of their own). Every HTTP route names its endpoint here
// (httpapi.RouteEndpoint). A method without a row is refused to everyone;
// TestACL_EveryEndpoint fails when an endpoint or a route has none.
var aclRules = map[string]aclRule{
	"Status.Ping":        openRule(),
	"Status.Leader":      openRule(),
	"Status.Peers":       openRule(),
	"Status.Join":        serverRule(),
	"Status.HasNodeConn": serverRule(),
	// A follower asks the leader's read index for itself, before it
	// answers a read locally.
	"Status.ReadIndex": serverRule(),

	"Operator.RaftListPeers":   tokenRule(operatorNeed(levelRead)),
	"Operator.RaftRemovePeer":  tokenRule(operatorNeed(levelWrite)),
	"Operator.Security":        tokenRule(operatorNeed(levelRead)),
	"Operator.NodeIntroCreate": tokenRule(nodeNeed(levelWrite)),
	"Operator.NodeIntroList":   tokenRule(nodeNeed(levelRead)),
	"Operator.NodeIntroDelete": tokenRule(nodeNeed(levelWrite)),

	// Nomad's scheduler configuration read: operator read.
	"Operator.SchedulerGetConfiguration": tokenRule(operatorNeed(levelRead)),

	// The keyring: Nomad's operator keyring-read and keyring-rotate, which
	// operator read and write grant. The export of the key-encryption key
	// is a server's to another.
	"Keyring.List":      tokenRule(operatorNeed(levelRead)),
	"Keyring.Rotate":    tokenRule(operatorNeed(levelWrite)),
	"Keyring.ExportKEK": serverRule(),
	"Keyring.ImportKEK": serverRule(),

	"Node.Register":        nodeRule(),
	"Node.UpdateStatus":    nodeRule(),
	"Node.GetClientAllocs": nodeRule(),
	"Node.UpdateAlloc":     nodeRule(),
	"Node.GetNode":         tokenRule(nodeNeed(levelRead)),
	"Node.List":            tokenRule(nodeNeed(levelRead)),
	// Node.GetAllocs takes node read, and shows the allocations of the
	// namespaces the token may read jobs in.
	"Node.GetAllocs": tokenRule(nodeNeed(levelRead)),
	// Drain and eligibility: Nomad's node write.
	"Node.UpdateDrain":       tokenRule(nodeNeed(levelWrite)),
	"Node.UpdateEligibility": tokenRule(nodeNeed(levelWrite)),

	"CSIVolume.Claim":      nodeRule(),
	"CSIVolume.Get":        {kind: ruleToken, needs: []aclNeed{nsNeed(volumeReadCaps...)}, node: true},
	"CSIVolume.List":       tokenRule(nsNeed(volumeListCaps...)),
	"CSIVolume.Register":   {kind: ruleToken, needs: []aclNeed{pluginNeed(levelRead)}, extra: volumeNamespaces},
	"CSIVolume.Create":     {kind: ruleToken, needs: []aclNeed{pluginNeed(levelRead)}, extra: volumeNamespaces},
	"CSIVolume.Deregister": tokenRule(nsNeed(acl.NamespaceCapabilityCSIWriteVolume)),
	"CSIVolume.Delete":     tokenRule(nsNeed(acl.NamespaceCapabilityCSIWriteVolume), pluginNeed(levelRead)),
	// Detaching by hand is Nomad's volume detach (CSIVolume.Unpublish).
	"CSIVolume.Detach": tokenRule(nsNeed(acl.NamespaceCapabilityCSIMountVolume), pluginNeed(levelRead)),
	// Snapshots and the provider's volumes, as Nomad's.
	"CSIVolume.CreateSnapshot": tokenRule(nsNeed(acl.NamespaceCapabilityCSIWriteVolume), pluginNeed(levelRead)),
	"CSIVolume.DeleteSnapshot": tokenRule(nsNeed(acl.NamespaceCapabilityCSIWriteVolume), pluginNeed(levelRead)),
	"CSIVolume.ListSnapshots":  tokenRule(nsNeed(acl.NamespaceCapabilityCSIListVolume), pluginNeed(levelRead)),
	"CSIVolume.ListExternal":   tokenRule(nsNeed(acl.NamespaceCapabilityCSIListVolume), pluginNeed(levelRead)),
	"CSIPlugin.List":           tokenRule(pluginNeed(levelList)),
	"CSIPlugin.Get":            tokenRule(pluginNeed(levelRead)),

	"Job.Register":    {kind: ruleToken, extra: jobNeeds},
	"Job.Deregister":  tokenRule(nsNeed(acl.NamespaceCapabilitySubmitJob)),
	"Job.GetJob":      tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),
	"Job.List":        tokenRule(nsNeed(acl.NamespaceCapabilityListJobs, acl.NamespaceCapabilityReadJob)),
	"Job.Allocations": tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),

	// A plan takes what registering the job would, as Nomad's. Listing
	// jobs (above) takes list-jobs or read-job: a token that may read a
	// job may see that it exists, and the evaluations, found by ID among
	// every job, take read-job, as Nomad's.
	"Job.Plan": {kind: ruleToken, extra: jobNeeds},
	// Routes that read a job and derive Nomad's objects from it (summary,
	// evaluations, deployments), and the validation of a job: Nomad's
	// read-job.
	"Job.Summary":          tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),
	"Job.Evaluations":      tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),
	"Job.LatestDeployment": tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),
	"Job.Deployments":      tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),
	"Job.Validate":         tokenRule(nsNeed(acl.NamespaceCapabilityReadJob)),
	// Evaluations are found by ID in any namespace; each shows only where
	// its job may be read.
	"Eval.GetEval":     tokenRule(anyNsNeed(acl.NamespaceCapabilityReadJob)),
	"Eval.List":        tokenRule(anyNsNeed(acl.NamespaceCapabilityReadJob)),
	"Eval.Allocations": tokenRule(anyNsNeed(acl.NamespaceCapabilityReadJob)),
	// Allocations are read by ID whatever the request's namespace: the
	// endpoint shows one only where its own namespace allows read-job.
	"Alloc.GetAlloc": tokenRule(anyNsNeed(acl.NamespaceCapabilityReadJob)),
	"Alloc.List":     tokenRule(anyNsNeed(acl.NamespaceCapabilityReadJob)),

	"ClientCSI.NodeDetachVolume":         serverRule(),
	"ClientCSI.ControllerAttachVolume":   serverRule(),
	"ClientCSI.ControllerDetachVolume":   serverRule(),
	"ClientCSI.ControllerValidateVolume": serverRule(),
	"ClientCSI.ControllerCreateVolume":   serverRule(),
	"ClientCSI.ControllerDeleteVolume":   serverRule(),
	"ClientCSI.ControllerCreateSnapshot": serverRule(),
	"ClientCSI.ControllerDeleteSnapshot": serverRule(),
	"ClientCSI.ControllerListSnapshots":  serverRule(),
	"ClientCSI.ControllerListVolumes":    serverRule(),
	"ClientCSI.ControllerExpandVolume":   serverRule(),
	"ClientCSI.NodeExpandVolume":         serverRule(),

	// A forced garbage collection, as Nomad's system gc: management.
	"System.GarbageCollect": tokenRule(managementNeed()),

	"ACL.Bootstrap":      openRule(),
	"ACL.UpsertPolicies": tokenRule(managementNeed()),
	"ACL.DeletePolicies": tokenRule(managementNeed()),
	// Any token lists policies; it sees its own (all for management).
	"ACL.ListPolicies": tokenRule(),
	"ACL.GetPolicy":    {kind: ruleToken, check: mayReadPolicy},
	"ACL.UpsertTokens": tokenRule(managementNeed()),
	"ACL.DeleteTokens": tokenRule(managementNeed()),
	"ACL.ListTokens":   tokenRule(managementNeed()),
	"ACL.GetToken":     {kind: ruleToken, check: mayReadToken},
	"ACL.ResolveToken": tokenRule(),

	// Any token lists namespaces; it sees those it may do anything in.
	"Namespace.ListNamespaces":   tokenRule(),
	"Namespace.GetNamespace":     {kind: ruleToken, check: maySeeNamespace},
	"Namespace.UpsertNamespaces": tokenRule(managementNeed()),
	"Namespace.DeleteNamespaces": tokenRule(managementNeed()),

	// HTTP routes without an RPC call. Each event of the stream is shown
	// only to a token that may read its object (eventFilter).
	"Event.Stream":  tokenRule(),
	"Agent.Metrics": openRule(),
	// The agent routes, as Nomad's: self takes agent read, members node
	// read; health and the region list are open.
	"Agent.Self":    tokenRule(agentNeed(levelRead)),
	"Agent.Members": tokenRule(nodeNeed(levelRead)),
	"Agent.Health":  openRule(),
	"Region.List":   openRule(),
	// The web UI's files are public, as Nomad's; what it reads takes the
	// token it sends.
	"Agent.UI": openRule(),
	// Profiling the agent (GET /v1/agent/pprof/...): agent write, as
	// Nomad's Agent.Profile; with ACLs off, enable_debug (authorizeDebug).
	"Agent.Pprof": tokenRule(aclNeed{area: areaAgent, level: levelWrite}),

	// A task's logs: Nomad's read-logs in the allocation's namespace.
	"FileSystem.Logs": tokenRule(nsNeed(acl.NamespaceCapabilityReadLogs)),
}

// volumeNamespaces: writing volumes takes csi-write-volume in each
// volume's namespace (the request's for a volume that names none).
func volumeNamespaces(args any) []aclNeed {
	var vols []*structs.CSIVolume
	var reqNs string
	switch r := args.(type) {
	case *structs.CSIVolumeRegisterRequest:
		vols, reqNs = r.Volumes, r.RequestNamespace()
	case *structs.CSIVolumeCreateRequest:
		vols, reqNs = r.Volumes, r.RequestNamespace()
	}
	need := func(n string) aclNeed {
		return aclNeed{area: areaNamespace, caps: []string{acl.NamespaceCapabilityCSIWriteVolume}, ns: n}
	}
	out := []aclNeed{}
	for _, v := range vols {
		if v != nil && v.Namespace != "" {
			out = append(out, need(v.Namespace))
		} else {
			out = append(out, need(reqNs))
		}
	}
	if len(out) == 0 {
		out = append(out, need(reqNs))
	}
	return out
}

// jobNeeds: registering a job takes submit-job in its namespace, for a
// job that runs a CSI plugin csi-register-plugin there, and, for a job that
// mounts CSI volumes, csi-mount-volume there and plugin read, as in Nomad.
func jobNeeds(args any) []aclNeed {
	var job *structs.Job
	var jobNs string
	switch r := args.(type) {
	case *structs.JobRegisterRequest:
		job, jobNs = r.Job, r.RequestNamespace()
	case *structs.JobPlanRequest:
		job, jobNs = r.Job, r.RequestNamespace()
	default:
		return []aclNeed{nsNeed(acl.NamespaceCapabilitySubmitJob)}
	}
	if job != nil && job.Namespace != "" {
		jobNs = job.Namespace
	}
	out := []aclNeed{{area: areaNamespace, caps: []string{acl.NamespaceCapabilitySubmitJob}, ns: jobNs}}
	if job == nil {
		return out
	}
	if job.IsPlugin() {
		// A job that runs a CSI plugin takes csi-register-plugin, as in
		// Nomad.
		out = append(out, aclNeed{area: areaNamespace, caps: []string{acl.NamespaceCapabilityCSIRegisterPlugin}, ns: jobNs})
	}
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		for _, v := range tg.Volumes {
			if v != nil && (v.Type == structs.VolumeTypeCSI || v.Type == "") {
				return append(out, aclNeed{area: areaNamespace, caps: []string{acl.NamespaceCapabilityCSIMountVolume}, ns: jobNs},
					pluginNeed(levelRead))
			}
		}
	}
	return out
}

// mayReadPolicy: management tokens read every policy, others those they
// hold, and anyone the anonymous policy, as in Nomad.
func mayReadPolicy(id *identity, args any) bool {
	r, ok := args.(*structs.ACLPolicySpecificRequest)
	if !ok || id.token == nil {
		return false
	}
	return id.token.IsManagement() || r.Name == structs.AnonymousPolicyName ||
		(id.token != anonymousToken && contains(id.token.Policies, r.Name))
}

// mayReadToken: management tokens read every token, others themselves.
func mayReadToken(id *identity, args any) bool {
	r, ok := args.(*structs.ACLTokenSpecificRequest)
	if !ok || id.token == nil {
		return false
	}
	return id.token.IsManagement() || (id.token != anonymousToken && id.token.AccessorID == r.AccessorID)
}

// maySeeNamespace: a token sees a namespace it may do anything in.
func maySeeNamespace(id *identity, args any) bool {
	r, ok := args.(*structs.NamespaceSpecificRequest)
	return ok && id.acl.AllowNamespace(r.Name)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// allows reports whether the identity may call an endpoint of the rule
// with args.
func (r aclRule) allows(id *identity, args any) bool {
	if id.nodeID != "" {
		return r.node
	}
	reqNs := structs.DefaultNamespace
	if info, ok := args.(structs.RPCInfo); ok {
		reqNs = info.RequestNamespace()
	}
	needs := r.needs
	if r.extra != nil {
		needs = append(append([]aclNeed(nil), needs...), r.extra(args)...)
	}
	for _, n := range needs {
		if !id.has(n, reqNs) {
			return false
		}
	}
	return r.check == nil || r.check(id, args)
}

// has reports whether the identity has one need, for a request in reqNs.
func (id *identity) has(n aclNeed, reqNs string) bool {
	a := id.acl
	switch n.area {
	case areaNamespace:
		target := n.ns
		if target == "" {
			target = reqNs
		}
		return a.AllowNsOpAnyOf(target, n.caps...)
	case areaPlugin:
		if n.level == levelList {
			return a.AllowPluginList()
		}
		return a.AllowPluginRead()
	case areaNode:
		if n.level == levelWrite {
			return a.AllowNodeWrite()
		}
		return a.AllowNodeRead()
	case areaOperator:
		if n.level == levelWrite {
			return a.AllowOperatorWrite()
		}
		return a.AllowOperatorRead()
	case areaAgent:
		if n.level == levelWrite {
			return a.AllowAgentWrite()
		}
		return a.AllowAgentRead()
	case areaManagement:
		return a.IsManagement()
	}
	return false
}

// authorize checks a request against its endpoint's row of aclRules. It
// runs where forward runs: on the server that receives the request and
// again on the leader it is forwarded to. A token this server does not know
// (yet: it may lag the leader) is left to the leader when the request goes
// there; a stale read is answered here and decided here.
func (s *Server) authorize(method string, info structs.RPCInfo, args any) error {
	return s.authorizeWith(method, args, s.leaderDecides(info))
}

// authorizeWith is authorize, told whether a leader will check the request
// again (then a token this server does not know yet is left to it).
func (s *Server) authorizeWith(method string, args any, leaderDecides bool) error {
	if !s.config.ACLEnabled {
		return nil
	}
	rule, ok := aclRules[method]
	if !ok {
		return s.denied(method, nil, structs.ErrPermissionDenied)
	}
	if rule.kind != ruleToken {
		return nil
	}
	id, err := s.aclIdentity(args)
	if err != nil {
		if errors.Is(err, structs.ErrTokenNotFound) && leaderDecides {
			return nil
		}
		return s.denied(method, nil, err)
	}
	if !rule.allows(id, args) {
		return s.denied(method, id, structs.ErrPermissionDenied)
	}
	return nil
}

// leaderDecides reports whether the request will be forwarded to a leader
// that checks it against the latest state.
func (s *Server) leaderDecides(info structs.RPCInfo) bool {
	if info == nil || (info.IsRead() && info.AllowStaleRead()) {
		return false
	}
	_, leader := s.raft.LeaderWithID()
	return leader != raft.ServerID(s.nodeID)
}

// denied counts and logs a refusal and returns err. Neither the log nor
// the error ever carries the secret: the accessor names the token.
func (s *Server) denied(method string, id *identity, err error) error {
	metrics.ACLDenied(method)
	accessor := ""
	if id != nil && id.token != nil {
		accessor = id.token.AccessorID
	}
	s.logger.Debug("permission denied", "endpoint", method, "accessor_id", accessor, "node_id", nodeIDOf(id),
		"reason", structs.MessageOf(err))
	return err
}

func nodeIDOf(id *identity) string {
	if id == nil {
		return ""
	}
	return id.nodeID
}

// authorizeDebug decides whether a request may use the profiling routes,
// as Nomad's Agent.Profile does: with ACLs on, a token with agent write
// (the Agent.Pprof row); with ACLs off, only when the agent runs with
// enable_debug.
func (s *Server) authorizeDebug(token string) error {
	if !s.config.ACLEnabled {
		if !s.config.EnableDebug {
			return s.denied("Agent.Pprof", nil, structs.ErrPermissionDenied)
		}
		return nil
	}
	req := &structs.GenericRequest{QueryOptions: structs.QueryOptions{AuthToken: token}}
	return s.authorizeWith("Agent.Pprof", req, false)
}
