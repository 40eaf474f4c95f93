package httpapi

import (
	"io/fs"
	"net/http"
	"strings"
)

// uiCSP keeps the UI to its own files and its own agent's API: it loads
// nothing from elsewhere, and no injected inline script would run.
const uiCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// uiHandler serves the embedded web UI under /ui/. Its routes live in the
// URL's fragment (/ui/#/volumes), so every page is index.html and the
// server needs no knowledge of them. Bundled assets carry a content hash
// in their names and may be cached for good; index.html may not.
func uiHandler(bundle fs.FS) http.Handler {
	files := http.StripPrefix("/ui/", http.FileServerFS(bundle))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(r.URL.Path, "/ui/assets/") {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		files.ServeHTTP(w, r)
	})
}

// uiRedirect sends a browser that asks for the agent's root to the UI.
func uiRedirect(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusTemporaryRedirect)
}
