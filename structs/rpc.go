package structs

import "time"

// Default namespace of every object when a request names none.
const DefaultNamespace = "default"

// RPCInfo is implemented by every request, so the forwarding layer can decide
// where a request is served.
type RPCInfo interface {
	RequestNamespace() string
	IsRead() bool
	AllowStaleRead() bool
	IsForwarded() bool
	SetForwarded()
	LeaderTermOf() uint64
	SetLeaderTerm(term uint64)
}

// InternalRPCInfo carries the forwarding mark across servers.
type InternalRPCInfo struct {
	// Forwarded is set by a server that passed the request on, so the next
	// server does not count the connection as the caller's own.
	Forwarded bool
	// LeaderTerm is the Raft term of the leader a server forwarded the
	// request to: only the leader of that term may act on it. A request
	// that reaches its server late (a frozen leader, thawed after another
	// was elected and the forwarder had answered its caller) is refused,
	// not run long after its caller heard another answer.
	LeaderTerm uint64
}

func (i *InternalRPCInfo) IsForwarded() bool         { return i.Forwarded }
func (i *InternalRPCInfo) SetForwarded()             { i.Forwarded = true }
func (i *InternalRPCInfo) LeaderTermOf() uint64      { return i.LeaderTerm }
func (i *InternalRPCInfo) SetLeaderTerm(term uint64) { i.LeaderTerm = term }

// WriteRequest is embedded in every request that changes state.
type WriteRequest struct {
	Region    string
	Namespace string
	AuthToken string
	InternalRPCInfo
}

func (w *WriteRequest) RequestNamespace() string {
	if w.Namespace == "" {
		return DefaultNamespace
	}
	return w.Namespace
}
func (w *WriteRequest) IsRead() bool         { return false }
func (w *WriteRequest) AllowStaleRead() bool { return false }

// QueryOptions is embedded in every read request.
type QueryOptions struct {
	Region    string
	Namespace string
	AuthToken string

	// MinQueryIndex makes the query block until the result's index is above
	// it, or MaxQueryTime passes.
	MinQueryIndex uint64
	MaxQueryTime  time.Duration

	// AllowStale lets any server answer from its own state.
	AllowStale bool

	Prefix    string
	PerPage   int32 // at most MaxPerPage
	NextToken string

	InternalRPCInfo
}

func (q *QueryOptions) RequestNamespace() string {
	if q.Namespace == "" {
		return DefaultNamespace
	}
	return q.Namespace
}
func (q *QueryOptions) IsRead() bool         { return true }
func (q *QueryOptions) AllowStaleRead() bool { return q.AllowStale }

// Bounds of blocking queries: the default and the longest wait, and the
// jitter fraction added so that many waiters do not wake at once.
const (
	DefaultBlockingQueryTime = 5 * time.Minute
	MaxBlockingQueryTime     = 10 * time.Minute
	BlockingQueryJitterFrac  = 16
)

// QueryMeta is embedded in every read reply.
type QueryMeta struct {
	// Index is the Raft index the result reflects; a blocking query passes it
	// back as MinQueryIndex.
	Index uint64
	// LastContact is the time since this server last heard from the leader;
	// zero on the leader.
	LastContact time.Duration
	KnownLeader bool
	NextToken   string
}

// WriteMeta is embedded in every write reply.
type WriteMeta struct {
	Index uint64
}

// GenericRequest is for RPCs that take no arguments of their own.
type GenericRequest struct {
	QueryOptions
}

// GenericResponse is for writes that return only the index.
type GenericResponse struct {
	WriteMeta
}

// MaxPerPage bounds the page size a caller may ask for.
const MaxPerPage = 10_000
