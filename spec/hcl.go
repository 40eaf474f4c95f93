package spec

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/volplane/volplane/structs"
)

// hclVolume is the HCL schema of a volume specification, as in Nomad. The
// string-map blocks (secrets, parameters, context) are taken out of the body
// before it is decoded into this struct; see takeMaps.
type hclVolume struct {
	ID         string `hcl:"id"`
	Type       string `hcl:"type"`
	Name       string `hcl:"name,optional"`
	Namespace  string `hcl:"namespace,optional"`
	ExternalID string `hcl:"external_id,optional"`
	PluginID   string `hcl:"plugin_id,optional"`
	CloneID    string `hcl:"clone_id,optional"`
	SnapshotID string `hcl:"snapshot_id,optional"`

	// Capacities are a size string ("10GiB") or a number of bytes, so they
	// are evaluated by hand.
	CapacityMin hcl.Expression `hcl:"capacity_min,optional"`
	CapacityMax hcl.Expression `hcl:"capacity_max,optional"`

	Capabilities    []*hclCapability    `hcl:"capability,block"`
	MountOptions    *hclMountOptions    `hcl:"mount_options,block"`
	TopologyRequest *hclTopologyRequest `hcl:"topology_request,block"`

	TypeRange hcl.Range `hcl:"type,attr_value_range"`
}

type hclCapability struct {
	AccessMode     string `hcl:"access_mode"`
	AttachmentMode string `hcl:"attachment_mode"`
}

type hclMountOptions struct {
	FSType     string   `hcl:"fs_type,optional"`
	MountFlags []string `hcl:"mount_flags,optional"`
}

type hclTopologyRequest struct {
	Required  *hclTopologies `hcl:"required,block"`
	Preferred *hclTopologies `hcl:"preferred,block"`
}

type hclTopologies struct {
	Topologies []*hclTopology `hcl:"topology,block"`
}

// hclTopology keeps its body so that segments can be read by takeMaps.
type hclTopology struct {
	Body hcl.Body `hcl:",remain"`
}

// parseHCL parses and decodes an HCL volume specification. Every problem
// is reported, each with its file, line and column.
func parseHCL(filename string, src []byte) (*structs.CSIVolume, error) {
	file, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	// A file of comments only parses fine; say so instead of listing every
	// missing argument.
	if body, ok := file.Body.(*hclsyntax.Body); ok && len(body.Attributes) == 0 && len(body.Blocks) == 0 {
		return nil, fmt.Errorf("%s: volume specification is empty", filename)
	}

	maps, rest, diags := takeMaps(file.Body, "secrets", "parameters", "context")
	var spec hclVolume
	diags = append(diags, gohcl.DecodeBody(rest, nil, &spec)...)
	if diags.HasErrors() {
		return nil, diagError(nameValueErrors(file.Body, diags))
	}
	if spec.Type != structs.VolumeTypeCSI {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unsupported volume type",
			Detail:   fmt.Sprintf("The volume type must be %q, not %q.", structs.VolumeTypeCSI, spec.Type),
			Subject:  spec.TypeRange.Ptr(),
		})
	}
	if spec.ID == "" {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing volume ID",
			Detail:   `The argument "id" must not be empty.`,
			Subject:  file.Body.MissingItemRange().Ptr(),
		})
	}

	vol := &structs.CSIVolume{
		ID:         spec.ID,
		Name:       spec.Name,
		Namespace:  spec.Namespace,
		ExternalID: spec.ExternalID,
		PluginID:   spec.PluginID,
		CloneID:    spec.CloneID,
		SnapshotID: spec.SnapshotID,
		Secrets:    structs.CSISecrets(maps["secrets"]),
		Parameters: maps["parameters"],
		Context:    maps["context"],
	}
	var d hcl.Diagnostics
	vol.RequestedCapacityMin, d = capacity("capacity_min", spec.CapacityMin)
	diags = append(diags, d...)
	vol.RequestedCapacityMax, d = capacity("capacity_max", spec.CapacityMax)
	diags = append(diags, d...)

	for _, c := range spec.Capabilities {
		vol.RequestedCapabilities = append(vol.RequestedCapabilities, &structs.CSIVolumeCapability{
			AccessMode:     structs.CSIVolumeAccessMode(c.AccessMode),
			AttachmentMode: structs.CSIVolumeAttachmentMode(c.AttachmentMode),
		})
	}
	if m := spec.MountOptions; m != nil {
		vol.MountOptions = &structs.CSIMountOptions{FSType: m.FSType, MountFlags: m.MountFlags}
	}
	if tr := spec.TopologyRequest; tr != nil {
		vol.RequestedTopologies = &structs.CSITopologyRequest{}
		vol.RequestedTopologies.Required, d = topologies(tr.Required)
		diags = append(diags, d...)
		vol.RequestedTopologies.Preferred, d = topologies(tr.Preferred)
		diags = append(diags, d...)
	}
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	return vol, nil
}

func topologies(t *hclTopologies) ([]*structs.CSITopology, hcl.Diagnostics) {
	if t == nil {
		return nil, nil
	}
	var out []*structs.CSITopology
	var diags hcl.Diagnostics
	for _, top := range t.Topologies {
		maps, rest, d := takeMaps(top.Body, "segments")
		diags = append(diags, d...)
		// Anything but segments in a topology block is an error.
		diags = append(diags, gohcl.DecodeBody(rest, nil, &struct{}{})...)
		out = append(out, &structs.CSITopology{Segments: maps["segments"]})
	}
	return out, diags
}

// takeMaps reads string maps out of body, each written either as a block
// (secrets { k = "v" }, as in Nomad) or as an attribute
// (secrets = { "k.with.dots" = "v" }, for keys that are not identifiers).
// It returns the maps by name and the rest of the body. A name that is absent
// has no entry, so an empty block still gives an empty, non-nil map.
func takeMaps(body hcl.Body, names ...string) (map[string]map[string]string, hcl.Body, hcl.Diagnostics) {
	schema := &hcl.BodySchema{}
	for _, n := range names {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: n})
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: n})
	}
	content, rest, diags := body.PartialContent(schema)
	out := map[string]map[string]string{}
	for _, block := range content.Blocks {
		if _, dup := out[block.Type]; dup || content.Attributes[block.Type] != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", block.Type),
				Detail:   fmt.Sprintf("Only one %s block (or attribute) is allowed.", block.Type),
				Subject:  block.DefRange.Ptr(),
			})
			continue
		}
		attrs, d := block.Body.JustAttributes()
		diags = append(diags, d...)
		m := make(map[string]string, len(attrs))
		for name, attr := range attrs {
			s, d := stringValue(block.Type+"."+name, attr.Expr)
			diags = append(diags, d...)
			m[name] = s
		}
		out[block.Type] = m
	}
	for name, attr := range content.Attributes {
		m, d := stringMapValue(name, attr.Expr)
		diags = append(diags, d...)
		out[name] = m
	}
	return out, rest, diags
}

// stringValue evaluates a constant expression as a string; numbers and
// booleans are accepted and converted, as an operator would expect.
func stringValue(what string, expr hcl.Expression) (string, hcl.Diagnostics) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return "", diags
	}
	if !v.IsNull() {
		if sv, err := convert.Convert(v, cty.String); err == nil {
			return sv.AsString(), nil
		}
	}
	return "", hcl.Diagnostics{{
		Severity: hcl.DiagError,
		Summary:  "Incorrect value type",
		Detail:   fmt.Sprintf("The value of %s must be a string, not %s.", what, friendlyType(v)),
		Subject:  expr.Range().Ptr(),
	}}
}

func stringMapValue(name string, expr hcl.Expression) (map[string]string, hcl.Diagnostics) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		return nil, diags
	}
	ty := v.Type()
	if v.IsNull() || !(ty.IsObjectType() || ty.IsMapType()) {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Incorrect value type",
			Detail:   fmt.Sprintf("The value of %s must be a map of strings, not %s.", name, friendlyType(v)),
			Subject:  expr.Range().Ptr(),
		}}
	}
	out := map[string]string{}
	for it := v.ElementIterator(); it.Next(); {
		k, ev := it.Element()
		key := k.AsString()
		sv, err := convert.Convert(ev, cty.String)
		if err != nil || sv.IsNull() {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Incorrect value type",
				Detail:   fmt.Sprintf("The value of %s[%q] must be a string, not %s.", name, key, friendlyType(ev)),
				Subject:  expr.Range().Ptr(),
			})
			continue
		}
		out[key] = sv.AsString()
	}
	return out, diags
}

// capacity evaluates capacity_min or capacity_max: a size string such as
// "10GiB" or a whole number of bytes. Absent means 0 (no requirement).
func capacity(name string, expr hcl.Expression) (int64, hcl.Diagnostics) {
	if expr == nil {
		return 0, nil
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() || v.IsNull() {
		return 0, diags
	}
	fail := func(detail string) (int64, hcl.Diagnostics) {
		return 0, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Invalid " + name,
			Detail:   detail,
			Subject:  expr.Range().Ptr(),
		}}
	}
	switch v.Type() {
	case cty.String:
		n, err := ParseSize(v.AsString())
		if err != nil {
			return fail(err.Error() + ".")
		}
		return n, nil
	case cty.Number:
		bf := v.AsBigFloat()
		i, acc := bf.Int64()
		if acc != big.Exact || !bf.IsInt() || i < 0 {
			return fail(fmt.Sprintf("%s must be a whole, non-negative number of bytes that fits in 64 bits, not %s.",
				name, bf.Text('g', -1)))
		}
		return i, nil
	}
	return fail(fmt.Sprintf(`%s must be a size such as "10GiB" or a number of bytes, not %s.`, name, friendlyType(v)))
}

func friendlyType(v cty.Value) string {
	if v.IsNull() {
		return "null"
	}
	ty := v.Type()
	switch {
	case ty == cty.String:
		return "a string"
	case ty == cty.Number:
		return "a number"
	case ty == cty.Bool:
		return "a bool"
	case ty.IsListType() || ty.IsTupleType() || ty.IsSetType():
		return "a list"
	case ty.IsObjectType() || ty.IsMapType():
		return "a map"
	}
	return ty.FriendlyName()
}

// nameValueErrors adds the attribute's name to gohcl's "Unsuitable value
// type" diagnostics, which otherwise only point at the value.
func nameValueErrors(body hcl.Body, diags hcl.Diagnostics) hcl.Diagnostics {
	syn, ok := body.(*hclsyntax.Body)
	if !ok {
		return diags
	}
	names := map[hcl.Pos]string{}
	_ = hclsyntax.VisitAll(syn, func(n hclsyntax.Node) hcl.Diagnostics {
		if a, ok := n.(*hclsyntax.Attribute); ok {
			names[a.Expr.StartRange().Start] = a.Name
		}
		return nil
	})
	for _, d := range diags {
		if d.Summary != "Unsuitable value type" || d.Subject == nil {
			continue
		}
		if name, ok := names[d.Subject.Start]; ok {
			d.Summary = fmt.Sprintf("Incorrect value type for %q", name)
			d.Detail = strings.TrimPrefix(d.Detail, "Unsuitable value: ")
		}
	}
	return diags
}

// diagError formats every error diagnostic as "file:line:col: summary:
// detail", one per line, in the order they appear in the file.
func diagError(diags hcl.Diagnostics) error {
	errs := slices.DeleteFunc(slices.Clone(diags), func(d *hcl.Diagnostic) bool { return d.Severity != hcl.DiagError })
	slices.SortStableFunc(errs, func(a, b *hcl.Diagnostic) int { return startOf(a) - startOf(b) })
	var lines []string
	for _, d := range errs {
		where := ""
		if d.Subject != nil {
			where = fmt.Sprintf("%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		lines = append(lines, where+msg)
	}
	return errors.New(strings.Join(slices.Compact(lines), "\n"))
}

func startOf(d *hcl.Diagnostic) int {
	if d.Subject == nil {
		return 0
	}
	return d.Subject.Start.Byte
}
