package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/volplane/volplane/mock"
	"github.com/volplane/volplane/structs"
)

// eventLine is what the isolation test reads of an event.
type eventLine struct {
	Topic, Type, Key, Namespace string
	Error                       string
}

// subscribe streams the events token may see, from index 1, until the test
// ends.
func subscribe(t *testing.T, s *Server, token string) (<-chan eventLine, *http.Response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr()+"/v1/event/stream?index=1", nil)
	must.NoError(t, err)
	req.Header.Set("X-Nomad-Token", token)
	resp, err := http.DefaultClient.Do(req)
	must.NoError(t, err)
	out := make(chan eventLine, 1024)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			// Frames of events, in Nomad's framing, or the last line.
			var frame struct {
				Events []eventLine
				Error  string
			}
			if json.Unmarshal(sc.Bytes(), &frame) != nil {
				continue
			}
			for _, ev := range frame.Events {
				out <- ev
			}
			if frame.Error != "" {
				out <- eventLine{Error: frame.Error}
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close(); wg.Wait() })
	return out, resp
}

// waitEvent reads events until one with key comes, and returns those read.
func waitEvent(t *testing.T, ch <-chan eventLine, key string) []eventLine {
	t.Helper()
	var seen []eventLine
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended before an event of %q; saw %+v", key, seen)
			}
			seen = append(seen, ev)
			if ev.Key == key {
				return seen
			}
		case <-timeout:
			t.Fatalf("no event of %q; saw %+v", key, seen)
		}
	}
}

func volumeIn(ns string) *structs.CSIVolume {
	v := mock.CSIVolume("dev")
	v.Namespace = ns
	return v
}

// TestACL_NamespaceIsolation: two namespaces, two tokens; each token sees
// only its own namespace's volumes, in lists (one namespace, all, by
// prefix, by pages), detail reads, blocking queries and the event stream,
// and can write only there.
func TestACL_NamespaceIsolation(t *testing.T) {
	s, mgmt := aclTestServer(t, nil)
	registerNode(t, s, "dev")
	nsReq := &structs.NamespaceUpsertRequest{Namespaces: []*structs.Namespace{{Name: "a"}, {Name: "b"}}}
	nsReq.AuthToken = mgmt
	must.NoError(t, s.RPC("Namespace.UpsertNamespaces", nsReq, &structs.GenericResponse{}))
	tokA := tokenWith(t, s, mgmt, `namespace "a" { policy = "write" }
plugin { policy = "read" }`).SecretID
	tokB := tokenWith(t, s, mgmt, `namespace "b" { policy = "write" }
plugin { policy = "read" }`).SecretID

	register := func(token string, vols ...*structs.CSIVolume) error {
		req := &structs.CSIVolumeRegisterRequest{Volumes: vols}
		req.AuthToken = token
		return s.RPC("CSIVolume.Register", req, &structs.CSIVolumeRegisterResponse{})
	}
	list := func(token, ns, prefix string, perPage int32, next string) (*structs.CSIVolumeListResponse, error) {
		req := &structs.CSIVolumeListRequest{}
		req.AuthToken, req.Namespace, req.Prefix, req.PerPage, req.NextToken = token, ns, prefix, perPage, next
		var reply structs.CSIVolumeListResponse
		return &reply, s.RPC("CSIVolume.List", req, &reply)
	}
	ids := func(r *structs.CSIVolumeListResponse) []string {
		var out []string
		for _, v := range r.Volumes {
			out = append(out, v.Namespace+"/"+v.ID)
		}
		return out
	}

	eventsA, _ := subscribe(t, s, tokA)
	eventsB, _ := subscribe(t, s, tokB)

	// Each token writes in its namespace only; a volume naming another
	// namespace in the body is checked there.
	a1, a2, b1 := volumeIn("a"), volumeIn("a"), volumeIn("b")
	must.ErrorIs(t, register(tokA, b1), structs.ErrPermissionDenied)
	must.ErrorIs(t, register(tokA, a1, b1), structs.ErrPermissionDenied, must.Sprint("all or nothing"))
	must.NoError(t, register(tokB, b1))

	// A blocking list over every namespace, by A, waiting for the next
	// write: a write in b may wake it, but it never shows b's volume.
	first, err := list(tokA, "*", "", 0, "")
	must.NoError(t, err)
	must.SliceEmpty(t, first.Volumes)
	blocked := make(chan *structs.CSIVolumeListResponse, 1)
	go func() {
		req := &structs.CSIVolumeListRequest{}
		req.AuthToken, req.Namespace = tokA, "*"
		req.MinQueryIndex, req.MaxQueryTime = first.Index, 20*time.Second
		var reply structs.CSIVolumeListResponse
		if err := s.RPC("CSIVolume.List", req, &reply); err != nil {
			t.Errorf("blocking list: %v", err)
		}
		blocked <- &reply
	}()
	must.NoError(t, register(tokA, a1, a2))
	woke := <-blocked
	for _, v := range woke.Volumes {
		must.Eq(t, "a", v.Namespace, must.Sprint("the blocking query showed another namespace's volume"))
	}

	// Lists: one namespace, all of them, by prefix, by pages.
	_, err = list(tokA, "b", "", 0, "")
	must.ErrorIs(t, err, structs.ErrPermissionDenied)
	r, err := list(tokA, "a", "", 0, "")
	must.NoError(t, err)
	must.SliceContainsAll(t, []string{"a/" + a1.ID, "a/" + a2.ID}, ids(r))
	r, err = list(tokA, "*", "", 0, "")
	must.NoError(t, err)
	must.SliceContainsAll(t, []string{"a/" + a1.ID, "a/" + a2.ID}, ids(r))
	r, err = list(tokA, "*", b1.ID, 0, "")
	must.NoError(t, err)
	must.SliceEmpty(t, r.Volumes)
	r, err = list(mgmt, "*", "", 0, "")
	must.NoError(t, err)
	must.Len(t, 3, r.Volumes)
	// Pages of one: full pages, and no next token names b's volume.
	var paged []string
	next := ""
	for {
		r, err = list(tokA, "*", "", 1, next)
		must.NoError(t, err)
		paged = append(paged, ids(r)...)
		must.StrNotContains(t, r.NextToken, b1.ID)
		if r.NextToken == "" {
			break
		}
		must.Len(t, 1, r.Volumes)
		next = r.NextToken
	}
	must.SliceContainsAll(t, []string{"a/" + a1.ID, "a/" + a2.ID}, paged)
	rb, err := list(tokB, "*", "", 0, "")
	must.NoError(t, err)
	must.Eq(t, []string{"b/" + b1.ID}, ids(rb))

	// Detail reads: b's volume is refused in b and absent in a.
	get := func(token, ns, id string) (*structs.CSIVolume, error) {
		req := &structs.CSIVolumeGetRequest{ID: id}
		req.AuthToken, req.Namespace = token, ns
		var reply structs.CSIVolumeGetResponse
		return reply.Volume, s.RPC("CSIVolume.Get", req, &reply)
	}
	_, err = get(tokA, "b", b1.ID)
	must.ErrorIs(t, err, structs.ErrPermissionDenied)
	v, err := get(tokA, "a", b1.ID)
	must.NoError(t, err)
	must.Nil(t, v)
	v, err = get(tokA, "a", a1.ID)
	must.NoError(t, err)
	must.Eq(t, a1.ID, v.ID)

	// The event streams: A's shows a's volumes and never b's, B's the
	// other way round. b's volume was registered first, so an event of it
	// in A's stream would come before a's.
	for _, ev := range waitEvent(t, eventsA, a2.ID) {
		must.NotEq(t, b1.ID, ev.Key, must.Sprintf("A's stream showed %+v", ev))
		if ev.Namespace != "" {
			must.Eq(t, "a", ev.Namespace)
		}
	}
	// Another write to a, so B's stream has something after b's volume
	// that it must not show.
	a3 := volumeIn("a")
	must.NoError(t, register(tokA, a3))
	b2 := volumeIn("b")
	must.NoError(t, register(tokB, b2))
	for _, ev := range waitEvent(t, eventsB, b2.ID) {
		for _, a := range []string{a1.ID, a2.ID, a3.ID} {
			must.NotEq(t, a, ev.Key, must.Sprintf("B's stream showed %+v", ev))
		}
	}

	// A deleted token's stream ends, saying why.
	del := &structs.ACLTokenDeleteRequest{AccessorIDs: []string{tokenAccessor(t, s, tokB)}}
	del.AuthToken = mgmt
	must.NoError(t, s.RPC("ACL.DeleteTokens", del, &structs.GenericResponse{}))
	must.NoError(t, register(tokA, volumeIn("a")))
	deadline := time.After(20 * time.Second)
	for ended := false; !ended; {
		select {
		case ev, ok := <-eventsB:
			must.True(t, ok, must.Sprint("B's stream ended without saying why"))
			if ev.Error != "" {
				must.StrContains(t, ev.Error, "ACL token not found")
				ended = true
			}
			must.NotEq(t, "a", ev.Namespace, must.Sprintf("B's stream showed %+v", ev))
		case <-deadline:
			t.Fatal("the stream of a deleted token did not end")
		}
	}
	_, err = list(tokB, "b", "", 0, "")
	must.ErrorIs(t, err, structs.ErrTokenNotFound)
}

func tokenAccessor(t *testing.T, s *Server, secret string) string {
	t.Helper()
	req := &structs.GenericRequest{}
	req.AuthToken = secret
	var reply structs.SingleACLTokenResponse
	must.NoError(t, s.RPC("ACL.ResolveToken", req, &reply))
	return reply.Token.AccessorID
}

// TestACL_EventStreamRefused: a subscription with a token that does not
// resolve is a 403 before anything streams.
func TestACL_EventStreamRefused(t *testing.T) {
	s, _ := aclTestServer(t, nil)
	status, body := httpAs(t, s, http.MethodGet, "/v1/event/stream", "", "garbage")
	must.Eq(t, http.StatusForbidden, status)
	must.Eq(t, "ACL token not found", body)
}
