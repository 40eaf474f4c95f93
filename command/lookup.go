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
