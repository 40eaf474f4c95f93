package httpapi

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/volplane/volplane/structs"
)

// params parses the query string strictly: a malformed one is refused
// rather than half read, which r.URL.Query() would do silently.
func params(r *http.Request) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, structs.ErrInvalid("malformed query string: %v", err)
	}
	return v, nil
}

// has reports whether the parameter is present, with or without a value.
func has(v url.Values, name string) bool {
	_, ok := v[name]
	return ok
}

// parseQueryOptions fills the options every read takes from the query
// string and the token header.
func parseQueryOptions(r *http.Request, q *structs.QueryOptions) (url.Values, error) {
	v, err := params(r)
	if err != nil {
		return nil, err
	}
	q.Region = v.Get("region")
	q.Namespace = v.Get("namespace")
	q.AuthToken = r.Header.Get(headerToken)
	q.Prefix = v.Get("prefix")
	q.NextToken = v.Get("next_token")

	if s := v.Get("index"); s != "" {
		index, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, structs.ErrInvalid("invalid index %q: must be a non-negative integer", s)
		}
		q.MinQueryIndex = index
	}
	if s := v.Get("wait"); s != "" {
		wait, err := parseWait(s)
		if err != nil {
			return nil, err
		}
		q.MaxQueryTime = wait
	}
	if has(v, "stale") {
		// Nomad's client sends a bare "stale"; an explicit false is honoured.
		stale, err := optionalBool(v, "stale", true)
		if err != nil {
			return nil, err
		}
		q.AllowStale = stale
	}
	if s := v.Get("per_page"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 0 || n > structs.MaxPerPage {
			return nil, structs.ErrInvalid("invalid per_page %q: must be an integer from 0 to %d", s, structs.MaxPerPage)
		}
		q.PerPage = int32(n)
	}
	// Silently ignoring these would return a different answer than the
	// caller asked for, so they are refused until they are supported.
	if v.Get("filter") != "" {
		return nil, structs.ErrInvalid("the filter parameter is not supported")
	}
	if reverse, err := optionalBool(v, "reverse", false); err != nil {
		return nil, err
	} else if reverse {
		return nil, structs.ErrInvalid("the reverse parameter is not supported")
	}
	return v, nil
}

// parseWait reads a blocking query's wait: a Go duration ("30s", "5m",
// "1500ms" as Nomad's client sends it) or plain seconds ("30"). It is capped
// at structs.MaxBlockingQueryTime.
func parseWait(s string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n > uint64(structs.MaxBlockingQueryTime/time.Second) {
			return structs.MaxBlockingQueryTime, nil
		}
		d = time.Duration(n) * time.Second
	} else {
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, structs.ErrInvalid("invalid wait %q: must be a duration such as \"30s\" or a number of seconds", s)
		}
	}
	if d < 0 {
		return 0, structs.ErrInvalid("invalid wait %q: must not be negative", s)
	}
	return min(d, structs.MaxBlockingQueryTime), nil
}

// optionalBool reads a boolean parameter; absent gives def, present without
// a value gives true.
func optionalBool(v url.Values, name string, def bool) (bool, error) {
	if !has(v, name) {
		return def, nil
	}
	s := v.Get(name)
	if s == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(s))
	if err != nil {
		return false, structs.ErrInvalid("invalid %s %q: must be true or false", name, s)
	}
	return b, nil
}

// parseWriteRequest fills the options every write takes.
func parseWriteRequest(r *http.Request, w *structs.WriteRequest) (url.Values, error) {
	v, err := params(r)
	if err != nil {
		return nil, err
	}
	w.Region = v.Get("region")
	w.Namespace = v.Get("namespace")
	w.AuthToken = r.Header.Get(headerToken)
	return v, nil
}

// setMeta writes a read's X-Nomad-* headers.
func setMeta(w http.ResponseWriter, m *structs.QueryMeta) {
	setIndex(w, m.Index)
	w.Header().Set(headerKnownLeader, strconv.FormatBool(m.KnownLeader))
	w.Header().Set(headerLastContact, strconv.FormatInt(m.LastContact.Milliseconds(), 10))
	if m.NextToken != "" {
		w.Header().Set(headerNextToken, m.NextToken)
	}
}

// setIndex writes a write's X-Nomad-Index header.
func setIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set(headerIndex, strconv.FormatUint(index, 10))
}
