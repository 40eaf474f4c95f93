package command

import (
	"fmt"
	"strings"

	"github.com/volplane/volplane/api"
)

// lookup finds the object an operator named: the exact ID when info finds
// it, else the one object whose ID starts with what was typed, as Nomad's
// status commands do. list returns the stubs of the candidates for a
// prefix, and idOf a stub's ID; the IDs are filtered here as well, so a
// server that ignores ?prefix is fine.
func lookup[T, S any](kind, id string, info func(string) (T, error), list func(prefix string) ([]S, error),
	idOf func(S) string) (T, error) {
	return lookupNamed(kind, id, info, func() ([]S, error) { return list(id) }, idOf, nil)
}

// lookupNamed is lookup for objects that also go by a name (nodes): after
// the exact ID, the candidates are every object whose ID starts with what
// was typed or, when nameOf is set, whose name is exactly it. When several
// are, the error lists each, with its name and why it matched. listAll
// returns the objects to look through: every one when names count, since a
// name cannot be looked up by ID prefix.
func lookupNamed[T, S any](kind, id string, info func(string) (T, error), listAll func() ([]S, error),
	idOf, nameOf func(S) string) (T, error) {
	v, err := info(id)
	if err == nil || !api.IsNotFound(err) {
		return v, err
	}
	stubs, lerr := listAll()
	if lerr != nil {
		// The exact lookup's "not found" says more than a failed list.
		return v, err
	}
	var ids, described []string
	for _, s := range stubs {
		sid := idOf(s)
		var how []string
		if strings.HasPrefix(sid, id) && sid != id {
			how = append(how, "ID prefix")
		}
		if nameOf != nil && nameOf(s) == id {
			how = append(how, "name")
		}
		if len(how) == 0 {
			continue
		}
		ids = append(ids, sid)
		if nameOf != nil {
			described = append(described, fmt.Sprintf("%s (name %q, by %s)", sid, nameOf(s), strings.Join(how, " and ")))
		}
	}
	switch {
	case len(ids) == 0:
		return v, err
	case len(ids) == 1:
		return info(ids[0])
	case nameOf == nil:
		return v, fmt.Errorf("prefix %q matched %d %s: %s", id, len(ids), kind, strings.Join(ids, ", "))
	}
	return v, fmt.Errorf("%q matched %d %s by ID prefix or name: %s", id, len(ids), kind, strings.Join(described, "; "))
}
