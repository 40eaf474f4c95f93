package state

import (
	"github.com/hashicorp/go-memdb"

	"github.com/volplane/volplane/structs"
)

// ACL event types, as Nomad's.
const (
	EventACLTokenUpserted  = "ACLTokenUpserted"
	EventACLTokenDeleted   = "ACLTokenDeleted"
	EventACLPolicyUpserted = "ACLPolicyUpserted"
	EventACLPolicyDeleted  = "ACLPolicyDeleted"
)

// aclEvent is the event of one changed token or policy row. A token's
// payload never carries its secret's hash (the store never has the secret).
func aclEvent(index uint64, ch memdb.Change) Event {
	row := ch.After
	if ch.Deleted() {
		row = ch.Before
	}
	switch v := row.(type) {
	case *structs.ACLToken:
		typ := EventACLTokenUpserted
		if ch.Deleted() {
			typ = EventACLTokenDeleted
		}
		return Event{Index: index, Topic: TopicACLToken, Type: typ, Key: v.AccessorID, Payload: v.Public()}
	default:
		p := v.(*structs.ACLPolicy)
		typ := EventACLPolicyUpserted
		if ch.Deleted() {
			typ = EventACLPolicyDeleted
		}
		return Event{Index: index, Topic: TopicACLPolicy, Type: typ, Key: p.Name, Payload: p.Copy()}
	}
}
