package serverconn

import (
	"testing"

	"github.com/shoenig/test/must"
)

// Servers named in replies join the list the client fails over to.
func TestServerList_Learn(t *testing.T) {
	l := NewList([]string{"a:1"})
	l.Learn(nil)
	must.Eq(t, []string{"a:1"}, l.All())
	l.Learn([]string{"b:1", "a:1", "c:1", "b:1"})
	must.Eq(t, []string{"a:1", "b:1", "c:1"}, l.All())
	must.Eq(t, "a:1", l.Get())
	l.Failed("a:1")
	must.Eq(t, "b:1", l.Get())
	l.Failed("a:1") // someone else already moved on
	must.Eq(t, "b:1", l.Get())
	l.Failed("b:1")
	l.Failed("c:1")
	must.Eq(t, "a:1", l.Get(), must.Sprint("the list wraps around"))
	l.Learn([]string{"d:1"})
	must.Eq(t, []string{"a:1", "d:1"}, l.All(), must.Sprint("configured servers stay"))
}
