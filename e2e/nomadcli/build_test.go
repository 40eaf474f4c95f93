package nomadcli

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// The module proxy's refusal, as the go command reports it, becomes the
// one skip line, quoting the proxy's answer.
func TestBuildError_ProxyRefusal(t *testing.T) {
	out := "go: downloading github.com/hashicorp/nomad v1.10.5\n" +
		"go: github.com/hashicorp/nomad@v1.10.5: reading https://proxy.golang.org/github.com/hashicorp/nomad/@v/v1.10.5.zip: 403 Forbidden\n" +
		"\tserver response: This module version is not available.\n"
	err := buildError(errors.New("exit status 1"), out)
	var unavailable *UnavailableError
	must.True(t, errors.As(err, &unavailable), must.Sprint(err))
	must.Eq(t, "nomadcli: skipped: the Nomad CLI v1.10.5 cannot be built here: the module proxy refused it: "+
		"github.com/hashicorp/nomad@v1.10.5: reading https://proxy.golang.org/github.com/hashicorp/nomad/@v/v1.10.5.zip: 403 Forbidden "+
		"(server response: This module version is not available.)", unavailable.SkipLine())
	must.False(t, strings.Contains(unavailable.SkipLine(), "\n"))

	// Without the server's words, the status alone.
	err = buildError(errors.New("exit status 1"), "go: example.com/m@v1.0.0: reading https://proxy.example/example.com/m/@v/v1.0.0.info: 410 Gone\n")
	must.True(t, errors.As(err, &unavailable))
	must.Eq(t, "the module proxy refused it: example.com/m@v1.0.0: reading https://proxy.example/example.com/m/@v/v1.0.0.info: 410 Gone", unavailable.Answer)

	// No network at all is no reason to fail either.
	err = buildError(errors.New("exit status 1"), "go: github.com/hashicorp/nomad@v1.10.5: Get \"https://proxy.golang.org/github.com/hashicorp/nomad/@v/v1.10.5.info\": dial tcp: lookup proxy.golang.org: no such host\n")
	must.True(t, errors.As(err, &unavailable))
	must.StrContains(t, unavailable.Answer, "no module proxy could be reached: ")

	// A compile error is a failure, with the whole output.
	err = buildError(errors.New("exit status 1"), "# github.com/hashicorp/nomad/command\ncommand/x.go:1:1: undefined: y\n")
	must.False(t, errors.As(err, &unavailable))
	must.StrContains(t, err.Error(), "undefined: y")
}

// The whole build step against a proxy that refuses, as proxy.golang.org
// refuses github.com/hashicorp/nomad: the go command runs for real, and
// the refusal comes back as an *UnavailableError quoting the answer. No
// binary is left in the cache.
func TestBuilder_ProxyRefuses(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("This module version is not available.\n"))
	}))
	t.Cleanup(proxy.Close)

	dir := t.TempDir()
	b := Builder{
		Path: filepath.Join(dir, "cache", "nomad-"+NomadVersion, "nomad"),
		Env: []string{"GOPROXY=" + proxy.URL, "GOSUMDB=off", "GONOSUMDB=", "GOPRIVATE=", "GONOPROXY=",
			"GOMODCACHE=" + filepath.Join(dir, "modcache"), "GOFLAGS=-modcacherw"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := b.Binary(ctx)
	var unavailable *UnavailableError
	must.True(t, errors.As(err, &unavailable), must.Sprint(err))
	must.StrContains(t, unavailable.SkipLine(), "the module proxy refused it: ")
	must.StrContains(t, unavailable.SkipLine(), ": 403 Forbidden (server response: This module version is not available.)")
	must.StrContains(t, unavailable.SkipLine(), proxy.URL+"/github.com/hashicorp/")
	t.Log(unavailable.SkipLine())
	_, statErr := os.Stat(b.Path)
	must.True(t, errors.Is(statErr, os.ErrNotExist))
}

// A binary already in the cache is used without building.
func TestBuilder_Cached(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nomad")
	must.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755))
	got, err := Builder{Path: path, Env: []string{"GOPROXY=off"}}.Binary(context.Background())
	must.NoError(t, err)
	must.Eq(t, path, got)
}

// The cache is per version, under $XDG_CACHE_HOME.
func TestCachePath(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/var/cache/u")
	path, err := CachePath()
	must.NoError(t, err)
	must.Eq(t, "/var/cache/u/volplane/nomad-v1.10.5/nomad", path)
}
