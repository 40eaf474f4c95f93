package command

import (
	"fmt"
	"strings"

	"github.com/volplane/volplane/api"
)

// lookup finds the object an operator named: the exact ID when info finds
// it, else the one object whose ID starts with what was typed, as Nomad's
// status commands do. list returns candidate IDs for a prefix; it is
// filtered here as well, so a server that ignores ?prefix is fine.
func lookup[T any](kind, id string, info func(string) (T, error), list func(prefix string) ([]string, error)) (T, error) {
	v, err := info(id)
	if err == nil || !api.IsNotFound(err) {
		return v, err
	}
	ids, lerr := list(id)
	if lerr != nil {
		// The exact lookup's "not found" says more than a failed list.
		return v, err
	}
	var matches []string
	for _, m := range ids {
		if strings.HasPrefix(m, id) && m != id {
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
