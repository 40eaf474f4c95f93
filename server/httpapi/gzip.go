package httpapi

import (
	"bytes"
	"net/http"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// Responses are compressed when the client asks (Accept-Encoding: gzip,
// which Nomad's api client and Go's http client send) and the body is
// large enough to gain from it. klauspost/compress is used rather than
// compress/gzip for its speed at BestSpeed: a list of 10,000 volumes
// (4.7 MB of JSON) compresses several times faster, which is what keeps
// compression from costing the list more than it saves on the wire.
const (
	gzipMinSize = 1400
	// gzipCachedMin is the size from which a compressed body is kept for
	// the next identical answer (a list polled at an unchanged index).
	gzipCachedMin = 256 << 10
	// gzipCachedBodies is how many such bodies are kept.
	gzipCachedBodies = 4
)

var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
			if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
				return true
			}
		}
	}
	return false
}

func gzipBytes(body []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(body) / 6)
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(body)
	_ = zw.Close()
	gzipWriters.Put(zw)
	return buf.Bytes()
}

// gzipRecent keeps the compressed form of the last few large bodies, each
// with its plain form, which a new body must equal byte for byte to reuse
// it.
type gzipRecent struct {
	mu      sync.Mutex
	entries []gzipEntry
}

type gzipEntry struct{ plain, gz []byte }

// compress returns body gzipped. A shared body (never changed by anyone)
// is kept as it is rather than copied, and found again by its address
// (sameSlice) without a comparison.
func (g *gzipRecent) compress(body []byte, shared bool) []byte {
	if len(body) < gzipCachedMin {
		return gzipBytes(body)
	}
	g.mu.Lock()
	for _, e := range g.entries {
		if sameSlice(e.plain, body) || bytes.Equal(e.plain, body) {
			g.mu.Unlock()
			return e.gz
		}
	}
	g.mu.Unlock()
	gz := gzipBytes(body)
	g.mu.Lock()
	if len(g.entries) == gzipCachedBodies {
		copy(g.entries, g.entries[1:])
		g.entries = g.entries[:len(g.entries)-1]
	}
	plain := body
	if !shared {
		// The caller's buffer is reused once written: keep a copy.
		plain = bytes.Clone(body)
	}
	g.entries = append(g.entries, gzipEntry{plain: plain, gz: gz})
	g.mu.Unlock()
	return gz
}
