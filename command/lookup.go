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
	v, err := info(id)
	if err == nil || !api.IsNotFound(err) {
		return v, err
	}
	stubs, lerr := list(id)
	if lerr != nil {
		// The exact lookup's "not found" says more than a failed list.
		return v, err
	}
	var matches []string
	for _, s := range stubs {
		if m := idOf(s); strings.HasPrefix(m, id) && m != id {
			matches = append(matches, m)
		}
	}
	switch len(matches) {
	case 0:
		return v, err
	case 1:
		return info(matches[0])
	}
	return v, fmt.Errorf("prefix %q matched %d %s: %s", id, len(matches), kind, strings.Join(matches, ", "))
}

// lookupNamed is lookup for objects that also go by a name (nodes): after
// the exact ID, the candidates are every object whose ID starts with what
// was typed or whose name is exactly it. When several are, the error lists
// each with its name and why it matched. listAll returns every object,
// since a name cannot be looked up by ID prefix.
func lookupNamed[T, S any](kind, id string, info func(string) (T, error), listAll func() ([]S, error),
	idOf, nameOf func(S) string) (T, error) {
	v, err := info(id)
	if err == nil || !api.IsNotFound(err) {
		return v, err
	}
	stubs, lerr := listAll()
	if lerr != nil {
		return v, err
	}
	var matches []string
	var ids []string
	for _, s := range stubs {
		sid, name := idOf(s), nameOf(s)
		var how []string
		if strings.HasPrefix(sid, id) && sid != id {
			how = append(how, "ID prefix")
		}
		if name == id {
			how = append(how, "name")
		}
		if len(how) > 0 {
			ids = append(ids, sid)
			matches = append(matches, fmt.Sprintf("%s (name %q, by %s)", sid, name, strings.Join(how, " and ")))
		}
	}
	switch len(ids) {
	case 0:
		return v, err
	case 1:
		return info(ids[0])
	}
	return v, fmt.Errorf("%q matched %d %s by ID prefix or name: %s", id, len(ids), kind, strings.Join(matches, "; "))
}
