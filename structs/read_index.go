package structs

// ReadIndexResponse is the leader's answer to a follower's read-index
// request (Status.ReadIndex): the highest Raft index of the leader's state
// once it has confirmed it still leads. A follower that has applied up to
// Index reflects every write acknowledged before it asked, so it may answer
// a default-consistency read from its own state.
type ReadIndexResponse struct {
	Index uint64
}
