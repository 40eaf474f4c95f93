// Package ui is volplane's web UI. Its source is under src/ (Preact,
// built with Vite: npm ci && npm run build); the built bundle in dist/ is
// committed and embedded here, so that the agent serves it (at /ui/) with
// no build step of its own. CI rebuilds the bundle and fails when it
// differs from the committed one.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Bundle returns the built UI, index.html at its root.
func Bundle() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// fs.Sub fails only on an invalid path, which "dist" is not.
		panic(err)
	}
	return sub
}
