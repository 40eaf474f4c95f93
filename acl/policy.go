// Package acl is volplane's access control language: Nomad's ACL policies
// (rules in HCL, with the same blocks, policy levels and capability names)
// parsed and compiled into an ACL object that answers "may this token do
// that". It holds no state and does no I/O; the servers store policies and
// tokens and decide which ACL a request carries.
//
// A policy is a set of blocks:
//
//	namespace "default" { policy = "read"  capabilities = ["csi-mount-volume"] }
//	namespace "team-*"  { policy = "write" }
//	plugin   { policy = "read" }   # deny, list, read (write is read)
//	node     { policy = "read" }   # deny, read, write
//	operator { policy = "read" }
//	agent    { policy = "read" }
//
// Nomad's other blocks (node_pool, host_volume, quota, and variables inside
// a namespace) are accepted and checked so that a policy written for Nomad
// applies unchanged; they grant nothing in volplane, which has no such
// objects.
package acl

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// Policy levels: the values of `policy = "..."`. When policies are merged
// the most privilege is kept, except deny, which always wins.
const (
	PolicyDeny  = "deny"
	PolicyList  = "list"
	PolicyRead  = "read"
	PolicyWrite = "write"
	PolicyScale = "scale"
)

// Namespace capabilities, by Nomad's names. Those that volplane's endpoints
// check are the CSI ones, list-jobs, read-job and submit-job; the others
// are valid in a policy and grant what Nomad's would where volplane has the
// operation (alloc-lifecycle, read-logs), nothing otherwise.
const (
	NamespaceCapabilityDeny                 = "deny"
	NamespaceCapabilityListJobs             = "list-jobs"
	NamespaceCapabilityParseJob             = "parse-job"
	NamespaceCapabilityReadJob              = "read-job"
	NamespaceCapabilitySubmitJob            = "submit-job"
	NamespaceCapabilityDispatchJob          = "dispatch-job"
	NamespaceCapabilityReadLogs             = "read-logs"
	NamespaceCapabilityReadFS               = "read-fs"
	NamespaceCapabilityAllocExec            = "alloc-exec"
	NamespaceCapabilityAllocNodeExec        = "alloc-node-exec"
	NamespaceCapabilityAllocLifecycle       = "alloc-lifecycle"
	NamespaceCapabilitySentinelOverride     = "sentinel-override"
	NamespaceCapabilityCSIRegisterPlugin    = "csi-register-plugin"
	NamespaceCapabilityCSIWriteVolume       = "csi-write-volume"
	NamespaceCapabilityCSIReadVolume        = "csi-read-volume"
	NamespaceCapabilityCSIListVolume        = "csi-list-volume"
	NamespaceCapabilityCSIMountVolume       = "csi-mount-volume"
	NamespaceCapabilityHostVolumeCreate     = "host-volume-create"
	NamespaceCapabilityHostVolumeRegister   = "host-volume-register"
	NamespaceCapabilityHostVolumeRead       = "host-volume-read"
	NamespaceCapabilityHostVolumeWrite      = "host-volume-write"
	NamespaceCapabilityHostVolumeDelete     = "host-volume-delete"
	NamespaceCapabilityListScalingPolicies  = "list-scaling-policies"
	NamespaceCapabilityReadScalingPolicy    = "read-scaling-policy"
	NamespaceCapabilityReadJobScaling       = "read-job-scaling"
	NamespaceCapabilityScaleJob             = "scale-job"
	NamespaceCapabilitySubmitRecommendation = "submit-recommendation"
	NamespaceCapabilityRegisterJob          = "register-job"
	NamespaceCapabilityRevertJob            = "revert-job"
	NamespaceCapabilityDeregisterJob        = "deregister-job"
	NamespaceCapabilityPurgeJob             = "purge-job"
	NamespaceCapabilityEvaluateJob          = "evaluate-job"
	NamespaceCapabilityPlanJob              = "plan-job"
	NamespaceCapabilityTagJobVersion        = "tag-job-version"
	NamespaceCapabilityStableJob            = "stable-job"
	NamespaceCapabilityFailDeployment       = "fail-deployment"
	NamespaceCapabilityPauseDeployment      = "pause-deployment"
	NamespaceCapabilityPromoteDeployment    = "promote-deployment"
	NamespaceCapabilityUnblockDeployment    = "unblock-deployment"
	NamespaceCapabilityCancelDeployment     = "cancel-deployment"
	NamespaceCapabilitySetAllocHealth       = "set-alloc-health-deployment"
	NamespaceCapabilityGCAllocation         = "gc-allocation"
	NamespaceCapabilityPauseAllocation      = "pause-allocation"
	NamespaceCapabilityForcePeriodicJob     = "force-periodic-job"
	NamespaceCapabilityDeleteServiceReg     = "delete-service-registration"
)

// NamespaceCapabilities lists every valid namespace capability.
func NamespaceCapabilities() []string {
	return slices.Clone(namespaceCapabilities)
}

var namespaceCapabilities = []string{
	NamespaceCapabilityDeny, NamespaceCapabilityListJobs, NamespaceCapabilityParseJob,
	NamespaceCapabilityReadJob, NamespaceCapabilitySubmitJob, NamespaceCapabilityDispatchJob,
	NamespaceCapabilityReadLogs, NamespaceCapabilityReadFS, NamespaceCapabilityAllocExec,
	NamespaceCapabilityAllocNodeExec, NamespaceCapabilityAllocLifecycle, NamespaceCapabilitySentinelOverride,
	NamespaceCapabilityCSIRegisterPlugin, NamespaceCapabilityCSIWriteVolume, NamespaceCapabilityCSIReadVolume,
	NamespaceCapabilityCSIListVolume, NamespaceCapabilityCSIMountVolume, NamespaceCapabilityHostVolumeCreate,
	NamespaceCapabilityHostVolumeRegister, NamespaceCapabilityHostVolumeRead, NamespaceCapabilityHostVolumeWrite,
	NamespaceCapabilityHostVolumeDelete, NamespaceCapabilityListScalingPolicies, NamespaceCapabilityReadScalingPolicy,
	NamespaceCapabilityReadJobScaling, NamespaceCapabilityScaleJob, NamespaceCapabilitySubmitRecommendation,
	NamespaceCapabilityRegisterJob, NamespaceCapabilityRevertJob, NamespaceCapabilityDeregisterJob,
	NamespaceCapabilityPurgeJob, NamespaceCapabilityEvaluateJob, NamespaceCapabilityPlanJob,
	NamespaceCapabilityTagJobVersion, NamespaceCapabilityStableJob, NamespaceCapabilityFailDeployment,
	NamespaceCapabilityPauseDeployment, NamespaceCapabilityPromoteDeployment, NamespaceCapabilityUnblockDeployment,
	NamespaceCapabilityCancelDeployment, NamespaceCapabilitySetAllocHealth, NamespaceCapabilityGCAllocation,
	NamespaceCapabilityPauseAllocation, NamespaceCapabilityForcePeriodicJob, NamespaceCapabilityDeleteServiceReg,
}

// readCapabilities and writeCapabilities are what `policy = "read"` and
// `policy = "write"` expand to in a namespace block, as in Nomad: write is
// read and more. Neither includes csi-register-plugin.
var (
	readCapabilities = []string{
		NamespaceCapabilityListJobs, NamespaceCapabilityParseJob, NamespaceCapabilityReadJob,
		NamespaceCapabilityCSIListVolume, NamespaceCapabilityCSIReadVolume, NamespaceCapabilityReadJobScaling,
		NamespaceCapabilityListScalingPolicies, NamespaceCapabilityReadScalingPolicy, NamespaceCapabilityHostVolumeRead,
	}
	writeCapabilities = append(slices.Clone(readCapabilities),
		NamespaceCapabilityScaleJob, NamespaceCapabilitySubmitJob, NamespaceCapabilityDispatchJob,
		NamespaceCapabilityReadLogs, NamespaceCapabilityReadFS, NamespaceCapabilityAllocExec,
		NamespaceCapabilityAllocLifecycle, NamespaceCapabilityCSIMountVolume, NamespaceCapabilityCSIWriteVolume,
		NamespaceCapabilitySubmitRecommendation, NamespaceCapabilityHostVolumeCreate,
	)
	scaleCapabilities = []string{
		NamespaceCapabilityListScalingPolicies, NamespaceCapabilityReadScalingPolicy, NamespaceCapabilityReadJobScaling,
		NamespaceCapabilityScaleJob, NamespaceCapabilityReadJob, NamespaceCapabilitySubmitRecommendation,
	}
)

// ExpandNamespacePolicy returns the capabilities a namespace policy level
// grants.
func ExpandNamespacePolicy(level string) []string {
	switch level {
	case PolicyDeny:
		return []string{NamespaceCapabilityDeny}
	case PolicyRead:
		return slices.Clone(readCapabilities)
	case PolicyWrite:
		return slices.Clone(writeCapabilities)
	case PolicyScale:
		return slices.Clone(scaleCapabilities)
	}
	return nil
}

// impliedCapabilities are capabilities that come with another, as in
// Nomad's host volume capabilities.
var impliedCapabilities = map[string][]string{
	NamespaceCapabilityHostVolumeWrite: {NamespaceCapabilityHostVolumeRegister, NamespaceCapabilityHostVolumeCreate,
		NamespaceCapabilityHostVolumeDelete, NamespaceCapabilityHostVolumeRead},
	NamespaceCapabilityHostVolumeRegister: {NamespaceCapabilityHostVolumeCreate, NamespaceCapabilityHostVolumeRead},
	NamespaceCapabilityHostVolumeCreate:   {NamespaceCapabilityHostVolumeRead},
}

// Capabilities of the blocks volplane accepts for Nomad's sake.
var (
	operatorCapabilities   = []string{"deny", "snapshot-save", "license-read", "keyring-rotate", "keyring-read", "keyring-delete"}
	nodePoolCapabilities   = []string{"delete", "deny", "read", "write"}
	hostVolumeCapabilities = []string{"deny", "mount-readonly", "mount-readwrite"}
	variableCapabilities   = []string{"list", "read", "write", "destroy", "deny"}
)

// validName is what a namespace, node pool or host volume name in a policy
// may be: Nomad's, with * for globs.
var validName = regexp.MustCompile(`^[a-zA-Z0-9*_-]{1,128}$`)

// MaxRulesBytes bounds a policy's rules: a policy is read on every token
// resolution that misses the cache, and stored on every server.
const MaxRulesBytes = 32 << 10

// Policy is a parsed policy.
type Policy struct {
	// Namespaces are the namespace blocks, each with its capabilities
	// expanded from its policy level.
	Namespaces []*NamespacePolicy
	// Levels of the blocks without labels; "" when the block is absent.
	Plugin, Node, Operator, Agent string
}

// NamespacePolicy is one namespace block: Name is a namespace, or a glob
// with * matching any run of characters.
type NamespacePolicy struct {
	Name         string
	Capabilities []string
}

// ParseError is a policy that does not parse: the line it went wrong on and
// the word at fault (a block type, an attribute, a level or a capability).
type ParseError struct {
	Line int
	Word string
	Msg  string
}

func (e *ParseError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

func errAt(r hcl.Range, word, format string, args ...any) *ParseError {
	return &ParseError{Line: r.Start.Line, Word: word, Msg: fmt.Sprintf(format, args...)}
}

// Parse reads a policy's rules. Every mistake is a *ParseError naming its
// line and the word at fault: an unknown block or attribute, a level or
// capability that does not exist, a block given twice.
func Parse(rules string) (*Policy, error) {
	if len(rules) > MaxRulesBytes {
		return nil, &ParseError{Msg: fmt.Sprintf("the rules are %d bytes, more than the limit of %d", len(rules), MaxRulesBytes)}
	}
	file, diags := hclsyntax.ParseConfig([]byte(rules), "policy.hcl", hcl.InitialPos)
	if diags.HasErrors() {
		d := diags[0]
		pe := &ParseError{Msg: d.Summary}
		if d.Detail != "" {
			pe.Msg += ": " + d.Detail
		}
		if d.Subject != nil {
			pe.Line = d.Subject.Start.Line
			pe.Word = strings.TrimSpace(string(d.Subject.SliceBytes([]byte(rules))))
		}
		return nil, pe
	}
	body := file.Body.(*hclsyntax.Body)
	for _, a := range sortedAttrs(body) {
		return nil, errAt(a.NameRange, a.Name, "unknown attribute %q: a policy holds only blocks (namespace, plugin, node, operator, agent)", a.Name)
	}
	p := &Policy{}
	seen := map[string]hcl.Range{}
	for _, b := range body.Blocks {
		key := strings.Join(append([]string{b.Type}, b.Labels...), " ")
		if first, dup := seen[key]; dup {
			return nil, errAt(b.TypeRange, b.Type, "%s is given twice (first on line %d)", describeBlock(b), first.Start.Line)
		}
		seen[key] = b.TypeRange
		if err := p.addBlock(b); err != nil {
			return nil, err
		}
	}
	if len(body.Blocks) == 0 {
		return nil, &ParseError{Msg: "the policy has no rules: give at least one namespace, plugin, node, operator or agent block"}
	}
	return p, nil
}

func describeBlock(b *hclsyntax.Block) string {
	if len(b.Labels) > 0 {
		return fmt.Sprintf("%s %q", b.Type, b.Labels[0])
	}
	return b.Type
}

// blockSpec says what one kind of block holds.
type blockSpec struct {
	labeled      bool
	levels       []string
	capabilities []string // nil: no capabilities attribute
	nested       map[string]bool
}

var blockSpecs = map[string]blockSpec{
	"namespace":   {labeled: true, levels: []string{PolicyDeny, PolicyRead, PolicyWrite, PolicyScale}, capabilities: namespaceCapabilities, nested: map[string]bool{"variables": true}},
	"plugin":      {levels: []string{PolicyDeny, PolicyList, PolicyRead, PolicyWrite}},
	"node":        {levels: []string{PolicyDeny, PolicyRead, PolicyWrite}},
	"operator":    {levels: []string{PolicyDeny, PolicyRead, PolicyWrite}, capabilities: operatorCapabilities},
	"agent":       {levels: []string{PolicyDeny, PolicyRead, PolicyWrite}},
	"quota":       {levels: []string{PolicyDeny, PolicyRead, PolicyWrite}},
	"node_pool":   {labeled: true, levels: []string{PolicyDeny, PolicyRead, PolicyWrite}, capabilities: nodePoolCapabilities},
	"host_volume": {labeled: true, levels: []string{PolicyDeny, PolicyRead, PolicyWrite}, capabilities: hostVolumeCapabilities},
}

func blockTypes() string {
	names := make([]string, 0, len(blockSpecs))
	for n := range blockSpecs {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func (p *Policy) addBlock(b *hclsyntax.Block) error {
	spec, ok := blockSpecs[b.Type]
	if !ok {
		return errAt(b.TypeRange, b.Type, "unknown block %q: want one of %s", b.Type, blockTypes())
	}
	switch {
	case spec.labeled && len(b.Labels) != 1:
		return errAt(b.TypeRange, b.Type, "%s block needs one name, as in %s \"default\" { ... }", b.Type, b.Type)
	case !spec.labeled && len(b.Labels) != 0:
		return errAt(b.LabelRanges[0], b.Labels[0], "%s block takes no name (got %q)", b.Type, b.Labels[0])
	}
	if spec.labeled && !validName.MatchString(b.Labels[0]) {
		return errAt(b.LabelRanges[0], b.Labels[0], "%s name %q must be 1 to 128 letters, digits, - or _, with * for any run of characters",
			b.Type, b.Labels[0])
	}
	level, caps, err := blockContent(b, spec)
	if err != nil {
		return err
	}
	switch b.Type {
	case "namespace":
		expanded := append(slices.Clone(caps), ExpandNamespacePolicy(level)...)
		for _, c := range caps {
			expanded = append(expanded, impliedCapabilities[c]...)
		}
		slices.Sort(expanded)
		p.Namespaces = append(p.Namespaces, &NamespacePolicy{Name: b.Labels[0], Capabilities: slices.Compact(expanded)})
	case "plugin":
		p.Plugin = level
	case "node":
		p.Node = level
	case "operator":
		p.Operator = level
		if level == "" && slices.Contains(caps, "deny") {
			p.Operator = PolicyDeny
		}
	case "agent":
		p.Agent = level
	}
	return nil
}

// blockContent reads a block's policy and capabilities attributes and
// checks its nested blocks.
func blockContent(b *hclsyntax.Block, spec blockSpec) (level string, caps []string, err error) {
	for _, a := range sortedAttrs(b.Body) {
		switch {
		case a.Name == "policy":
			if level, err = stringAttr(a); err != nil {
				return "", nil, err
			}
			if !slices.Contains(spec.levels, level) {
				return "", nil, errAt(a.Expr.Range(), level, "%s: unknown policy %q: want one of %s",
					describeBlock(b), level, strings.Join(spec.levels, ", "))
			}
		case a.Name == "capabilities" && spec.capabilities != nil:
			if caps, err = capabilityList(b, a, spec.capabilities); err != nil {
				return "", nil, err
			}
		default:
			want := "policy"
			if spec.capabilities != nil {
				want = "policy and capabilities"
			}
			return "", nil, errAt(a.NameRange, a.Name, "%s: unknown attribute %q: want %s", describeBlock(b), a.Name, want)
		}
	}
	for _, nb := range b.Body.Blocks {
		if !spec.nested[nb.Type] {
			return "", nil, errAt(nb.TypeRange, nb.Type, "%s: unknown block %q", describeBlock(b), nb.Type)
		}
		if err := checkVariables(nb); err != nil {
			return "", nil, err
		}
	}
	if level == "" && caps == nil && len(b.Body.Blocks) == 0 {
		return "", nil, errAt(b.TypeRange, b.Type, "%s grants nothing: give a policy or capabilities", describeBlock(b))
	}
	return level, caps, nil
}

// checkVariables checks a namespace's variables block, which volplane
// accepts for Nomad's sake: path "glob" { capabilities = [...] } blocks.
func checkVariables(b *hclsyntax.Block) error {
	if len(b.Labels) != 0 {
		return errAt(b.LabelRanges[0], b.Labels[0], "variables block takes no name (got %q)", b.Labels[0])
	}
	for _, a := range sortedAttrs(b.Body) {
		return errAt(a.NameRange, a.Name, "variables: unknown attribute %q: want path blocks", a.Name)
	}
	if len(b.Body.Blocks) == 0 {
		return errAt(b.TypeRange, b.Type, "variables block has no path blocks")
	}
	for _, pb := range b.Body.Blocks {
		if pb.Type != "path" || len(pb.Labels) != 1 {
			return errAt(pb.TypeRange, pb.Type, "variables: unknown block %q: want path \"glob\" { capabilities = [...] }", pb.Type)
		}
		if strings.HasPrefix(pb.Labels[0], "/") {
			return errAt(pb.LabelRanges[0], pb.Labels[0], "variables path %q must not start with /", pb.Labels[0])
		}
		for _, a := range sortedAttrs(pb.Body) {
			if a.Name != "capabilities" {
				return errAt(a.NameRange, a.Name, "variables path %q: unknown attribute %q: want capabilities", pb.Labels[0], a.Name)
			}
			if _, err := capabilityList(pb, a, variableCapabilities); err != nil {
				return err
			}
		}
	}
	return nil
}

// sortedAttrs returns a body's attributes in source order, so the first
// mistake reported is the first in the file.
func sortedAttrs(body *hclsyntax.Body) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(body.Attributes))
	for _, a := range body.Attributes {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *hclsyntax.Attribute) int { return a.SrcRange.Start.Byte - b.SrcRange.Start.Byte })
	return out
}

// stringAttr evaluates an attribute that must be a literal string.
func stringAttr(a *hclsyntax.Attribute) (string, error) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return "", errAt(a.Expr.Range(), a.Name, "%s must be a string such as \"read\"", a.Name)
	}
	return v.AsString(), nil
}

// capabilityList evaluates a capabilities list, naming the line of the
// first capability that is not one of valid.
func capabilityList(b *hclsyntax.Block, a *hclsyntax.Attribute, valid []string) ([]string, error) {
	tuple, ok := a.Expr.(*hclsyntax.TupleConsExpr)
	if !ok {
		return nil, errAt(a.Expr.Range(), a.Name, "%s: capabilities must be a list of strings such as [\"csi-read-volume\"]", describeBlock(b))
	}
	caps := []string{}
	for _, e := range tuple.Exprs {
		v, diags := e.Value(nil)
		if diags.HasErrors() || v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
			return nil, errAt(e.Range(), "", "%s: capabilities must be strings", describeBlock(b))
		}
		c := v.AsString()
		if !slices.Contains(valid, c) {
			return nil, errAt(e.Range(), c, "%s: unknown capability %q", describeBlock(b), c)
		}
		caps = append(caps, c)
	}
	return caps, nil
}
