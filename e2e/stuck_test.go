package e2e

import (
	"testing"

	"github.com/shoenig/test/must"
)

// TestStuckGoroutines: a dump's stacks of volplane or Raft, compacted, the
// same stack once with its count whatever its goroutine's number, creator
// or wait; others left out.
func TestStuckGoroutines(t *testing.T) {
	t.Parallel()
	dump := `SIGQUIT: quit
PC=0x47a1c1 m=0 sigcode=0

goroutine 5 gp=0xc000 m=nil [select, 2 minutes]:
runtime.gopark(0x1?, 0x2?)
	/usr/local/go/src/runtime/proc.go:462 +0xce fp=0x1 sp=0x2 pc=0x3
github.com/volplane/volplane/rpc.(*ConnPool).reap(0xc0001)
	/src/rpc/pool.go:120 +0x5f fp=0x1 sp=0x2 pc=0x3
created by github.com/volplane/volplane/rpc.NewPool in goroutine 1
	/src/rpc/pool.go:90 +0x1a

goroutine 9 gp=0xc001 m=nil [select]:
runtime.gopark(0x1?, 0x2?)
	/usr/local/go/src/runtime/proc.go:462 +0xce
github.com/volplane/volplane/rpc.(*ConnPool).reap(0xc0002)
	/src/rpc/pool.go:120 +0x5f
created by github.com/volplane/volplane/rpc.NewPool in goroutine 4
	/src/rpc/pool.go:90 +0x1a

goroutine 12 gp=0xc002 m=nil [chan receive]:
github.com/hashicorp/raft.(*deferError).Error(0xc0003)
	/mod/raft/future.go:106 +0x4c
github.com/volplane/volplane/server.(*Server).setupLeadership(0xc0004, 0x1)
	/src/server/leader.go:162 +0x2a

goroutine 20 gp=0xc003 m=nil [IO wait]:
net/http.(*conn).serve(0xc0005)
	/usr/local/go/src/net/http/server.go:2000 +0x1
`
	must.Eq(t, []string{
		"2 x [select]\n  github.com/volplane/volplane/rpc.(*ConnPool).reap\n  created by github.com/volplane/volplane/rpc.NewPool",
		"1 x [chan receive]\n  github.com/hashicorp/raft.(*deferError).Error\n  github.com/volplane/volplane/server.(*Server).setupLeadership",
	}, stuckGoroutines(dump))
}
