package scheduler

import (
	"testing"

	"github.com/shoenig/test/must"
)

func TestAllocIndex(t *testing.T) {
	for name, want := range map[string]int{"web.g[0]": 0, "web.g[12]": 12} {
		i, ok := allocIndex(name, "web", "g")
		must.True(t, ok)
		must.Eq(t, want, i)
	}
	for _, name := range []string{"web.g[]", "web.g[-1]", "web.g[01]", "web.h[1]", "web.g[1", "other.g[1]", "web.g[99999999999999999999]"} {
		_, ok := allocIndex(name, "web", "g")
		must.False(t, ok, must.Sprint(name))
	}
}
