package structs

import (
	"maps"
	"regexp"
)

// Bounds of a namespace, as Nomad's where it has them.
const (
	MaxNamespaceDescription = 256
	MaxNamespaceMetaKeys    = 64
	MaxNamespaceMetaBytes   = 4096
)

// validNamespaceName is a namespace name, as Nomad's.
var validNamespaceName = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)

// Namespace groups volumes and jobs so that ACL policies can grant access to
// some and not others. The default namespace always exists, whether or not
// an operator wrote it.
type Namespace struct {
	Name        string
	Description string
	Meta        map[string]string

	CreateIndex uint64
	ModifyIndex uint64
}

// DefaultNamespaceObject is the default namespace as it reads before an
// operator changes its description.
func DefaultNamespaceObject() *Namespace {
	return &Namespace{Name: DefaultNamespace, Description: "Default shared namespace"}
}

// Copy returns a deep copy.
func (n *Namespace) Copy() *Namespace {
	if n == nil {
		return nil
	}
	c := *n
	c.Meta = maps.Clone(n.Meta)
	return &c
}

// Validate checks a namespace as an operator writes it.
func (n *Namespace) Validate() error {
	var m MultiError
	if err := ValidateNamespaceName(n.Name); err != nil {
		m.AddErr(err)
	}
	if len(n.Description) > MaxNamespaceDescription {
		m.Add("description is longer than %d characters", MaxNamespaceDescription)
	}
	if len(n.Meta) > MaxNamespaceMetaKeys {
		m.Add("%d meta keys is more than the limit of %d", len(n.Meta), MaxNamespaceMetaKeys)
	}
	size := 0
	for k, v := range n.Meta {
		size += len(k) + len(v)
	}
	if size > MaxNamespaceMetaBytes {
		m.Add("meta is %d bytes, more than the limit of %d", size, MaxNamespaceMetaBytes)
	}
	return m.ErrorOrNil("namespace " + quoteName(n.Name))
}

// ValidateNamespaceName checks a namespace name.
func ValidateNamespaceName(name string) error {
	if !validNamespaceName.MatchString(name) {
		return ErrInvalid("namespace name %q must be 1 to 128 letters, digits and dashes", truncate(name, 64))
	}
	return nil
}

// NamespaceUpsertRequest creates or updates namespaces, all or nothing.
type NamespaceUpsertRequest struct {
	Namespaces []*Namespace
	WriteRequest
}

// NamespaceDeleteRequest deletes namespaces by name, all or nothing: a
// namespace that still holds volumes or jobs is not deleted.
type NamespaceDeleteRequest struct {
	Namespaces []string
	WriteRequest
}

// NamespaceListRequest lists namespaces, by name prefix.
type NamespaceListRequest struct {
	QueryOptions
}

// NamespaceListResponse carries the namespaces the token may see.
type NamespaceListResponse struct {
	Namespaces []*Namespace
	QueryMeta
}

// NamespaceSpecificRequest reads one namespace.
type NamespaceSpecificRequest struct {
	Name string
	QueryOptions
}

// SingleNamespaceResponse carries one namespace, nil when unknown.
type SingleNamespaceResponse struct {
	Namespace *Namespace
	QueryMeta
}
